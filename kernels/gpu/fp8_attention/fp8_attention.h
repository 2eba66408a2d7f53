// FP8 attention (ZYFA numerics, DESIGN §4) on the GPU: the host entry of the
// variant table's entries (fp8_attention_variants.cc). e4m3fn, and e4m3fnuz
// through e4m3fn: its codes are converted to the e4m3fn codes of the same
// values before the kernel (exact but for the lowest binade's odd multiples of
// 2^-10, which round to even; common/fp8_encode.h), and the P codes are the
// same bytes in both formats (naive P's frame moves one binade); (d_qk, d_v) = (128, 128) or (192, 128); causal or
// not; GQA; BHSD or BSHD; exact, lean or naive P; bf16 inputs are quantized on
// the GPU exactly as numerics::QuantizeFp8 does (per tensor or per head,
// optional Hadamard of Q and K computed in fp64 and rounded once to fp32), so
// the FP8 codes equal the oracle's. P codes equal the oracle's except where
// the fp32 score (or fp32 exp2 for exact P) differs from fp64 in the last
// bits.
#ifndef KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_ATTENTION_H_
#define KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"
#include "kernels/gpu/fp8_attention/fp8_quantize_plan.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

// An attention kernel on quantized operands (kernels/gpu/arch/sm90/
// fp8_attention/fp8_kernels.h), for the call's mask and head shape; p_mode
// is PMode's value.
using KernelLaunch = cudaError_t (*)(const Fp8KernelParams& p, int batch, int p_mode, cudaStream_t stream);

}  // namespace fp8_attention

// Quantizes bf16 inputs (FP8 inputs are taken as they are), then launches
// `kernel`; nullptr: the kernel has no instantiation for the call
// (UNIMPLEMENTED). All views are device memory; `p` has passed
// Fp8AttentionParams::Validate. Asynchronous on `stream`.
absl::Status RunFp8Attention(const Fp8AttentionParams& p, const Fp8AttentionInputs& in, TensorView& out,
                             cudaStream_t stream, const char* kernel_name, fp8_attention::KernelLaunch kernel);

// The quantization every entry's run does, alone, into device memory (bf16
// inputs only), for tests of the codes and for the error split: codes in the
// input layout and the descales expanded to [B*Hq] (q), [B*Hkv] (k),
// [B*Hkv] (v), back to back (Fp8QuantizedOut: fp8_quantize_plan.h).
absl::Status QuantizeFp8AttentionInputs(const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                                        const Fp8QuantizedOut& out, cudaStream_t stream);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_ATTENTION_H_
