// Small vector helpers shared by the cpu backend's kernels. AVX2+FMA paths
// when the target is compiled with them, portable scalar code otherwise.
#ifndef KERNELSERVE_KERNELS_CPU_CPU_SIMD_H_
#define KERNELSERVE_KERNELS_CPU_CPU_SIMD_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define KS_CPU_AVX2 1
#endif

namespace kernelserve {
namespace cpu {

// bf16 -> fp32 is exact: the bits are the high half of the float.
inline float Bf16Bits(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline void Bf16RowToFloat(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
#ifdef KS_CPU_AVX2
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
#endif
  for (; i < n; ++i) dst[i] = Bf16Bits(src[i]);
}

// Fixed-length version (N a multiple of 8) for rows of compile-time width.
template <int N>
inline void Bf16RowToFloatN(const uint16_t* src, float* dst) {
  static_assert(N % 8 == 0, "N must be a multiple of 8");
#ifdef KS_CPU_AVX2
  for (int i = 0; i < N; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
#else
  for (int i = 0; i < N; ++i) dst[i] = Bf16Bits(src[i]);
#endif
}

#ifdef KS_CPU_AVX2
// 2^x for x <= 0 (or NaN): exact 0 below -126, NaN propagates, ~1 ulp elsewhere.
// The polynomial is the degree-7 Taylor series of 2^f on f in [-0.5, 0.5].
inline __m256 Exp2Neg(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-126.0f);
  __m256 xc = _mm256_max_ps(x, lo);  // NaN -> -126, fixed below
  xc = _mm256_min_ps(xc, _mm256_set1_ps(127.0f));
  const __m256 fi = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(xc, fi);
  // c_k = ln2^k / k!
  __m256 p = _mm256_set1_ps(1.5252733804059841e-05f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530393381609e-04f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-03f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-03f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-02f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-01f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-01f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fi), _mm256_set1_epi32(127)), 23);
  __m256 r = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  r = _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  r = _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return r;
}

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
#endif  // KS_CPU_AVX2

}  // namespace cpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_CPU_SIMD_H_
