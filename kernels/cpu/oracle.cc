// fp64 oracle. Definitions the oracle fixes where DESIGN §4 leaves a choice:
// - A query row that sees no key (causal with seq_q > seq_kv) outputs 0.
// - FP8 attention blocks are 64 keys aligned at key 0 (block b holds keys
//   [64b, 64b + 64)); masked keys contribute P = 0 and a block whose keys are
//   all masked is skipped.
// - Naive P: the running row max after block b is m_b = max of t over the
//   unmasked keys of blocks 0..b (key order). Block b's probabilities are
//   P̂ = fp8(2^(t - m_b)) (RNE, the params' format, no block scale); the
//   accumulated O is rescaled by 2^(m_b - m_{b+1}) as the max grows, so
//   O = Σ_b 2^(m_b - m) Σ_j P̂_j V_j, and it is divided by the sum of the
//   unrounded probabilities L = Σ_j 2^(t_j - m), m the final row max.
// - MLA: V is the dequantized latent kv[:512] * kv_scale.
#include "kernels/cpu/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace oracle {
namespace {

constexpr int64_t kKeyBlock = 64;

int64_t Off(Layout layout, int64_t b, int64_t h, int64_t s, int64_t heads, int64_t seq, int64_t d) {
  return layout == Layout::kBhsd ? ((b * heads + h) * seq + s) * d : ((b * seq + s) * heads + h) * d;
}

enum class PKind { kNone, kExact, kLean, kNaive };

// Dequantized (or plain) attention inputs in fp64, in the params' layout.
struct AttnProblem {
  Layout layout;
  bool causal;
  double scale;
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, d_qk, d_v;
  const double* q;
  const double* k;
  const double* v;
};

// One query row: writes out[0..d_v). t, acc and oblk are scratch of sizes
// seq_kv, d_v and d_v.
void AttendRow(const AttnProblem& a, PKind pk, Fp8Format format, int64_t b, int64_t h, int64_t i,
               std::vector<double>& t, std::vector<double>& acc, std::vector<double>& oblk, double* oi) {
  const DType fp8 = numerics::Fp8FormatToDType(format);
  const int64_t hk = h / (a.heads_q / a.heads_kv);
  const double* qi = a.q + Off(a.layout, b, h, i, a.heads_q, a.seq_q, a.d_qk);
  // Keys 0..last are visible (bottom-right aligned causal mask).
  const int64_t last = a.causal ? std::min(a.seq_kv - 1, i + a.seq_kv - a.seq_q) : a.seq_kv - 1;
  std::fill(oi, oi + a.d_v, 0.0);
  if (last < 0) return;  // sees no key: 0
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= last; ++j) {
    const double* kj = a.k + Off(a.layout, b, hk, j, a.heads_kv, a.seq_kv, a.d_qk);
    double s = 0;
    for (int64_t d = 0; d < a.d_qk; ++d) s += qi[d] * kj[d];
    t[j] = s * a.scale * M_LOG2E;  // base-2 units
    m = std::max(m, t[j]);
  }
  std::fill(acc.begin(), acc.end(), 0.0);
  double l = 0;
  auto vrow = [&](int64_t j) { return a.v + Off(a.layout, b, hk, j, a.heads_kv, a.seq_kv, a.d_v); };
  switch (pk) {
    case PKind::kNone: {
      for (int64_t j = 0; j <= last; ++j) {
        const double p = std::exp2(t[j] - m);
        l += p;
        const double* vj = vrow(j);
        for (int64_t d = 0; d < a.d_v; ++d) acc[d] += p * vj[d];
      }
      break;
    }
    case PKind::kExact:
    case PKind::kLean: {
      // Per block: O_b, L_b in the block's own frame 2^R_b; combined
      // relative to the row's largest block reference M.
      const int big_r = numerics::BlockReference(m, format);  // = max_b R_b
      for (int64_t j0 = 0; j0 <= last; j0 += kKeyBlock) {
        const int64_t j1 = std::min(last, j0 + kKeyBlock - 1);
        double bmax = -std::numeric_limits<double>::infinity();
        for (int64_t j = j0; j <= j1; ++j) bmax = std::max(bmax, t[j]);
        const int r = numerics::BlockReference(bmax, format);
        std::fill(oblk.begin(), oblk.end(), 0.0);
        double lb = 0;
        for (int64_t j = j0; j <= j1; ++j) {
          const double y = t[j] - r;
          const uint8_t code =
              pk == PKind::kExact ? numerics::ExactPCode(y, format) : numerics::LeanPCode(y, format);
          const double ph = numerics::Fp8ToFloat(code, fp8);
          if (ph == 0) continue;
          lb += ph;
          const double* vj = vrow(j);
          for (int64_t d = 0; d < a.d_v; ++d) oblk[d] += ph * vj[d];
        }
        const double w = std::ldexp(1.0, r - big_r);  // exact power of two
        l += w * lb;
        for (int64_t d = 0; d < a.d_v; ++d) acc[d] += w * oblk[d];
      }
      break;
    }
    case PKind::kNaive: {
      double run = -std::numeric_limits<double>::infinity();
      for (int64_t j0 = 0; j0 <= last; j0 += kKeyBlock) {
        const int64_t j1 = std::min(last, j0 + kKeyBlock - 1);
        for (int64_t j = j0; j <= j1; ++j) run = std::max(run, t[j]);
        std::fill(oblk.begin(), oblk.end(), 0.0);
        for (int64_t j = j0; j <= j1; ++j) {
          const double p = std::exp2(t[j] - run);
          l += std::exp2(t[j] - m);  // unrounded, in the final frame
          const double ph = numerics::Fp8ToFloat(numerics::DoubleToFp8(p, fp8), fp8);
          if (ph == 0) continue;
          const double* vj = vrow(j);
          for (int64_t d = 0; d < a.d_v; ++d) oblk[d] += ph * vj[d];
        }
        const double w = std::exp2(run - m);
        for (int64_t d = 0; d < a.d_v; ++d) acc[d] += w * oblk[d];
      }
      break;
    }
  }
  for (int64_t d = 0; d < a.d_v; ++d) oi[d] = acc[d] / l;
}

// Rows are independent, so threads (OpenMP, when built with it) change no result.
std::vector<double> RunAttention(const AttnProblem& a, PKind pk, Fp8Format format) {
  std::vector<double> out(a.batch * a.heads_q * a.seq_q * a.d_v, 0.0);
  const int64_t rows = a.batch * a.heads_q * a.seq_q;
#pragma omp parallel
  {
    std::vector<double> t(a.seq_kv), acc(a.d_v), oblk(a.d_v);
#pragma omp for schedule(dynamic, 8)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r % a.seq_q, h = (r / a.seq_q) % a.heads_q, b = r / (a.seq_q * a.heads_q);
      AttendRow(a, pk, format, b, h, i, t, acc, oblk,
                out.data() + Off(a.layout, b, h, i, a.heads_q, a.seq_q, a.d_v));
    }
  }
  return out;
}

absl::Status CheckDesc(const char* name, const TensorDesc& have, const TensorDesc& want) {
  if (have.dtype != want.dtype || have.shape != want.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected ", want.DebugString(), ", got ", have.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status CheckData(const char* name, const TensorView& t) {
  if (t.data == nullptr && t.desc.num_elements() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no data"));
  }
  return absl::OkStatus();
}

int64_t IndexAt(const TensorView& t, int64_t i) {
  return static_cast<int64_t>(numerics::ElementToDouble(t.desc.dtype, t.data, i));
}

// Expands a descale tensor ([1] or [B,H]) to [B*H].
absl::StatusOr<std::vector<float>> ExpandDescale(const char* name, const TensorView& t, int64_t bh) {
  KS_RETURN_IF_ERROR(CheckData(name, t));
  if (t.desc.dtype != DType::kFp32) return absl::InvalidArgumentError(absl::StrCat(name, ": expected fp32"));
  const int64_t n = t.desc.num_elements();
  const float* f = t.as<const float>();
  if (n == 1) return std::vector<float>(bh, f[0]);
  if (n == bh) return std::vector<float>(f, f + n);
  return absl::InvalidArgumentError(absl::StrCat(name, ": expected [1] or [B,H] elements, got ", t.desc.DebugString()));
}

// Quantizes one bf16 attention operand as the server does.
void QuantizeOperand(const Fp8AttentionParams& p, const TensorView& src, int64_t heads, int64_t seq,
                     int64_t dim, bool rotate, HostTensor* codes, std::vector<float>* descale) {
  const DType fp8 = Fp8FormatDType(p.format);
  std::vector<float> x = numerics::ToFloats(src);
  if (rotate) {
    std::vector<double> row(dim);
    for (size_t base = 0; base < x.size(); base += dim) {
      for (int64_t d = 0; d < dim; ++d) row[d] = x[base + d];
      numerics::Hadamard(row.data(), static_cast<int>(dim));
      for (int64_t d = 0; d < dim; ++d) x[base + d] = static_cast<float>(row[d]);
    }
  }
  *codes = HostTensor(fp8, src.desc.shape);
  uint8_t* c = codes->bytes();
  if (p.descale_mode != DescaleMode::kPerHead) {
    const float ds = numerics::QuantizeFp8(x.data(), static_cast<int64_t>(x.size()), fp8, c);
    descale->assign(p.batch * heads, ds);
    return;
  }
  descale->assign(p.batch * heads, 1.0f);
  std::vector<float> head(seq * dim);
  std::vector<uint8_t> hc(seq * dim);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t o = Off(p.layout, b, h, s, heads, seq, dim);
        std::copy(x.begin() + o, x.begin() + o + dim, head.begin() + s * dim);
      }
      (*descale)[b * heads + h] = numerics::QuantizeFp8(head.data(), seq * dim, fp8, hc.data());
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t o = Off(p.layout, b, h, s, heads, seq, dim);
        std::copy(hc.begin() + s * dim, hc.begin() + (s + 1) * dim, c + o);
      }
    }
  }
}

std::vector<double> Dequantize(const Fp8AttentionParams& p, const HostTensor& codes,
                               const std::vector<float>& descale, int64_t heads, int64_t seq, int64_t dim) {
  std::vector<double> x = numerics::ToDoubles(codes.view());
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const double ds = descale[b * heads + h];
      for (int64_t s = 0; s < seq; ++s) {
        double* row = x.data() + Off(p.layout, b, h, s, heads, seq, dim);
        for (int64_t d = 0; d < dim; ++d) row[d] *= ds;
      }
    }
  }
  return x;
}

double Silu(double g) { return g / (1.0 + std::exp(-g)); }

// Dequantized rows [rows, cols] of expert e of an MXFP4 weight [E, rows, cols].
void DequantExpert(const TensorView& w, const TensorView& scales, int64_t e, int64_t rows, int64_t cols,
                   std::vector<double>* out) {
  out->resize(rows * cols);
  const uint8_t* packed = w.as<const uint8_t>();
  const uint8_t* sc = scales.as<const uint8_t>();
  const float* e2m1 = numerics::E2M1DecodeTable();
  const int64_t base = e * rows * cols;
  const int64_t sblocks = cols / 32;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double s = numerics::E8M0ToFloat(sc[(e * rows + r) * sblocks + c / 32]);
      (*out)[r * cols + c] = e2m1[numerics::Fp4Nibble(packed, base + r * cols + c)] * s;
    }
  }
}

// Per-pair matmul a[pair, :in] · W[e]^T -> [pairs, rows], grouped by expert so
// each used expert is dequantized once.
std::vector<double> PairMatmul(const std::vector<double>& a, int64_t in_dim, const int32_t* ids,
                               int64_t pairs, const TensorView& w, const TensorView& scales, int64_t rows) {
  std::vector<double> out(pairs * rows, 0.0);
  std::map<int32_t, std::vector<int64_t>> by_expert;
  for (int64_t i = 0; i < pairs; ++i) by_expert[ids[i]].push_back(i);
  std::vector<double> we;
  for (const auto& [e, list] : by_expert) {
    DequantExpert(w, scales, e, rows, in_dim, &we);
    const int64_t n = static_cast<int64_t>(list.size()) * rows;
#pragma omp parallel for schedule(static)
    for (int64_t idx = 0; idx < n; ++idx) {
      const int64_t pr = list[idx / rows], r = idx % rows;
      const double* x = a.data() + pr * in_dim;
      const double* wr = we.data() + r * in_dim;
      double s = 0;
      for (int64_t k = 0; k < in_dim; ++k) s += x[k] * wr[k];
      out[pr * rows + r] = s;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<double>> Attention(const AttentionParams& p, const HostTensor& q,
                                              const HostTensor& k, const HostTensor& v) {
  AttentionParams check = p;
  KS_RETURN_IF_ERROR(check.Validate(q.desc(), k.desc(), v.desc()));
  const std::vector<double> qd = numerics::ToDoubles(q.view());
  const std::vector<double> kd = numerics::ToDoubles(k.view());
  const std::vector<double> vd = numerics::ToDoubles(v.view());
  const AttnProblem a{p.layout, p.causal, check.scale, check.batch, check.heads_q, check.heads_kv,
                      check.seq_q, check.seq_kv, check.head_dim, check.head_dim,
                      qd.data(), kd.data(), vd.data()};
  return RunAttention(a, PKind::kNone, Fp8Format::kE4M3Fn);
}

absl::StatusOr<QuantizedAttentionInputs> QuantizeAttentionInputs(const Fp8AttentionParams& p,
                                                                 const Fp8AttentionInputs& in) {
  KS_RETURN_IF_ERROR(CheckData("q", in.q));
  KS_RETURN_IF_ERROR(CheckData("k", in.k));
  KS_RETURN_IF_ERROR(CheckData("v", in.v));
  QuantizedAttentionInputs out;
  const int64_t bq = p.batch * p.heads_q, bk = p.batch * p.heads_kv;
  if (p.fp8_inputs) {
    const DType fp8 = Fp8FormatDType(p.format);
    for (const TensorView* t : {&in.q, &in.k, &in.v}) {
      if (t->desc.dtype != fp8) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected ", DTypeName(fp8), " inputs, got ", t->desc.DebugString()));
      }
    }
    auto copy = [](const TensorView& t) {
      const uint8_t* b = t.as<const uint8_t>();
      return HostTensor(t.desc, std::vector<uint8_t>(b, b + t.desc.num_bytes()));
    };
    out.q = copy(in.q);
    out.k = copy(in.k);
    out.v = copy(in.v);
    KS_ASSIGN_OR_RETURN(out.q_descale, ExpandDescale("q_descale", in.q_descale, bq));
    KS_ASSIGN_OR_RETURN(out.k_descale, ExpandDescale("k_descale", in.k_descale, bk));
    KS_ASSIGN_OR_RETURN(out.v_descale, ExpandDescale("v_descale", in.v_descale, bk));
    return out;
  }
  for (const TensorView* t : {&in.q, &in.k, &in.v}) {
    if (t->desc.dtype != DType::kBf16) {
      return absl::InvalidArgumentError(absl::StrCat("expected bf16 inputs, got ", t->desc.DebugString()));
    }
  }
  QuantizeOperand(p, in.q, p.heads_q, p.seq_q, p.d_qk, p.hadamard, &out.q, &out.q_descale);
  QuantizeOperand(p, in.k, p.heads_kv, p.seq_kv, p.d_qk, p.hadamard, &out.k, &out.k_descale);
  QuantizeOperand(p, in.v, p.heads_kv, p.seq_kv, p.d_v, false, &out.v, &out.v_descale);
  return out;
}

absl::StatusOr<std::vector<double>> Fp8Attention(const Fp8AttentionParams& p,
                                                 const QuantizedAttentionInputs& in, PQuant pq) {
  const DType fp8 = Fp8FormatDType(p.format);
  KS_RETURN_IF_ERROR(CheckDesc("q", in.q.desc(), TensorDesc{fp8, in.q.shape()}));
  const int64_t bq = p.batch * p.heads_q, bk = p.batch * p.heads_kv;
  if (static_cast<int64_t>(in.q_descale.size()) != bq || static_cast<int64_t>(in.k_descale.size()) != bk ||
      static_cast<int64_t>(in.v_descale.size()) != bk) {
    return absl::InvalidArgumentError("descales must be expanded to [B*H]");
  }
  if (in.q.num_elements() != bq * p.seq_q * p.d_qk || in.k.num_elements() != bk * p.seq_kv * p.d_qk ||
      in.v.num_elements() != bk * p.seq_kv * p.d_v || in.k.dtype() != fp8 || in.v.dtype() != fp8) {
    return absl::InvalidArgumentError("quantized inputs do not match the params (run Validate first)");
  }
  const std::vector<double> qd = Dequantize(p, in.q, in.q_descale, p.heads_q, p.seq_q, p.d_qk);
  const std::vector<double> kd = Dequantize(p, in.k, in.k_descale, p.heads_kv, p.seq_kv, p.d_qk);
  const std::vector<double> vd = Dequantize(p, in.v, in.v_descale, p.heads_kv, p.seq_kv, p.d_v);
  const AttnProblem a{p.layout, p.causal, p.scale, p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv,
                      p.d_qk, p.d_v, qd.data(), kd.data(), vd.data()};
  PKind pk = PKind::kNone;
  if (pq == PQuant::kAsParams) {
    switch (p.p_mode) {
      case PMode::kExact: pk = PKind::kExact; break;
      case PMode::kLean: pk = PKind::kLean; break;
      case PMode::kNaive: pk = PKind::kNaive; break;
    }
  }
  return RunAttention(a, pk, p.format);
}

absl::StatusOr<std::vector<double>> Fp8AttentionUnquantized(const Fp8AttentionParams& p,
                                                            const HostTensor& q, const HostTensor& k,
                                                            const HostTensor& v) {
  if (p.fp8_inputs) {
    return absl::FailedPreconditionError("unquantized attention needs the bf16 inputs of the call");
  }
  Fp8AttentionParams check = p;
  KS_RETURN_IF_ERROR(check.Validate(q.desc(), k.desc(), v.desc(), nullptr, nullptr, nullptr));
  const std::vector<double> qd = numerics::ToDoubles(q.view());
  const std::vector<double> kd = numerics::ToDoubles(k.view());
  const std::vector<double> vd = numerics::ToDoubles(v.view());
  // The Hadamard rotation leaves QK^T unchanged, so it is not applied here.
  const AttnProblem a{p.layout, p.causal, check.scale, check.batch, check.heads_q, check.heads_kv,
                      check.seq_q, check.seq_kv, check.d_qk, check.d_v, qd.data(), kd.data(), vd.data()};
  return RunAttention(a, PKind::kNone, p.format);
}

absl::StatusOr<std::vector<double>> MlaDecode(const MlaDecodeParams& p, const MlaDecodeInputs& in) {
  KS_RETURN_IF_ERROR(CheckData("q_lat", in.q_lat));
  KS_RETURN_IF_ERROR(CheckData("q_pe", in.q_pe));
  KS_RETURN_IF_ERROR(CheckData("kv", in.kv));
  if (in.kv.desc.dtype != DType::kFp8E4M3Fn && in.kv.desc.dtype != DType::kFp8E4M3Fnuz) {
    return absl::InvalidArgumentError(absl::StrCat("kv: expected fp8, got ", in.kv.desc.DebugString()));
  }
  if (p.paged && (in.seq_lens.empty() || in.kv_indices.empty() || in.kv_indptr.empty())) {
    return absl::InvalidArgumentError("paged MLA decode needs seq_lens, kv_indices and kv_indptr");
  }
  const int64_t B = p.batch, Q = p.q_len, H = p.heads;
  const int64_t L = kMlaLatentDim, R = kMlaRopeDim, W = kMlaRowDim;
  if (in.q_lat.desc.num_elements() != B * Q * H * L || in.q_pe.desc.num_elements() != B * Q * H * R) {
    return absl::InvalidArgumentError("q_lat/q_pe do not match the params (run Validate first)");
  }
  const std::vector<double> ql = numerics::ToDoubles(in.q_lat);
  const std::vector<double> qp = numerics::ToDoubles(in.q_pe);
  const uint8_t* kv = in.kv.as<const uint8_t>();
  const float* dec = numerics::Fp8DecodeTable(in.kv.desc.dtype);
  const int64_t S = p.paged ? 0 : in.kv.desc.shape[1];
  std::vector<double> out(B * Q * H * L, 0.0);
  std::vector<double> keys;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t seq = p.has_seq_lens || p.paged ? IndexAt(in.seq_lens, b) : S;
    const int64_t qlen = p.has_q_lens ? IndexAt(in.q_lens, b) : Q;
    // Dequantized rows of this request, token order.
    keys.assign(seq * W, 0.0);
    for (int64_t j = 0; j < seq; ++j) {
      int64_t row;
      if (p.paged) {
        const int64_t page = IndexAt(in.kv_indices, IndexAt(in.kv_indptr, b) + j / p.page_size);
        row = page * p.page_size + j % p.page_size;
        if (row < 0 || row >= in.kv.desc.shape[0]) {
          return absl::InvalidArgumentError(absl::StrCat("kv slot ", row, " out of range"));
        }
      } else {
        row = b * S + j;
      }
      for (int64_t d = 0; d < W; ++d) keys[j * W + d] = dec[kv[row * W + d]] * p.kv_scale;
    }
#pragma omp parallel for schedule(dynamic)
    for (int64_t th = 0; th < qlen * H; ++th) {
      const int64_t t = th / H, h = th % H;
      const int64_t visible = seq - qlen + t + 1;  // keys [0, seq - qlen + t]
      std::vector<double> scores(visible), acc(L, 0.0);
      {
        const double* qlh = ql.data() + ((b * Q + t) * H + h) * L;
        const double* qph = qp.data() + ((b * Q + t) * H + h) * R;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < visible; ++j) {
          const double* kj = keys.data() + j * W;
          double s = 0;
          for (int64_t d = 0; d < L; ++d) s += qlh[d] * kj[d];
          for (int64_t d = 0; d < R; ++d) s += qph[d] * kj[L + d];
          scores[j] = s * p.scale;  // kv_scale is already in the dequantized rows
          m = std::max(m, scores[j]);
        }
        double l = 0;
        for (int64_t j = 0; j < visible; ++j) {
          const double w = std::exp(scores[j] - m);
          l += w;
          const double* vj = keys.data() + j * W;
          for (int64_t d = 0; d < L; ++d) acc[d] += w * vj[d];
        }
        double* o = out.data() + ((b * Q + t) * H + h) * L;
        for (int64_t d = 0; d < L; ++d) o[d] = acc[d] / l;
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<double>> Moe(const MoeParams& p, const MoeInputs& in) {
  KS_RETURN_IF_ERROR(CheckData("x", in.x));
  KS_RETURN_IF_ERROR(CheckData("topk_ids", in.topk_ids));
  if (in.topk_ids.desc.dtype != DType::kInt32 || in.topk_ids.desc.num_elements() != p.tokens * p.top_k) {
    return absl::InvalidArgumentError("topk_ids: expected int32 [T,top_k] (run Validate first)");
  }
  const int32_t* ids = in.topk_ids.as<const int32_t>();
  const int64_t T = p.tokens, K = p.top_k, pairs = T * K;
  for (int64_t i = 0; i < pairs; ++i) {
    if (ids[i] < 0 || ids[i] >= p.experts) {
      return absl::InvalidArgumentError(absl::StrCat("topk_ids[", i, "] out of range"));
    }
  }
  const std::vector<double> x = numerics::ToDoubles(in.x);
  auto gate_up = [&](bool swiglu) -> std::vector<double> {
    // Each pair reads its token's row of x.
    std::vector<double> xa(pairs * p.hidden);
    for (int64_t pr = 0; pr < pairs; ++pr) {
      std::copy(x.begin() + (pr / K) * p.hidden, x.begin() + (pr / K + 1) * p.hidden,
                xa.begin() + pr * p.hidden);
    }
    std::vector<double> h = PairMatmul(xa, p.hidden, ids, pairs, in.w13, in.w13_scales, 2 * p.inter);
    if (!swiglu) return h;
    std::vector<double> a(pairs * p.inter);
    for (int64_t pr = 0; pr < pairs; ++pr) {
      for (int64_t i = 0; i < p.inter; ++i) {
        a[pr * p.inter + i] = Silu(h[pr * 2 * p.inter + i]) * h[pr * 2 * p.inter + p.inter + i];
      }
    }
    return a;
  };
  auto down = [&](const std::vector<double>& a, bool weighted) -> std::vector<double> {
    std::vector<double> y = PairMatmul(a, p.inter, ids, pairs, in.w2, in.w2_scales, p.out_dim);
    if (!weighted) return y;
    const float* w = in.topk_weights.as<const float>();
    std::vector<double> o(T * p.out_dim, 0.0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t r = 0; r < K; ++r) {
        const double wt = w[t * K + r];
        const double* yr = y.data() + (t * K + r) * p.out_dim;
        for (int64_t n = 0; n < p.out_dim; ++n) o[t * p.out_dim + n] += wt * yr[n];
      }
    }
    return o;
  };
  const bool need_weights = p.stage == MoeStage::kLayer || (p.stage == MoeStage::kDown && p.weighted_sum);
  if (need_weights) KS_RETURN_IF_ERROR(CheckData("topk_weights", in.topk_weights));
  switch (p.stage) {
    case MoeStage::kGateUp:
      KS_RETURN_IF_ERROR(CheckData("w13", in.w13));
      KS_RETURN_IF_ERROR(CheckData("w13_scales", in.w13_scales));
      return gate_up(p.swiglu);
    case MoeStage::kDown:
      KS_RETURN_IF_ERROR(CheckData("w2", in.w2));
      KS_RETURN_IF_ERROR(CheckData("w2_scales", in.w2_scales));
      return down(x, p.weighted_sum);
    case MoeStage::kLayer: {
      KS_RETURN_IF_ERROR(CheckData("w13", in.w13));
      KS_RETURN_IF_ERROR(CheckData("w13_scales", in.w13_scales));
      KS_RETURN_IF_ERROR(CheckData("w2", in.w2));
      KS_RETURN_IF_ERROR(CheckData("w2_scales", in.w2_scales));
      std::vector<double> a = gate_up(true);
      // The intermediate is stored as bf16 (RTNE) between the two GEMMs.
      for (double& v : a) v = numerics::Bf16ToFloat(numerics::DoubleToBf16(v, Rounding::kRtne));
      return down(a, true);
    }
  }
  return absl::InvalidArgumentError("unknown MoE stage");
}

}  // namespace oracle
}  // namespace kernelserve
