// FP8 codes on the device, vendor-neutral where the arithmetic is: decoding
// e4m3fnuz (MI300X's format) exactly by bit arithmetic; encoding e4m3fn
// (fp8_encode.h).
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_FP8_CUH_
#define KERNELSERVE_KERNELS_GPU_COMMON_FP8_CUH_

#include <cstdint>

#include "kernels/gpu/common/fp8_encode.h"
#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {

// Two e4m3fnuz codes (low two bytes of v) -> bf16x2, exact (bias 8; 0x80 is NaN).
__device__ __forceinline__ uint32_t E4m3fnuzX2ToBf16x2(uint32_t v) {
  uint32_t out = 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t b = (v >> (8 * i)) & 0xFFu;
    // Exponent and mantissa bits placed in an fp32, scaled by 2^(127-8):
    // exact for normals and subnormals alike.
    const float f = __uint_as_float((b & 0x7Fu) << 20) * __uint_as_float(0x7B000000u);  // 2^119
    uint32_t bits = __float_as_uint(f) | ((b & 0x80u) << 24);
    if (b == 0x80u) bits = 0x7FC00000u;
    out |= (bits >> 16) << (16 * i);
  }
  return out;
}

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_FP8_CUH_
