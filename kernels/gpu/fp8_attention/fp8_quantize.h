// GPU quantization of bf16 attention operands to e4m3fn or e4m3fnuz, exactly
// as numerics::QuantizeFp8 does it (descale = amax / 448 (240) in fp32, 1 when
// amax is 0; code = RNE-saturating e4m3 of x / descale with an IEEE division), with
// the optional normalized Hadamard rotation computed in fp64 and rounded once
// to fp32 (as the oracle does). Per tensor or per (batch, head). Portable
// device code: built by nvcc and for AMD (BUILD: fp8_quantize_hip).
#ifndef KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_QUANTIZE_H_
#define KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_QUANTIZE_H_

#include <cstdint>

#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

struct QuantizeArgs {
  const uint16_t* x = nullptr;  // bf16 rows of `dim` elements
  int64_t rows = 0;             // batch * heads * seq
  int dim = 0;                  // 64, 128 or 192
  bool hadamard = false;
  bool fnuz = false;            // e4m3fnuz codes (max 240) instead of e4m3fn
  bool per_head = false;
  bool bshd = false;
  int heads = 0, seq = 0;       // to map a row to its (batch, head)
  int batch = 0;
  uint8_t* codes = nullptr;     // same layout as x
  float* descale = nullptr;     // [batch*heads] (written expanded even per tensor)
  // Scratch: fp32 rotated rows (rows*dim, hadamard only) and amax bits ([batch*heads]).
  float* rotated = nullptr;
  unsigned int* amax = nullptr;
};

// Enqueues the amax and quantize passes; the scratch must be zeroed by the caller (amax).
cudaError_t LaunchQuantize(const QuantizeArgs& a, cudaStream_t stream);

// n e4m3fnuz codes to the e4m3fn codes of the same values (common/fp8_encode.h
// E4m3fnuzToE4m3fn), for kernels whose matrix unit reads e4m3fn only.
cudaError_t LaunchFnuzToFn(const uint8_t* in, uint8_t* out, int64_t n, cudaStream_t stream);

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_QUANTIZE_H_
