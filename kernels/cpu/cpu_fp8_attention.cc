// FP8 attention on the cpu with ZYFA numerics (DESIGN §4). bf16 inputs are
// quantized first (optional Hadamard of Q and K in fp64 rounded to fp32, then
// per-tensor or per-head QuantizeFp8 semantics); the attention itself reads
// the decoded FP8 values in fp32 tiles of 64 queries x 64 keys, so one key
// tile is exactly one P block. Exact and lean P keep O and L in the frame of
// the largest block reference seen so far; every rescale is a power of two.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_attention_tiles.h"
#include "kernels/cpu/cpu_fp8_p.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace cpu {
namespace fp8p {

namespace {

#ifndef KS_CPU_AVX2
uint8_t EncodeScalar(float p, Fp8Format f) {
  return numerics::FloatToFp8(p, Fp8FormatDType(f));
}
#endif

template <typename CodeFn>
void RunHook(const float* in, int64_t n, Fp8Format format, uint8_t* codes, float* values,
             CodeFn code_fn) {
  const PFormat f = GetPFormat(format);
#ifdef KS_CPU_AVX2
  for (int64_t i = 0; i < n; i += 8) {
    float buf[8] = {};
    const int64_t m = std::min<int64_t>(8, n - i);
    std::copy(in + i, in + i + m, buf);
    const __m256i c = code_fn(_mm256_loadu_ps(buf), f);
    alignas(32) int32_t cs[8];
    alignas(32) float vs[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(cs), c);
    _mm256_store_ps(vs, DecodeWithNanV(c, f));
    for (int64_t j = 0; j < m; ++j) {
      codes[i + j] = static_cast<uint8_t>(cs[j]);
      values[i + j] = vs[j];
    }
  }
#else
  const float* table = numerics::Fp8DecodeTable(Fp8FormatDType(format));
  for (int64_t i = 0; i < n; ++i) {
    codes[i] = code_fn(in[i], format);
    values[i] = table[codes[i]];
  }
  (void)f;
#endif
}

}  // namespace

void ExactPCodes(const float* y, int64_t n, Fp8Format format, uint8_t* codes, float* values) {
#ifdef KS_CPU_AVX2
  RunHook(y, n, format, codes, values, [](__m256 v, const PFormat& f) { return ExactCodeV(v, f); });
#else
  RunHook(y, n, format, codes, values, [](float v, Fp8Format f) {
    return std::isnan(v) ? numerics::FloatToFp8(v, Fp8FormatDType(f)) : EncodeScalar(std::exp2(v), f);
  });
#endif
}

void LeanPCodes(const float* y, int64_t n, Fp8Format format, uint8_t* codes, float* values) {
#ifdef KS_CPU_AVX2
  RunHook(y, n, format, codes, values, [](__m256 v, const PFormat& f) { return LeanCodeV(v, f); });
#else
  RunHook(y, n, format, codes, values, [](float v, Fp8Format f) { return numerics::LeanPCode(v, f); });
#endif
}

void NaivePCodes(const float* p, int64_t n, Fp8Format format, uint8_t* codes, float* values) {
#ifdef KS_CPU_AVX2
  RunHook(p, n, format, codes, values, [](__m256 v, const PFormat& f) {
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(EncodeV(v, f)),
                                                 _mm256_castsi256_ps(_mm256_set1_epi32(f.nan_code)), nan));
  });
#else
  RunHook(p, n, format, codes, values, [](float v, Fp8Format f) { return EncodeScalar(v, f); });
#endif
}

}  // namespace fp8p

namespace {

using tiles::kBk;
using tiles::kBq;
using tiles::kLog2e;
using tiles::kNegInf;
constexpr int kDv = 128;

struct RowState {
  float l = 0;
  float m = kNegInf;   // naive: running max of t
  int64_t r = 0;       // exact/lean: frame (block reference) of O and L
  bool has_frame = false;
};

// Turns one row of raw scores into P values for the PV tile; returns the
// factor for the row's accumulator and updates the row state.
float PRow(float* s, int valid, float c, PMode mode, Fp8Format format, const fp8p::PFormat& f,
           RowState* st) {
  bool any_nan = false;
#ifdef KS_CPU_AVX2
  const __m256 cs = _mm256_set1_ps(c);
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  const __m256 iota = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 vvalid = _mm256_set1_ps(static_cast<float>(valid));
  __m256 vmax = neg_inf;
  __m256 vnan = _mm256_setzero_ps();
  for (int j0 = 0; j0 < kBk; j0 += 8) {
    __m256 t = _mm256_mul_ps(_mm256_loadu_ps(s + j0), cs);
    const __m256 idx = _mm256_add_ps(iota, _mm256_set1_ps(static_cast<float>(j0)));
    t = _mm256_blendv_ps(neg_inf, t, _mm256_cmp_ps(idx, vvalid, _CMP_LT_OQ));
    _mm256_storeu_ps(s + j0, t);
    vmax = _mm256_max_ps(t, vmax);  // ignores NaN lanes of t
    vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(t, t, _CMP_UNORD_Q));
  }
  const float max_t = HorizontalMax(vmax);
  any_nan = _mm256_movemask_ps(vnan) != 0;
#else
  float max_t = kNegInf;
  for (int j = 0; j < kBk; ++j) {
    s[j] = j < valid ? s[j] * c : kNegInf;
    if (s[j] > max_t) max_t = s[j];
    any_nan |= std::isnan(s[j]);
  }
#endif
  if (mode == PMode::kNaive) {
    const float m_old = st->m;
    const float m_new = max_t > m_old ? max_t : m_old;
    const float m_use = m_new == kNegInf ? 0.0f : m_new;
    const float alpha = std::exp2(m_old - m_use);
    float sum = 0;
#ifdef KS_CPU_AVX2
    const __m256 mu = _mm256_set1_ps(m_use);
    __m256 vsum = _mm256_setzero_ps();
    for (int j0 = 0; j0 < kBk; j0 += 8) {
      const __m256 p = Exp2Neg(_mm256_sub_ps(_mm256_loadu_ps(s + j0), mu));
      vsum = _mm256_add_ps(vsum, p);
      const __m256 nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
      const __m256 q = _mm256_blendv_ps(fp8p::DecodeV(fp8p::EncodeV(p, f), f), p, nan);
      _mm256_storeu_ps(s + j0, q);
    }
    sum = HorizontalSum(vsum);
#else
    const DType dt = Fp8FormatDType(format);
    for (int j = 0; j < kBk; ++j) {
      const float p = std::exp2(s[j] - m_use);
      sum += p;
      s[j] = numerics::Fp8ToFloat(numerics::FloatToFp8(p, dt), dt);
    }
#endif
    st->l = st->l * alpha + sum;  // the unrounded sum
    st->m = m_new;
    return alpha;
  }

  const int r_int = numerics::BlockReference(max_t, format);
  if (r_int == INT_MIN) {
    // Every visible score is -inf or NaN: the block adds nothing, but a NaN
    // must still reach the output.
    std::fill(s, s + kBk, 0.0f);
    if (any_nan) st->l = std::numeric_limits<float>::quiet_NaN();
    return 1.0f;
  }
  const int64_t r = r_int;
  float alpha = 1.0f, pscale = 1.0f;
  if (!st->has_frame) {
    st->has_frame = true;
    st->r = r;
  } else if (r > st->r) {
    alpha = std::ldexp(1.0f, static_cast<int>(std::max<int64_t>(st->r - r, -300)));
    st->r = r;
  } else {
    pscale = std::ldexp(1.0f, static_cast<int>(std::max<int64_t>(r - st->r, -300)));
  }
  float sum = 0;
#ifdef KS_CPU_AVX2
  const __m256 rv = _mm256_set1_ps(static_cast<float>(r));
  const __m256 ps = _mm256_set1_ps(pscale);
  __m256 vsum = _mm256_setzero_ps();
  for (int j0 = 0; j0 < kBk; j0 += 8) {
    const __m256 y = _mm256_sub_ps(_mm256_loadu_ps(s + j0), rv);
    const __m256i code = mode == PMode::kLean ? fp8p::LeanCodeV(y, f) : fp8p::ExactCodeV(y, f);
    const __m256 p = _mm256_mul_ps(fp8p::DecodeWithNanV(code, f), ps);
    vsum = _mm256_add_ps(vsum, p);
    _mm256_storeu_ps(s + j0, p);
  }
  sum = HorizontalSum(vsum);
#else
  const DType dt = Fp8FormatDType(format);
  for (int j = 0; j < kBk; ++j) {
    const float y = s[j] - static_cast<float>(r);
    const uint8_t code = mode == PMode::kLean ? numerics::LeanPCode(y, format)
                                              : (std::isnan(y) ? numerics::FloatToFp8(y, dt)
                                                               : numerics::FloatToFp8(std::exp2(y), dt));
    s[j] = numerics::Fp8ToFloat(code, dt) * pscale;
    sum += s[j];
  }
#endif
  st->l = st->l * alpha + sum;
  return alpha;
}

struct Quantized {
  std::vector<uint8_t> q, k, v;                // codes, original layout
  std::vector<float> qd, kd, vd;               // descales [B*Hq], [B*Hkv], [B*Hkv]
};

// QuantizeFp8 semantics (descale = amax / max, code = fp8(x / descale)) over
// the elements of one tensor or one head, in parallel.
void QuantizeSlices(const std::vector<float>& x, const Fp8AttentionParams& p, int64_t heads,
                    int64_t seq, int64_t d, bool per_head, DType dt, int threads,
                    std::vector<uint8_t>* codes, std::vector<float>* descales) {
  const int64_t n = static_cast<int64_t>(x.size());
  codes->assign(n, 0);
  descales->assign(p.batch * heads, 1.0f);
  // Element index of (b, h, s, 0) in the layout.
  auto off = [&](int64_t b, int64_t h, int64_t s) {
    return p.layout == Layout::kBhsd ? ((b * heads + h) * seq + s) * d : ((b * seq + s) * heads + h) * d;
  };
  const int64_t slices = per_head ? p.batch * heads : 1;
  std::vector<float> amax(slices, 0.0f);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t bh = 0; bh < p.batch * heads; ++bh) {
    float a = 0;
    const int64_t b = bh / heads, h = bh % heads;
    for (int64_t s = 0; s < seq; ++s) {
      const float* row = x.data() + off(b, h, s);
      for (int64_t i = 0; i < d; ++i) {
        const float v = std::fabs(row[i]);
        if (v > a) a = v;  // NaN never compares greater
      }
    }
    if (per_head) {
      amax[bh] = a;
    } else {
#pragma omp critical
      amax[0] = std::max(amax[0], a);
    }
  }
  const float fmax = numerics::Fp8Max(dt);
  for (int64_t bh = 0; bh < p.batch * heads; ++bh) {
    const float a = amax[per_head ? bh : 0];
    (*descales)[bh] = a == 0 ? 1.0f : a / fmax;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t bh = 0; bh < p.batch * heads; ++bh) {
    const int64_t b = bh / heads, h = bh % heads;
    const float ds = (*descales)[bh];
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t o = off(b, h, s);
      for (int64_t i = 0; i < d; ++i) (*codes)[o + i] = numerics::FloatToFp8(x[o + i] / ds, dt);
    }
  }
}

std::vector<float> LoadBf16(const TensorView& t, int64_t d, bool hadamard, int threads) {
  const int64_t n = t.desc.num_elements();
  std::vector<float> out(n);
  const uint16_t* src = t.as<const uint16_t>();
  const int64_t rows = n / d;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    if (!hadamard) {
      Bf16RowToFloat(src + r * d, d, out.data() + r * d);
      continue;
    }
    double tmp[192];
    for (int64_t i = 0; i < d; ++i) tmp[i] = Bf16Bits(src[r * d + i]);
    numerics::Hadamard(tmp, static_cast<int>(d));
    for (int64_t i = 0; i < d; ++i) out[r * d + i] = static_cast<float>(tmp[i]);
  }
  return out;
}

std::vector<float> ExpandDescale(const TensorView& t, int64_t count) {
  std::vector<float> out(count);
  const float* src = t.as<const float>();
  const bool scalar = t.desc.num_elements() == 1;
  for (int64_t i = 0; i < count; ++i) out[i] = scalar ? src[0] : src[i];
  return out;
}

struct HeadCtx {
  const Fp8AttentionParams* p;
  const float* qf;     // decoded Q codes, layout of q
  uint16_t* out;
  const float* kt;     // [nkb][Dqk][kBk]
  const float* v;      // [nkb*kBk][kDv]
  const uint8_t* v_bad;
  const Quantized* qz;
  fp8p::PFormat f;
  int64_t b;
};

template <int DQK>
struct Scratch {
  std::vector<float> q = std::vector<float>(kBq * DQK);
  std::vector<float> s = std::vector<float>(kBq * kBk);
  std::vector<float> o = std::vector<float>(kBq * kDv);
  RowState st[kBq];
  float alpha[kBq];
  int valid[kBq];
};

template <int DQK>
void QueryBlock(const HeadCtx& c, int64_t hq, int64_t q0, Scratch<DQK>& sc) {
  const Fp8AttentionParams& p = *c.p;
  const int64_t sq = p.seq_q, skv = p.seq_kv;
  const int64_t hkv = hq / (p.heads_q / p.heads_kv);
  auto qoff = [&](int64_t i) {
    return p.layout == Layout::kBhsd ? ((c.b * p.heads_q + hq) * sq + i) * DQK
                                     : ((c.b * sq + i) * p.heads_q + hq) * DQK;
  };
  auto ooff = [&](int64_t i) {
    return p.layout == Layout::kBhsd ? ((c.b * p.heads_q + hq) * sq + i) * kDv
                                     : ((c.b * sq + i) * p.heads_q + hq) * kDv;
  };
  const int rows = static_cast<int>(std::min<int64_t>(kBq, sq - q0));
  const int rows4 = (rows + 3) & ~3;
  for (int i = 0; i < rows; ++i) {
    std::copy(c.qf + qoff(q0 + i), c.qf + qoff(q0 + i) + DQK, sc.q.data() + i * DQK);
  }
  std::fill(sc.q.begin() + rows * DQK, sc.q.begin() + rows4 * DQK, 0.0f);
  std::fill(sc.o.begin(), sc.o.begin() + rows4 * kDv, 0.0f);
  for (int i = 0; i < rows4; ++i) sc.st[i] = RowState();
  const float score_c = static_cast<float>(static_cast<double>(c.qz->qd[c.b * p.heads_q + hq]) *
                                           c.qz->kd[c.b * p.heads_kv + hkv] * p.scale * kLog2e);
  auto lim = [&](int i) -> int64_t {
    return p.causal ? std::min(q0 + i + skv - sq, skv - 1) : skv - 1;
  };
  const int64_t max_lim = lim(rows - 1);
  for (int64_t kb = 0; max_lim >= 0 && kb <= max_lim / kBk; ++kb) {
    const int64_t k0 = kb * kBk;
    const int kcount = static_cast<int>(std::min<int64_t>(kBk, max_lim - k0 + 1));
    tiles::ScoreTile<DQK>(sc.q.data(), c.kt + kb * DQK * kBk, rows4, kcount, sc.s.data());
    for (int i = 0; i < rows4; ++i) {
      float* srow = sc.s.data() + i * kBk;
      const int valid = i < rows ? static_cast<int>(std::clamp<int64_t>(lim(i) - k0 + 1, 0, kBk)) : 0;
      sc.valid[i] = valid;
      if (valid == 0) {
        std::fill(srow, srow + kBk, 0.0f);
        sc.alpha[i] = 1.0f;
        continue;
      }
      sc.alpha[i] = PRow(srow, valid, score_c, p.p_mode, p.format, c.f, &sc.st[i]);
    }
    if (c.v_bad[kb]) {
      tiles::PvTileVisibleOnly<kDv>(sc.s.data(), c.v + k0 * kDv, sc.alpha, sc.valid, rows, sc.o.data());
    } else {
      tiles::PvTile<kDv>(sc.s.data(), c.v + k0 * kDv, sc.alpha, rows4, kcount, sc.o.data());
    }
  }
  const float vd = c.qz->vd[c.b * p.heads_kv + hkv];
  for (int i = 0; i < rows; ++i) {
    uint16_t* dst = c.out + ooff(q0 + i);
    const float* oi = sc.o.data() + i * kDv;
    if (lim(i) < 0) {
      for (int d = 0; d < kDv; ++d) dst[d] = numerics::FloatToBf16(0.0f, p.rounding);
      continue;
    }
    const float l = sc.st[i].l;
    for (int d = 0; d < kDv; ++d) dst[d] = numerics::FloatToBf16(oi[d] / l * vd, p.rounding);
  }
}

template <int DQK>
absl::Status Fp8AttentionImpl(const Fp8AttentionParams& p, const Quantized& qz, TensorView& out,
                              int threads) {
  const DType dt = Fp8FormatDType(p.format);
  const float* table = numerics::Fp8DecodeTable(dt);
  const int64_t skv = p.seq_kv;
  const int64_t nkb = (skv + kBk - 1) / kBk;
  const int64_t nqb = (p.seq_q + kBq - 1) / kBq;
  const int64_t group = p.heads_q / p.heads_kv;
  std::vector<float> qf(qz.q.size());
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(qz.q.size()); ++i) qf[i] = table[qz.q[i]];
  auto kvoff = [&](int64_t b, int64_t h, int64_t j, int64_t d) {
    return p.layout == Layout::kBhsd ? ((b * p.heads_kv + h) * skv + j) * d
                                     : ((b * skv + j) * p.heads_kv + h) * d;
  };
  // Key block kb of KV head (b, hkv) decoded to fp32: K transposed, V row-major.
  auto convert = [&](int64_t b, int64_t hkv, int64_t kb, float* kt, float* vf, uint8_t* v_bad) {
    float* ktb = kt + kb * DQK * kBk;
    bool bad = false;
    for (int jj = 0; jj < kBk; ++jj) {
      const int64_t j = kb * kBk + jj;
      float* vrow = vf + j * kDv;
      if (j >= skv) {
        for (int d = 0; d < DQK; ++d) ktb[d * kBk + jj] = 0.0f;
        std::fill(vrow, vrow + kDv, 0.0f);
        continue;
      }
      const uint8_t* krow = qz.k.data() + kvoff(b, hkv, j, DQK);
      for (int d = 0; d < DQK; ++d) ktb[d * kBk + jj] = table[krow[d]];
      const uint8_t* vsrc = qz.v.data() + kvoff(b, hkv, j, kDv);
      for (int d = 0; d < kDv; ++d) {
        vrow[d] = table[vsrc[d]];
        bad |= !std::isfinite(vrow[d]);
      }
    }
    v_bad[kb] = bad;
  };
  HeadCtx c;
  c.p = &p;
  c.qf = qf.data();
  c.out = out.as<uint16_t>();
  c.qz = &qz;
  c.f = fp8p::GetPFormat(p.format);
  tiles::RunAttentionSchedule<Scratch<DQK>>(
      c, p.batch, p.heads_kv, group, nqb, nkb, nkb * DQK * kBk, nkb * kBk * kDv, threads, convert,
      [](const HeadCtx& ctx, int64_t hq, int64_t q0, Scratch<DQK>& sc) { QueryBlock<DQK>(ctx, hq, q0, sc); });
  return absl::OkStatus();
}

}  // namespace

absl::Status Fp8Attention(const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                          TensorView& out, int threads) {
  if (out.desc.dtype != DType::kBf16 ||
      out.desc.num_elements() != p.batch * p.heads_q * p.seq_q * p.d_v) {
    return absl::InvalidArgumentError(absl::StrCat("fp8 attention output must be ",
                                                   p.OutputDesc().DebugString(), ", got ",
                                                   out.desc.DebugString()));
  }
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) {
    return absl::InvalidArgumentError("fp8 attention heads_q must be a multiple of heads_kv");
  }
  if (p.d_v != kDv || (p.d_qk != 128 && p.d_qk != 192)) {
    return absl::UnimplementedError(absl::StrCat("fp8 attention (d_qk, d_v) = (", p.d_qk, ", ", p.d_v,
                                                 ") is not implemented by the cpu backend (has "
                                                 "(128, 128) and (192, 128))"));
  }
  const DType dt = Fp8FormatDType(p.format);
  Quantized qz;
  if (p.fp8_inputs) {
    if (in.q.desc.dtype != dt || in.k.desc.dtype != dt || in.v.desc.dtype != dt ||
        in.q_descale.empty() || in.k_descale.empty() || in.v_descale.empty()) {
      return absl::InvalidArgumentError("fp8 attention: FP8 inputs need their format and descales");
    }
    auto codes = [](const TensorView& t) {
      const uint8_t* s = t.as<const uint8_t>();
      return std::vector<uint8_t>(s, s + t.desc.num_elements());
    };
    qz.q = codes(in.q);
    qz.k = codes(in.k);
    qz.v = codes(in.v);
    qz.qd = ExpandDescale(in.q_descale, p.batch * p.heads_q);
    qz.kd = ExpandDescale(in.k_descale, p.batch * p.heads_kv);
    qz.vd = ExpandDescale(in.v_descale, p.batch * p.heads_kv);
  } else {
    if (in.q.desc.dtype != DType::kBf16 || in.k.desc.dtype != DType::kBf16 ||
        in.v.desc.dtype != DType::kBf16) {
      return absl::InvalidArgumentError("fp8 attention: inputs must be all bf16 or all FP8");
    }
    const bool per_head = p.descale_mode == DescaleMode::kPerHead;
    QuantizeSlices(LoadBf16(in.q, p.d_qk, p.hadamard, threads), p, p.heads_q, p.seq_q, p.d_qk,
                   per_head, dt, threads, &qz.q, &qz.qd);
    QuantizeSlices(LoadBf16(in.k, p.d_qk, p.hadamard, threads), p, p.heads_kv, p.seq_kv, p.d_qk,
                   per_head, dt, threads, &qz.k, &qz.kd);
    QuantizeSlices(LoadBf16(in.v, p.d_v, false, threads), p, p.heads_kv, p.seq_kv, p.d_v, per_head,
                   dt, threads, &qz.v, &qz.vd);
  }
  return p.d_qk == 128 ? Fp8AttentionImpl<128>(p, qz, out, threads)
                       : Fp8AttentionImpl<192>(p, qz, out, threads);
}

}  // namespace cpu
}  // namespace kernelserve
