/* Small value codecs for user kernels (kernels/api/user_kernel_abi.h): bf16,
 * FP8 (e4m3fn, e4m3fnuz), MXFP4's E2M1 and E8M0. The server puts this header
 * beside user_kernel_abi.h when it compiles a kernel, so a submitted source
 * may include it; it is plain C (C99 / C++ / CUDA C++; host and device in
 * CUDA). These are the codecs of DESIGN §4, written for clarity: a fast
 * kernel would use the hardware's conversions.
 */
#ifndef KERNELSERVE_KERNELS_API_USER_KERNEL_UTIL_H_
#define KERNELSERVE_KERNELS_API_USER_KERNEL_UTIL_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/api/user_kernel_abi.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KS_HD __host__ __device__ static inline
#else
#define KS_HD static inline
#endif

KS_HD float ks_bf16_to_float(uint16_t bits) {
  uint32_t u = (uint32_t)bits << 16;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* Rounded once in `rounding` (KS_ROUND_*); NaN becomes 0x7FFF. */
KS_HD uint16_t ks_float_to_bf16(float f, int32_t rounding) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  if (rounding == KS_ROUND_RTZ) return (uint16_t)(u >> 16);
  if (rounding == KS_ROUND_RTNA) return (uint16_t)((u + 0x8000u) >> 16);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* format: KS_FP8_E4M3FN (bias 7, NaN S.1111.111) or KS_FP8_E4M3FNUZ (bias 8, NaN 0x80). */
KS_HD float ks_fp8_to_float(uint8_t code, int32_t format) {
  const int fnuz = format == KS_FP8_E4M3FNUZ;
  if (fnuz ? code == 0x80 : (code & 0x7F) == 0x7F) return NAN;
  const int e = (code >> 3) & 15, m = code & 7, bias = fnuz ? 8 : 7;
  const float mag = e == 0 ? ldexpf((float)m / 8.0f, 1 - bias) : ldexpf(1.0f + (float)m / 8.0f, e - bias);
  return (code & 0x80) ? -mag : mag;
}

/* One E2M1 element (the low 4 bits of `nibble`). */
KS_HD float ks_e2m1_to_float(uint8_t nibble) {
  const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = kMag[nibble & 7];
  return (nibble & 8) ? -mag : mag;
}

KS_HD float ks_e8m0_to_float(uint8_t e) { return e == 255 ? NAN : ldexpf(1.0f, (int)e - 127); }

/* Element i of an MXFP4 row (codes packed two per byte, a scale per 32). */
KS_HD float ks_mxfp4_at(const uint8_t* codes, const uint8_t* scales, int64_t i) {
  const uint8_t byte = codes[i / 2];
  return ks_e2m1_to_float((i & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 15)) * ks_e8m0_to_float(scales[i / 32]);
}

#endif /* KERNELSERVE_KERNELS_API_USER_KERNEL_UTIL_H_ */
