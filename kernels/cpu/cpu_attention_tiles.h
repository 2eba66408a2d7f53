// Tile micro-kernels shared by the cpu attention kernels (bf16 and FP8):
// 64 query rows x 64 keys, fp32, K transposed per key block so the score
// kernel broadcasts Q and streams K along the key axis.
#ifndef KERNELSERVE_KERNELS_CPU_CPU_ATTENTION_TILES_H_
#define KERNELSERVE_KERNELS_CPU_CPU_ATTENTION_TILES_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_simd.h"

namespace kernelserve {
namespace cpu {
namespace tiles {

constexpr int kBq = 64;  // query rows per tile
constexpr int kBk = 64;  // keys per tile
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The parallel schedule both attention ops share. Per (batch, KV head): its
// key blocks are converted to fp32 (`convert(b, hkv, kb, kt, v, v_bad)`), then
// the query blocks of its `group` query heads run
// (`query_block(ctx, hq, q0, scratch)`), the last first: under a causal mask
// they see the most keys. With few query blocks per KV head (decode-like
// shapes) each thread takes whole KV heads with its own fp32 copies instead.
// Ctx has members b, kt, v, v_bad; kt_floats / v_floats size one KV head's copies.
template <typename Scratch, typename Ctx, typename Convert, typename QueryBlockFn>
void RunAttentionSchedule(Ctx c, int64_t batch, int64_t heads_kv, int64_t group, int64_t nqb,
                          int64_t nkb, int64_t kt_floats, int64_t v_floats, int threads,
                          const Convert& convert, const QueryBlockFn& query_block) {
  const int64_t kv_heads = batch * heads_kv;
  if (group * nqb < 2 * threads && kv_heads > 1) {
#pragma omp parallel num_threads(threads)
    {
      std::vector<float> kt(kt_floats), vf(v_floats);
      std::vector<uint8_t> v_bad(nkb);
      Scratch sc;
      Ctx cl = c;
      cl.kt = kt.data();
      cl.v = vf.data();
      cl.v_bad = v_bad.data();
#pragma omp for schedule(dynamic, 1)
      for (int64_t g = 0; g < kv_heads; ++g) {
        const int64_t b = g / heads_kv, hkv = g % heads_kv;
        cl.b = b;
        for (int64_t kb = 0; kb < nkb; ++kb) convert(b, hkv, kb, kt.data(), vf.data(), v_bad.data());
        for (int64_t item = 0; item < group * nqb; ++item) {
          query_block(cl, hkv * group + item % group, (nqb - 1 - item / group) * kBq, sc);
        }
      }
    }
    return;
  }
  std::vector<float> kt(kt_floats), vf(v_floats);
  std::vector<uint8_t> v_bad(nkb);
  c.kt = kt.data();
  c.v = vf.data();
  c.v_bad = v_bad.data();
  for (int64_t b = 0; b < batch; ++b) {
    c.b = b;
    for (int64_t hkv = 0; hkv < heads_kv; ++hkv) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t kb = 0; kb < nkb; ++kb) convert(b, hkv, kb, kt.data(), vf.data(), v_bad.data());
#pragma omp parallel num_threads(threads)
      {
        Scratch sc;
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < group * nqb; ++item) {
          query_block(c, hkv * group + item % group, (nqb - 1 - item / group) * kBq, sc);
        }
      }
    }
  }
}

// s[kBq][kBk] = q[rows4][D] . kt[D][kBk] (rows >= rows4 untouched).
template <int D>
void ScoreTile(const float* q, const float* kt, int rows4, int kcount, float* s) {
#ifdef KS_CPU_AVX2
  for (int i0 = 0; i0 < rows4; i0 += 4) {
    const float* q0 = q + i0 * D;
    for (int j0 = 0; j0 < kcount; j0 += 16) {
      __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps();
      __m256 a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps();
      __m256 a20 = _mm256_setzero_ps(), a21 = _mm256_setzero_ps();
      __m256 a30 = _mm256_setzero_ps(), a31 = _mm256_setzero_ps();
      const float* kp = kt + j0;
      for (int d = 0; d < D; ++d) {
        const __m256 k0 = _mm256_loadu_ps(kp + d * kBk);
        const __m256 k1 = _mm256_loadu_ps(kp + d * kBk + 8);
        __m256 b = _mm256_broadcast_ss(q0 + d);
        a00 = _mm256_fmadd_ps(b, k0, a00);
        a01 = _mm256_fmadd_ps(b, k1, a01);
        b = _mm256_broadcast_ss(q0 + D + d);
        a10 = _mm256_fmadd_ps(b, k0, a10);
        a11 = _mm256_fmadd_ps(b, k1, a11);
        b = _mm256_broadcast_ss(q0 + 2 * D + d);
        a20 = _mm256_fmadd_ps(b, k0, a20);
        a21 = _mm256_fmadd_ps(b, k1, a21);
        b = _mm256_broadcast_ss(q0 + 3 * D + d);
        a30 = _mm256_fmadd_ps(b, k0, a30);
        a31 = _mm256_fmadd_ps(b, k1, a31);
      }
      float* sp = s + i0 * kBk + j0;
      _mm256_storeu_ps(sp, a00);
      _mm256_storeu_ps(sp + 8, a01);
      _mm256_storeu_ps(sp + kBk, a10);
      _mm256_storeu_ps(sp + kBk + 8, a11);
      _mm256_storeu_ps(sp + 2 * kBk, a20);
      _mm256_storeu_ps(sp + 2 * kBk + 8, a21);
      _mm256_storeu_ps(sp + 3 * kBk, a30);
      _mm256_storeu_ps(sp + 3 * kBk + 8, a31);
    }
  }
#else
  for (int i = 0; i < rows4; ++i) {
    float acc[kBk] = {};
    for (int d = 0; d < D; ++d) {
      const float qv = q[i * D + d];
      for (int j = 0; j < kBk; ++j) acc[j] += qv * kt[d * kBk + j];
    }
    for (int j = 0; j < kBk; ++j) s[i * kBk + j] = acc[j];
  }
  (void)kcount;
#endif
}

// o[i][:] = alpha[i] * o[i][:] + sum_{j < kcount} p[i][j] * v[j][:].
template <int D>
void PvTile(const float* p, const float* v, const float* alpha, int rows4, int kcount, float* o) {
#ifdef KS_CPU_AVX2
  for (int i0 = 0; i0 < rows4; i0 += 4) {
    const float* p0 = p + i0 * kBk;
    const __m256 al0 = _mm256_set1_ps(alpha[i0]), al1 = _mm256_set1_ps(alpha[i0 + 1]);
    const __m256 al2 = _mm256_set1_ps(alpha[i0 + 2]), al3 = _mm256_set1_ps(alpha[i0 + 3]);
    for (int c0 = 0; c0 < D; c0 += 16) {
      float* o0 = o + i0 * D + c0;
      __m256 a00 = _mm256_mul_ps(al0, _mm256_loadu_ps(o0));
      __m256 a01 = _mm256_mul_ps(al0, _mm256_loadu_ps(o0 + 8));
      __m256 a10 = _mm256_mul_ps(al1, _mm256_loadu_ps(o0 + D));
      __m256 a11 = _mm256_mul_ps(al1, _mm256_loadu_ps(o0 + D + 8));
      __m256 a20 = _mm256_mul_ps(al2, _mm256_loadu_ps(o0 + 2 * D));
      __m256 a21 = _mm256_mul_ps(al2, _mm256_loadu_ps(o0 + 2 * D + 8));
      __m256 a30 = _mm256_mul_ps(al3, _mm256_loadu_ps(o0 + 3 * D));
      __m256 a31 = _mm256_mul_ps(al3, _mm256_loadu_ps(o0 + 3 * D + 8));
      const float* vp = v + c0;
      for (int j = 0; j < kcount; ++j) {
        const __m256 v0 = _mm256_loadu_ps(vp + j * D);
        const __m256 v1 = _mm256_loadu_ps(vp + j * D + 8);
        __m256 b = _mm256_broadcast_ss(p0 + j);
        a00 = _mm256_fmadd_ps(b, v0, a00);
        a01 = _mm256_fmadd_ps(b, v1, a01);
        b = _mm256_broadcast_ss(p0 + kBk + j);
        a10 = _mm256_fmadd_ps(b, v0, a10);
        a11 = _mm256_fmadd_ps(b, v1, a11);
        b = _mm256_broadcast_ss(p0 + 2 * kBk + j);
        a20 = _mm256_fmadd_ps(b, v0, a20);
        a21 = _mm256_fmadd_ps(b, v1, a21);
        b = _mm256_broadcast_ss(p0 + 3 * kBk + j);
        a30 = _mm256_fmadd_ps(b, v0, a30);
        a31 = _mm256_fmadd_ps(b, v1, a31);
      }
      _mm256_storeu_ps(o0, a00);
      _mm256_storeu_ps(o0 + 8, a01);
      _mm256_storeu_ps(o0 + D, a10);
      _mm256_storeu_ps(o0 + D + 8, a11);
      _mm256_storeu_ps(o0 + 2 * D, a20);
      _mm256_storeu_ps(o0 + 2 * D + 8, a21);
      _mm256_storeu_ps(o0 + 3 * D, a30);
      _mm256_storeu_ps(o0 + 3 * D + 8, a31);
    }
  }
#else
  for (int i = 0; i < rows4; ++i) {
    float* oi = o + i * D;
    for (int c = 0; c < D; ++c) oi[c] *= alpha[i];
    for (int j = 0; j < kcount; ++j) {
      const float pj = p[i * kBk + j];
      for (int c = 0; c < D; ++c) oi[c] += pj * v[j * D + c];
    }
  }
#endif
}

// Slow path for a key block whose V holds Inf/NaN: each row sums only its
// visible keys, so a masked key's NaN cannot leak in through 0 * NaN.
template <int D>
void PvTileVisibleOnly(const float* p, const float* v, const float* alpha, const int* valid,
                       int rows, float* o) {
  for (int i = 0; i < rows; ++i) {
    float* oi = o + i * D;
    for (int c = 0; c < D; ++c) oi[c] *= alpha[i];
    for (int j = 0; j < valid[i]; ++j) {
      const float pj = p[i * kBk + j];
      for (int c = 0; c < D; ++c) oi[c] += pj * v[j * D + c];
    }
  }
}

// Online softmax for one row of a score tile: scales to base-2 units, masks
// keys >= valid, updates the running max m and sum l, writes P in place and
// returns the factor the row's accumulator must be multiplied by.
inline float SoftmaxRow(float* s, int valid, float score_scale, float* m, float* l) {
#ifdef KS_CPU_AVX2
  const __m256 cs = _mm256_set1_ps(score_scale);
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  const __m256 iota = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 vvalid = _mm256_set1_ps(static_cast<float>(valid));
  __m256 vmax = neg_inf;
  for (int j0 = 0; j0 < kBk; j0 += 8) {
    __m256 t = _mm256_mul_ps(_mm256_loadu_ps(s + j0), cs);
    const __m256 idx = _mm256_add_ps(iota, _mm256_set1_ps(static_cast<float>(j0)));
    t = _mm256_blendv_ps(neg_inf, t, _mm256_cmp_ps(idx, vvalid, _CMP_LT_OQ));
    _mm256_storeu_ps(s + j0, t);
    vmax = _mm256_max_ps(t, vmax);
  }
  const float tile_max = HorizontalMax(vmax);
#else
  float tile_max = kNegInf;
  for (int j = 0; j < kBk; ++j) {
    s[j] = j < valid ? s[j] * score_scale : kNegInf;
    if (s[j] > tile_max) tile_max = s[j];
  }
#endif
  const float m_old = *m;
  const float m_new = tile_max > m_old ? tile_max : m_old;
  // While every visible score is -inf the frame stays at 0 so that -inf keys
  // give 0 and NaN scores still propagate.
  const float m_use = m_new == kNegInf ? 0.0f : m_new;
  const float alpha = std::exp2(m_old - m_use);
#ifdef KS_CPU_AVX2
  const __m256 mu = _mm256_set1_ps(m_use);
  __m256 vsum = _mm256_setzero_ps();
  for (int j0 = 0; j0 < kBk; j0 += 8) {
    const __m256 e = Exp2Neg(_mm256_sub_ps(_mm256_loadu_ps(s + j0), mu));
    _mm256_storeu_ps(s + j0, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  const float sum = HorizontalSum(vsum);
#else
  float sum = 0;
  for (int j = 0; j < kBk; ++j) {
    s[j] = std::exp2(s[j] - m_use);
    sum += s[j];
  }
#endif
  *l = *l * alpha + sum;
  *m = m_new;
  return alpha;
}

// One 64-key tile of online-softmax decode attention for `rows` query rows
// (padded to rows4): scores q.kt, each row's softmax over its visible keys
// (lim(i) is row i's last visible key; rows past `rows` see none), then P.V
// into o. Scratch holds q, kt, v, s, o (vectors) and m, l, alpha, valid
// (arrays of kBq); kt and v hold the tile's kcount keys, and v_bad says V has
// a non-finite value, so masked keys must not reach o through 0 * NaN.
template <int DK, int DV, typename Scratch, typename Lim>
void AttendKeyTile(Scratch& sc, int rows, int rows4, int64_t k0, int kcount, bool v_bad, float score_c,
                   const Lim& lim) {
  ScoreTile<DK>(sc.q.data(), sc.kt.data(), rows4, kcount, sc.s.data());
  for (int i = 0; i < rows4; ++i) {
    float* srow = sc.s.data() + i * kBk;
    const int64_t visible = i < rows ? lim(i) - k0 + 1 : 0;
    const int valid = static_cast<int>(visible < 0 ? 0 : visible > kcount ? kcount : visible);
    sc.valid[i] = valid;
    if (valid == 0) {
      for (int j = 0; j < kBk; ++j) srow[j] = 0.0f;
      sc.alpha[i] = 1.0f;
      continue;
    }
    sc.alpha[i] = SoftmaxRow(srow, valid, score_c, &sc.m[i], &sc.l[i]);
  }
  if (v_bad) {
    PvTileVisibleOnly<DV>(sc.s.data(), sc.v.data(), sc.alpha, sc.valid, rows, sc.o.data());
  } else {
    PvTile<DV>(sc.s.data(), sc.v.data(), sc.alpha, rows4, kcount, sc.o.data());
  }
}

}  // namespace tiles
}  // namespace cpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_CPU_ATTENTION_TILES_H_
