// Lean P's FP8 code (ZYFA, DESIGN §4): clamp(round_half_even(8 y + c1), 0,
// c1 + 8 h), c1 the code of 1.0 and h the headroom of the format (e4m3fn:
// 56, 8; e4m3fnuz: 64, 7; both clamp at 120), by float arithmetic alone:
// adding 1.5 * 2^23 rounds the fp32 fma to an integer (ties to even) held in
// the low mantissa bits, and the clamp runs on the biased float (NaN clamps
// to code 0). A float-to-int conversion would run on the transcendental
// unit's pipe on both vendors, so converting would cost what exact P's
// exponential costs. The codes are numerics::LeanPCode(float)'s for every
// non-NaN input (|fma| < 2^22 rounds exactly; beyond, both clamp):
// fp8_lean_code_test.cc checks that on the CPU. Host and device, any vendor.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_FP8_LEAN_CODE_H_
#define KERNELSERVE_KERNELS_GPU_COMMON_FP8_LEAN_CODE_H_

#include <cstdint>

#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {

constexpr float kLeanCodeBias = 12582912.f;  // 1.5 * 2^23: bits 0x4B400000 + code

// The biased float's bits: the code in bits 0-7, bits 8-15 zero (so two
// codes pack with one byte permute).
template <int kCodeOfOne, int kHeadroom>
KS_HOST_DEVICE uint32_t LeanBiasedBits(float y) {
  constexpr float kMax = static_cast<float>(kCodeOfOne + 8 * kHeadroom);
  const float f = __builtin_fmaf(y, 8.f, static_cast<float>(kCodeOfOne)) + kLeanCodeBias;
  const float c = __builtin_fminf(__builtin_fmaxf(f, kLeanCodeBias), kLeanCodeBias + kMax);
  uint32_t u;
  __builtin_memcpy(&u, &c, sizeof(u));
  return u;
}

template <int kCodeOfOne, int kHeadroom>
KS_HOST_DEVICE uint32_t LeanCode(float y) {
  return LeanBiasedBits<kCodeOfOne, kHeadroom>(y) & 0xFFu;
}

// e4m3fnuz (MI300X): c1 = 64, h = 7.
KS_HOST_DEVICE uint32_t LeanCodeE4m3fnuz(float y) { return LeanCode<64, 7>(y); }
// e4m3fn (OCP): c1 = 56, h = 8.
KS_HOST_DEVICE uint32_t LeanCodeE4m3fn(float y) { return LeanCode<56, 8>(y); }

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_FP8_LEAN_CODE_H_
