// The register conversions of the RegA kernel: e4m3fn codes straight into
// f16 wgmma A fragments (exact), and f16 packing of P.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_REGA_CONVERT_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_REGA_CONVERT_CUH_

#include <cuda_fp16.h>

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace mla {

// Two floats -> f16x2 (lo in the low half), round to nearest even.
__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Two e4m3fn codes (a 16-bit half) -> f16x2, exact; NaN stays NaN.
__device__ __forceinline__ uint32_t E4m3x2ToF16x2(uint32_t v16) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(static_cast<uint16_t>(v16)));
  return h;
}

// The same for the upper two bytes, taken as a 16-bit half of the register
// (no shift instruction).
__device__ __forceinline__ uint32_t E4m3x2HiToF16x2(uint32_t v) {
  uint32_t h;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}\n" : "=r"(h) : "r"(v));
  return h;
}

// Byte i of a and byte i of b -> f16x2 (a low, b high) of value code * 2^-8,
// exact for every finite e4m3fn code (sign, then exponent and mantissa shifted
// into f16's fields). One PRMT with sign replication, one AND, one shift.
template <int kI>
__device__ __forceinline__ uint32_t E4m3PairToF16x2Scaled(uint32_t a, uint32_t b) {
  constexpr uint32_t kSel = kI | ((8 | kI) << 4) | ((4 + kI) << 8) | ((12 + kI) << 12);
  uint32_t t;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(t) : "r"(a), "r"(b), "n"(kSel));
  return (t & 0x017F017Fu) << 7;
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_REGA_CONVERT_CUH_
