// ZYFA P quantization for the cpu FP8 attention (DESIGN §4), vectorized.
// E4M3 codes are built from fp32 bit patterns: for normal values the code is
// the float's exponent and top 3 mantissa bits rounded to nearest even, for
// subnormals it is round(p * 2^(bias + 2)); decoding reverses both. The
// scalar hooks below run the same vector code and exist for tests.
#ifndef KERNELSERVE_KERNELS_CPU_CPU_FP8_P_H_
#define KERNELSERVE_KERNELS_CPU_CPU_FP8_P_H_

#include <cstdint>

#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_simd.h"

namespace kernelserve {
namespace cpu {
namespace fp8p {

struct PFormat {
  float min_normal;     // 2^-6 (e4m3fn), 2^-7 (e4m3fnuz)
  float sub_scale;      // 2^9, 2^10: subnormal code = p * sub_scale
  float inv_sub_scale;
  int bias_off;         // (127 - bias) << 3: normal code = (float bits >> 20) - bias_off
  int nan_code;         // 0x7F, 0x80
  int c1;               // code of 1.0
  int hi;               // c1 + 8h: largest lean code
  int headroom;
};

inline PFormat GetPFormat(Fp8Format f) {
  if (f == Fp8Format::kE4M3Fnuz) {
    return PFormat{1.0f / 128, 1024.0f, 1.0f / 1024, (127 - 8) << 3, 0x80, 64, 64 + 8 * 7, 7};
  }
  return PFormat{1.0f / 64, 512.0f, 1.0f / 512, (127 - 7) << 3, 0x7F, 56, 56 + 8 * 8, 8};
}

#ifdef KS_CPU_AVX2
// Codes of finite p in [0, 448]; NaN lanes are the caller's to patch.
inline __m256i EncodeV(__m256 p, const PFormat& f) {
  const __m256i bits = _mm256_castps_si256(p);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 20), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF), lsb));
  const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(r, 20), _mm256_set1_epi32(f.bias_off));
  const __m256i sub = _mm256_cvtps_epi32(_mm256_mul_ps(p, _mm256_set1_ps(f.sub_scale)));
  const __m256 is_sub = _mm256_cmp_ps(p, _mm256_set1_ps(f.min_normal), _CMP_LT_OQ);
  return _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(normal), _mm256_castsi256_ps(sub), is_sub));
}

// Values of codes 0..126 (non-negative, non-NaN).
inline __m256 DecodeV(__m256i code, const PFormat& f) {
  const __m256 normal = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(code, _mm256_set1_epi32(f.bias_off)), 20));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(code), _mm256_set1_ps(f.inv_sub_scale));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), code);
  return _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(is_sub));
}

// Exact P: code = fp8(2^y), y <= h (or -inf, NaN).
inline __m256i ExactCodeV(__m256 y, const PFormat& f) {
  const __m256i code = EncodeV(Exp2Neg(y), f);
  const __m256 nan = _mm256_cmp_ps(y, y, _CMP_UNORD_Q);
  return _mm256_castps_si256(_mm256_blendv_ps(
      _mm256_castsi256_ps(code), _mm256_castsi256_ps(_mm256_set1_epi32(f.nan_code)), nan));
}

// Lean P: code = clamp(round_half_even(8y + c1), 0, c1 + 8h).
inline __m256i LeanCodeV(__m256 y, const PFormat& f) {
  const __m256 z = _mm256_fmadd_ps(y, _mm256_set1_ps(8.0f), _mm256_set1_ps(static_cast<float>(f.c1)));
  __m256 r = _mm256_round_ps(z, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm256_max_ps(r, _mm256_setzero_ps());  // NaN -> 0, patched below
  r = _mm256_min_ps(r, _mm256_set1_ps(static_cast<float>(f.hi)));
  const __m256i code = _mm256_cvtps_epi32(r);
  const __m256 nan = _mm256_cmp_ps(y, y, _CMP_UNORD_Q);
  return _mm256_castps_si256(_mm256_blendv_ps(
      _mm256_castsi256_ps(code), _mm256_castsi256_ps(_mm256_set1_epi32(f.nan_code)), nan));
}

// Decoded values of codes that may be the NaN code.
inline __m256 DecodeWithNanV(__m256i code, const PFormat& f) {
  const __m256 v = DecodeV(code, f);
  const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(code, _mm256_set1_epi32(f.nan_code)));
  return _mm256_blendv_ps(v, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan);
}
#endif  // KS_CPU_AVX2

// Test hooks: the codes and decoded values the kernel uses, for n values.
void ExactPCodes(const float* y, int64_t n, Fp8Format format, uint8_t* codes, float* values);
void LeanPCodes(const float* y, int64_t n, Fp8Format format, uint8_t* codes, float* values);
// Naive P: codes of p in [0, 1] (or NaN) without block scaling.
void NaivePCodes(const float* p, int64_t n, Fp8Format format, uint8_t* codes, float* values);

}  // namespace fp8p
}  // namespace cpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_CPU_FP8_P_H_
