// float -> e4m3fn (OCP FP8, DESIGN §4) and e4m3fnuz by bit arithmetic: round to nearest
// even, finite values and +-Inf saturating to +-448, NaN -> 0x7F, the sign
// kept on zeros (bit for bit numerics::FloatToFp8(x, kFp8E4M3Fn);
// fp8_encode_test.cc checks every float of interest and a large sample).
// Vendor-neutral, host and device: AMD's FP8 instructions are e4m3fnuz, and
// CUDA kernels may use the sm_89+ conversion instruction instead
// (arch/sm80/mma.cuh F32x2ToE4m3fnX2), which gives the same codes.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_FP8_ENCODE_H_
#define KERNELSERVE_KERNELS_GPU_COMMON_FP8_ENCODE_H_

#include <cstdint>

#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {

namespace fp8_encode_internal {

// e4m3 with exponent bias kBias: e4m3fn (bias 7; max 448 = code 0x7E, NaN
// 0x7F, a signed zero) or e4m3fnuz (bias 8; max 240 = code 0x7F, NaN 0x80,
// no negative zero).
template <int kBias, bool kFnuz>
KS_HOST_DEVICE uint32_t FloatToE4m3(float x) {
  constexpr uint32_t kMaxBits = kFnuz ? 0x43700000u : 0x43E00000u;  // 240 or 448
  constexpr uint32_t kMaxCode = kFnuz ? 0x7Fu : 0x7Eu;
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof(u));
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kFnuz ? 0x80u : 0x7Fu;  // NaN
  if (a >= kMaxBits) return sign | kMaxCode;         // |x| >= max (Inf included): max
  const uint32_t e = a >> 23;                        // biased fp32 exponent
  uint32_t code, rest, half;
  if (e >= 128 - kBias) {
    // Normal in e4m3 (|x| >= 2^(1 - bias)): exponent e - 127 + bias, the
    // top 3 mantissa bits; a carry out of the mantissa moves into the exponent.
    code = ((e - (127 - kBias)) << 3) | ((a >> 20) & 7u);
    rest = a & 0xFFFFFu;
    half = 0x80000u;
  } else if (e >= 124 - kBias) {
    // Subnormal in e4m3: |x| / 2^(-bias - 2) = m * 2^(e - 150 + bias + 2), m with its leading bit.
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 148 - kBias - e;  // 21..24
    code = m >> shift;
    rest = m & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  } else {
    code = 0;  // below half the smallest subnormal
    rest = half = 1;
  }
  if (rest > half || (rest == half && (code & 1u))) ++code;
  if (kFnuz && code == 0) return 0;  // no negative zero
  return sign | code;
}

}  // namespace fp8_encode_internal

KS_HOST_DEVICE uint32_t FloatToE4m3fn(float x) { return fp8_encode_internal::FloatToE4m3<7, false>(x); }

// float -> e4m3fnuz (MI300X's FP8): the same rounding, saturating to +-240,
// NaN -> 0x80, zero and everything rounding to it -> 0x00 (bit for bit
// numerics::FloatToFp8(x, kFp8E4M3Fnuz)).
KS_HOST_DEVICE uint32_t FloatToE4m3fnuz(float x) { return fp8_encode_internal::FloatToE4m3<8, true>(x); }

// The e4m3fn code of an e4m3fnuz code's value, for e4m3fn-only hardware:
// exact for every value e4m3fn has, i.e. all but the e4m3fnuz magnitudes
// below 2^-6 that are odd multiples of 2^-10 (e4m3fn's subnormal step is
// 2^-9), which round to nearest even; NaN (0x80) -> 0x7F.
KS_HOST_DEVICE uint32_t E4m3fnuzToE4m3fn(uint32_t code) {
  code &= 0xFFu;
  if (code == 0x80u) return 0x7Fu;
  const uint32_t e = (code >> 3) & 0xFu, m = code & 7u;
  // Value / 2^-10: m when subnormal, (8 + m) * 2^(e - 1) when normal.
  const float quanta = e == 0 ? static_cast<float>(m) : static_cast<float>((8u + m) << (e - 1));
  return (code & 0x80u) | FloatToE4m3fn(quanta * 0x1p-10f);
}

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_FP8_ENCODE_H_
