// bf16 on the device, vendor-neutral: rounding in the three modes of DESIGN
// §4 (bit for bit numerics::FloatToBf16) and unpacking.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_BF16_CUH_
#define KERNELSERVE_KERNELS_GPU_COMMON_BF16_CUH_

#include <cstdint>

#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {

// Rounding modes as in kernels/api/ops.h (Rounding enum values).
constexpr int kRoundRtne = 1;
constexpr int kRoundRtna = 2;
constexpr int kRoundRtz = 3;

// NaN becomes the canonical 0x7FFF; RTNE/RTNA overflow to Inf, RTZ to max.
__device__ __forceinline__ uint32_t FloatToBf16Bits(float x, int mode) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;
  if (mode == kRoundRtz) return u >> 16;
  if (mode == kRoundRtna) return (u + 0x8000u) >> 16;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

// Two floats -> packed bf16x2, lo in the low half.
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi, int mode) {
  return FloatToBf16Bits(lo, mode) | (FloatToBf16Bits(hi, mode) << 16);
}

__device__ __forceinline__ float Bf16LoToFloat(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float Bf16HiToFloat(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_BF16_CUH_
