// float -> e4m3fn (OCP FP8, DESIGN §4) by bit arithmetic: round to nearest
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

KS_HOST_DEVICE uint32_t FloatToE4m3fn(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof(u));
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7Fu;          // NaN
  if (a >= 0x43E00000u) return sign | 0x7Eu;  // |x| >= 448 (Inf included): 448
  const uint32_t e = a >> 23;                 // biased fp32 exponent
  uint32_t code, rest, half;
  if (e >= 121) {
    // Normal in e4m3 (|x| >= 2^-6): exponent e - 127 + 7, the top 3 mantissa
    // bits; a carry out of the mantissa moves into the exponent.
    code = ((e - 120) << 3) | ((a >> 20) & 7u);
    rest = a & 0xFFFFFu;
    half = 0x80000u;
  } else if (e >= 117) {
    // Subnormal in e4m3: |x| / 2^-9 = m * 2^(e - 150 + 9), m with its leading bit.
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 141 - e;  // 21..24
    code = m >> shift;
    rest = m & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  } else {
    return sign;  // |x| < 2^-10: below half the smallest subnormal
  }
  if (rest > half || (rest == half && (code & 1u))) ++code;
  return sign | code;
}

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_FP8_ENCODE_H_
