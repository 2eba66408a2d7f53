// bf16 MHA forward on the cpu: flash-style tiles of 64 queries x 64 keys with
// an online softmax in fp32 (base-2 units, so exp is a cheap exp2). K and V of
// one KV head are converted to fp32 once (K transposed per key block, so the
// score micro-kernel broadcasts Q and streams K along the key axis), then the
// threads share the (head, query block) work items of that KV head's group.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_simd.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace cpu {
namespace {

constexpr int kBq = 64;  // query rows per tile
constexpr int kBk = 64;  // keys per tile
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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
float SoftmaxRow(float* s, int valid, float score_scale, float* m, float* l) {
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

template <int D>
struct Scratch {
  std::vector<float> q = std::vector<float>(kBq * D);
  std::vector<float> s = std::vector<float>(kBq * kBk);
  std::vector<float> o = std::vector<float>(kBq * D);
  float m[kBq], l[kBq], alpha[kBq];
  int valid[kBq];
};

struct HeadCtx {
  const AttentionParams* p;
  const uint16_t* q;
  uint16_t* out;
  const float* kt;       // [nkb][D][kBk]
  const float* v;        // [nkb * kBk][D]
  const uint8_t* v_bad;  // per key block: V holds Inf/NaN
  float score_scale;
  int64_t b;
};

template <int D>
void QueryBlock(const HeadCtx& c, int64_t hq, int64_t q0, Scratch<D>& sc) {
  const AttentionParams& p = *c.p;
  const int64_t sq = p.seq_q, skv = p.seq_kv;
  const int rows = static_cast<int>(std::min<int64_t>(kBq, sq - q0));
  const int rows4 = (rows + 3) & ~3;
  for (int i = 0; i < rows; ++i) {
    Bf16RowToFloatN<D>(c.q + p.Offset(c.b, hq, q0 + i, p.heads_q, sq, D), sc.q.data() + i * D);
  }
  std::fill(sc.q.begin() + rows * D, sc.q.begin() + rows4 * D, 0.0f);
  std::fill(sc.o.begin(), sc.o.begin() + rows4 * D, 0.0f);
  // Last visible key of row i (bottom-right aligned causal mask).
  auto lim = [&](int i) -> int64_t {
    return p.causal ? std::min(q0 + i + skv - sq, skv - 1) : skv - 1;
  };
  for (int i = 0; i < rows4; ++i) {
    sc.m[i] = kNegInf;
    sc.l[i] = 0;
  }
  const int64_t max_lim = lim(rows - 1);
  for (int64_t kb = 0; max_lim >= 0 && kb <= max_lim / kBk; ++kb) {
    const int64_t k0 = kb * kBk;
    const int kcount = static_cast<int>(std::min<int64_t>(kBk, max_lim - k0 + 1));
    ScoreTile<D>(sc.q.data(), c.kt + kb * D * kBk, rows4, kcount, sc.s.data());
    for (int i = 0; i < rows4; ++i) {
      float* srow = sc.s.data() + i * kBk;
      const int valid = i < rows ? static_cast<int>(std::clamp<int64_t>(lim(i) - k0 + 1, 0, kBk)) : 0;
      sc.valid[i] = valid;
      if (valid == 0) {
        std::fill(srow, srow + kBk, 0.0f);
        sc.alpha[i] = 1.0f;
        continue;
      }
      sc.alpha[i] = SoftmaxRow(srow, valid, c.score_scale, &sc.m[i], &sc.l[i]);
    }
    if (c.v_bad[kb]) {
      PvTileVisibleOnly<D>(sc.s.data(), c.v + k0 * D, sc.alpha, sc.valid, rows, sc.o.data());
    } else {
      PvTile<D>(sc.s.data(), c.v + k0 * D, sc.alpha, rows4, kcount, sc.o.data());
    }
  }
  for (int i = 0; i < rows; ++i) {
    uint16_t* dst = c.out + p.Offset(c.b, hq, q0 + i, p.heads_q, sq, D);
    const float* oi = sc.o.data() + i * D;
    if (lim(i) < 0) {
      // No visible key: defined as 0.
      for (int d = 0; d < D; ++d) dst[d] = numerics::FloatToBf16(0.0f, p.rounding);
      continue;
    }
    const float l = sc.l[i];
    for (int d = 0; d < D; ++d) dst[d] = numerics::FloatToBf16(oi[d] / l, p.rounding);
  }
}

template <int D>
absl::Status AttentionImpl(const AttentionParams& p, const TensorView& q, const TensorView& k,
                           const TensorView& v, TensorView& out, int threads) {
  const int64_t skv = p.seq_kv;
  const int64_t nkb = (skv + kBk - 1) / kBk;
  const int64_t nqb = (p.seq_q + kBq - 1) / kBq;
  const int64_t group = p.heads_q / p.heads_kv;
  std::vector<float> kt(nkb * D * kBk), vf(nkb * kBk * D);
  std::vector<uint8_t> v_bad(nkb);
  const uint16_t* kp = k.as<const uint16_t>();
  const uint16_t* vp = v.as<const uint16_t>();
  HeadCtx c;
  c.p = &p;
  c.q = q.as<const uint16_t>();
  c.out = out.as<uint16_t>();
  c.kt = kt.data();
  c.v = vf.data();
  c.v_bad = v_bad.data();
  c.score_scale = static_cast<float>(p.scale) * kLog2e;
  for (int64_t b = 0; b < p.batch; ++b) {
    c.b = b;
    for (int64_t hkv = 0; hkv < p.heads_kv; ++hkv) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t kb = 0; kb < nkb; ++kb) {
        float row[D];
        float* ktb = kt.data() + kb * D * kBk;
        bool bad = false;
        for (int jj = 0; jj < kBk; ++jj) {
          const int64_t j = kb * kBk + jj;
          float* vrow = vf.data() + j * D;
          if (j >= skv) {
            for (int d = 0; d < D; ++d) ktb[d * kBk + jj] = 0.0f;
            std::fill(vrow, vrow + D, 0.0f);
            continue;
          }
          Bf16RowToFloatN<D>(kp + p.Offset(b, hkv, j, p.heads_kv, skv, D), row);
          for (int d = 0; d < D; ++d) ktb[d * kBk + jj] = row[d];
          Bf16RowToFloatN<D>(vp + p.Offset(b, hkv, j, p.heads_kv, skv, D), vrow);
          for (int d = 0; d < D; ++d) bad |= !std::isfinite(vrow[d]);
        }
        v_bad[kb] = bad;
      }
#pragma omp parallel num_threads(threads)
      {
        Scratch<D> sc;
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < group * nqb; ++item) {
          // Later query blocks see more keys under a causal mask: start them first.
          const int64_t qb = nqb - 1 - item / group;
          const int64_t hq = hkv * group + item % group;
          QueryBlock<D>(c, hq, qb * kBq, sc);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Attention(const AttentionParams& p, const TensorView& q, const TensorView& k,
                       const TensorView& v, TensorView& out, int threads) {
  if (q.desc.dtype != DType::kBf16 || k.desc.dtype != DType::kBf16 ||
      v.desc.dtype != DType::kBf16 || out.desc.dtype != DType::kBf16) {
    return absl::InvalidArgumentError("attention on the cpu backend takes bf16 q, k, v and out");
  }
  if (out.desc.num_elements() != p.batch * p.heads_q * p.seq_q * p.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention output has ", out.desc.num_elements(), " elements, expected ",
                     p.batch * p.heads_q * p.seq_q * p.head_dim));
  }
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) {
    return absl::InvalidArgumentError("attention heads_q must be a multiple of heads_kv");
  }
  switch (p.head_dim) {
    case 64:
      return AttentionImpl<64>(p, q, k, v, out, threads);
    case 128:
      return AttentionImpl<128>(p, q, k, v, out, threads);
    case 256:
      return AttentionImpl<256>(p, q, k, v, out, threads);
    default:
      return absl::UnimplementedError(
          absl::StrCat("attention head_dim=", p.head_dim,
                       " is not implemented by the cpu backend (has 64, 128, 256)"));
  }
}

}  // namespace cpu
}  // namespace kernelserve
