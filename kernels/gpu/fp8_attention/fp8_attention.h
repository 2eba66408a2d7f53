// FP8 attention (ZYFA numerics, DESIGN §4) on CUDA sm_90a: the entry point
// the CUDA backend calls. e4m3fn only (e4m3fnuz is UNIMPLEMENTED here);
// (d_qk, d_v) = (128, 128) or (192, 128); causal or not; GQA; BHSD or BSHD;
// exact, lean or naive P; bf16 inputs are quantized on the GPU exactly as
// numerics::QuantizeFp8 does (per tensor or per head, optional Hadamard of
// Q and K computed in fp64 and rounded once to fp32), so the FP8 codes equal
// the oracle's. P codes equal the oracle's except where the fp32 score (or
// fp32 exp2 for exact P) differs from fp64 in the last bits.
#ifndef KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_H_
#define KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_H_

#include <cuda_runtime_api.h>  // cudaStream_t

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace gpu {

// Which kernel runs. kAuto (what the backend serves) is kQgmma, the wgmma
// e4m3 kernel (bench/NOTES.md FP8 attention v2), at (d_qk, d_v) = (128, 128)
// and kMmaSync at (192, 128); kQgmma asked for at (192, 128) falls back to
// kMmaSync too. Both have the same numerics.
enum class Fp8AttentionKernel { kAuto, kMmaSync, kQgmma };

// All views are device memory; `p` has passed Fp8AttentionParams::Validate.
absl::Status RunFp8Attention(const Fp8AttentionParams& p, const Fp8AttentionInputs& in, TensorView& out,
                             cudaStream_t stream, Fp8AttentionKernel kernel = Fp8AttentionKernel::kAuto);

// Where the GPU-quantized inputs go (device memory; bf16 inputs only), for
// tests and the error split: codes in the input layout and the descales
// expanded to [B*Hq] (q), [B*Hkv] (k), [B*Hkv] (v), back to back.
struct Fp8QuantizedOut {
  uint8_t* q_codes = nullptr;
  uint8_t* k_codes = nullptr;
  uint8_t* v_codes = nullptr;
  float* descales = nullptr;
};
absl::Status RunFp8AttentionKeepQuantized(const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                                          TensorView& out, const Fp8QuantizedOut& keep, cudaStream_t stream,
                                          Fp8AttentionKernel kernel = Fp8AttentionKernel::kAuto);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_H_
