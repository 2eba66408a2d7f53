// The attention epilogue's rounding of fp32 to bf16 in the three modes of
// DESIGN §4, bit for bit numerics::FloatToBf16: NaN -> 0x7FFF; RTNE/RTNA
// carry into the exponent on overflow (+-Inf); RTZ truncates (never above max
// finite; Inf stays Inf). Vendor-neutral: every attention kernel's epilogue
// and the test hook (round_bf16.cu) use these functions.
#ifndef KERNELSERVE_KERNELS_GPU_ATTENTION_ROUND_BF16_CUH_
#define KERNELSERVE_KERNELS_GPU_ATTENTION_ROUND_BF16_CUH_

#include <math.h>

#include <cstdint>

#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {
namespace attention {

constexpr uint16_t kBf16CanonicalNaN = 0x7FFF;

__device__ __forceinline__ uint32_t RoundBf16Rtne(float x) {
  if (isnan(x)) return kBf16CanonicalNaN;
  const uint32_t u = __float_as_uint(x);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ uint32_t RoundBf16Rtna(float x) {
  if (isnan(x)) return kBf16CanonicalNaN;
  return (__float_as_uint(x) + 0x8000u) >> 16;
}
__device__ __forceinline__ uint32_t RoundBf16Rtz(float x) {
  if (isnan(x)) return kBf16CanonicalNaN;
  return __float_as_uint(x) >> 16;
}

template <int kRounding>
__device__ __forceinline__ uint32_t RoundBf16(float x) {
  if (kRounding == kFlashRtna) return RoundBf16Rtna(x);
  if (kRounding == kFlashRtz) return RoundBf16Rtz(x);
  return RoundBf16Rtne(x);
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ATTENTION_ROUND_BF16_CUH_
