#include "server/bench/bench_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/api/status_macros.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"
#include "server/input_checks.h"

namespace kernelserve {
namespace bench {
namespace {

Layout ToLayout(pb::Layout l) { return l == pb::BSHD ? Layout::kBshd : Layout::kBhsd; }

Rounding ToRounding(pb::Rounding r) {
  if (r == pb::RTNA) return Rounding::kRtna;
  if (r == pb::RTZ) return Rounding::kRtz;
  return Rounding::kRtne;
}

Fp8Format ToFormat(pb::Fp8Format f) {
  return f == pb::E4M3FNUZ ? Fp8Format::kE4M3Fnuz : Fp8Format::kE4M3Fn;
}

PMode ToPMode(pb::PMode m) {
  if (m == pb::LEAN) return PMode::kLean;
  if (m == pb::NAIVE) return PMode::kNaive;
  return PMode::kExact;
}

Shape AttnShape(Layout layout, int64_t b, int64_t h, int64_t s, int64_t d) {
  return layout == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

absl::Status Positive(const std::string& field, int64_t v) {
  if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(field, ": expected > 0, got ", v));
  return absl::OkStatus();
}

// Dims of the attention shape with defaults applied.
struct AttnDims {
  int64_t b, hq, hkv, sq, skv, dqk, dv;
};

absl::StatusOr<AttnDims> GetAttnDims(const pb::BenchJobSpec& spec) {
  if (!spec.has_attention()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.attention: required for op ", BenchOpName(static_cast<BenchOp>(spec.op()))));
  }
  const pb::AttentionShape& a = spec.attention();
  AttnDims d{a.batch(), a.heads_q(), a.heads_kv() ? a.heads_kv() : a.heads_q(), a.seq_q(),
             a.seq_kv() ? a.seq_kv() : a.seq_q(), a.head_dim(), a.head_dim_v() ? a.head_dim_v() : a.head_dim()};
  KS_RETURN_IF_ERROR(Positive("spec.attention.batch", d.b));
  KS_RETURN_IF_ERROR(Positive("spec.attention.heads_q", d.hq));
  KS_RETURN_IF_ERROR(Positive("spec.attention.heads_kv", d.hkv));
  KS_RETURN_IF_ERROR(Positive("spec.attention.seq_q", d.sq));
  KS_RETURN_IF_ERROR(Positive("spec.attention.seq_kv", d.skv));
  KS_RETURN_IF_ERROR(Positive("spec.attention.head_dim", d.dqk));
  if (spec.op() == pb::OP_ATTENTION && a.head_dim_v() != 0 && a.head_dim_v() != a.head_dim()) {
    return absl::InvalidArgumentError("spec.attention.head_dim_v: bf16 attention needs head_dim_v == head_dim");
  }
  return d;
}

struct MlaDims {
  int64_t b, q_len, h, s;
  int64_t page = 0;   // 0: contiguous
  int64_t pages = 0;  // paged: pages per request
};

// Far more than a decode server uses, and small enough that the pool size
// below cannot overflow.
constexpr int64_t kMaxBenchPageSize = 1 << 20;

absl::StatusOr<MlaDims> GetMlaDims(const pb::BenchJobSpec& spec) {
  if (!spec.has_mla()) return absl::InvalidArgumentError("spec.mla: required for op mla_decode");
  const pb::MlaDecodeShape& m = spec.mla();
  MlaDims d{m.batch(), m.q_len() ? m.q_len() : 1, m.heads(), m.seq_len()};
  KS_RETURN_IF_ERROR(Positive("spec.mla.batch", d.b));
  KS_RETURN_IF_ERROR(Positive("spec.mla.heads", d.h));
  KS_RETURN_IF_ERROR(Positive("spec.mla.seq_len", d.s));
  if (d.s < d.q_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.mla.seq_len: expected >= q_len (", d.q_len, "), got ", d.s));
  }
  if (m.page_size() < 0 || m.page_size() > kMaxBenchPageSize) {
    return absl::InvalidArgumentError(absl::StrCat("spec.mla.page_size: expected 0 (contiguous) or 1..",
                                                   kMaxBenchPageSize, " (paged), got ", m.page_size()));
  }
  d.page = m.page_size();
  if (d.page > 0) {
    d.pages = (d.s + d.page - 1) / d.page;
    // Slots, page numbers and lengths are int32 on the wire and in the kernels.
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    if (d.s > kMax || d.pages > kMax / d.b || d.b * d.pages > kMax / d.page) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.mla: a paged pool of batch * ceil(seq_len / page_size) pages of page_size rows must have at "
          "most ",
          kMax, " rows (int32 slots); got batch=", d.b, " seq_len=", d.s, " page_size=", d.page));
    }
  }
  return d;
}

// A paged KV layout: every request's pages drawn, shuffled by `seed`, from
// one pool of B * pages pages, so neighbouring tokens are far apart in
// memory. Without a seed the pages stay in order: enough for validating a
// spec, whose checks do not depend on the order.
void PagedMlaLayout(const MlaDims& m, std::optional<uint64_t> seed, HostTensor* indices, HostTensor* indptr,
                    HostTensor* seq_lens) {
  const int64_t n = m.b * m.pages;
  *indices = HostTensor(DType::kInt32, {n});
  auto* idx = indices->data<int32_t>();
  for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
  if (seed.has_value()) {
    numerics::SeededRng rng(*seed);
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = std::min<int64_t>(static_cast<int64_t>(rng.Uniform() * static_cast<double>(i + 1)), i);
      std::swap(idx[i], idx[j]);
    }
  }
  *indptr = HostTensor(DType::kInt32, {m.b + 1});
  for (int64_t b = 0; b <= m.b; ++b) indptr->data<int32_t>()[b] = static_cast<int32_t>(b * m.pages);
  *seq_lens = HostTensor(DType::kInt32, {m.b});
  for (int64_t b = 0; b < m.b; ++b) seq_lens->data<int32_t>()[b] = static_cast<int32_t>(m.s);
}

struct MoeDims {
  int64_t t, e, k_top, hidden, inter, n;
};

absl::StatusOr<MoeDims> GetMoeDims(const pb::BenchJobSpec& spec) {
  if (!spec.has_moe()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.moe: required for op ", BenchOpName(static_cast<BenchOp>(spec.op()))));
  }
  const pb::MoeShape& m = spec.moe();
  MoeDims d{m.tokens(), m.experts(), m.top_k(), m.hidden(), m.inter(), m.out_dim() ? m.out_dim() : m.hidden()};
  KS_RETURN_IF_ERROR(Positive("spec.moe.tokens", d.t));
  KS_RETURN_IF_ERROR(Positive("spec.moe.experts", d.e));
  KS_RETURN_IF_ERROR(Positive("spec.moe.top_k", d.k_top));
  KS_RETURN_IF_ERROR(Positive("spec.moe.hidden", d.hidden));
  KS_RETURN_IF_ERROR(Positive("spec.moe.inter", d.inter));
  KS_RETURN_IF_ERROR(Positive("spec.moe.out_dim", d.n));
  if (d.k_top > d.e) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.moe.top_k: expected <= experts (", d.e, "), got ", d.k_top));
  }
  return d;
}

MoeStage StageOf(BenchOp op) {
  if (op == BenchOp::kMoeGateUp) return MoeStage::kGateUp;
  if (op == BenchOp::kMoeDown) return MoeStage::kDown;
  return MoeStage::kLayer;
}

bool IsMoe(BenchOp op) {
  return op == BenchOp::kMoeGateUp || op == BenchOp::kMoeDown || op == BenchOp::kMoeLayer;
}

// The descriptors of the inputs the spec implies (generated inputs).
absl::StatusOr<std::map<std::string, TensorDesc>> SpecDescs(const pb::BenchJobSpec& spec) {
  std::map<std::string, TensorDesc> d;
  const BenchOp op = static_cast<BenchOp>(spec.op());
  switch (op) {
    case BenchOp::kAttention:
    case BenchOp::kFp8Attention: {
      KS_ASSIGN_OR_RETURN(AttnDims a, GetAttnDims(spec));
      const Layout l = ToLayout(spec.attention().layout());
      d["q"] = TensorDesc{DType::kBf16, AttnShape(l, a.b, a.hq, a.sq, a.dqk)};
      d["k"] = TensorDesc{DType::kBf16, AttnShape(l, a.b, a.hkv, a.skv, a.dqk)};
      d["v"] = TensorDesc{DType::kBf16, AttnShape(l, a.b, a.hkv, a.skv, a.dv)};
      break;
    }
    case BenchOp::kMlaDecode: {
      KS_ASSIGN_OR_RETURN(MlaDims m, GetMlaDims(spec));
      d["q_lat"] = TensorDesc{DType::kBf16, {m.b, m.q_len, m.h, kMlaLatentDim}};
      d["q_pe"] = TensorDesc{DType::kBf16, {m.b, m.q_len, m.h, kMlaRopeDim}};
      const DType kv = Fp8FormatDType(ToFormat(spec.mla().kv_format()));
      if (m.page == 0) {
        d["kv"] = TensorDesc{kv, {m.b, m.s, kMlaRowDim}};
      } else {
        d["kv"] = TensorDesc{kv, {m.b * m.pages * m.page, kMlaRowDim}};
        d["kv_indices"] = TensorDesc{DType::kInt32, {m.b * m.pages}};
        d["kv_indptr"] = TensorDesc{DType::kInt32, {m.b + 1}};
        d["seq_lens"] = TensorDesc{DType::kInt32, {m.b}};
      }
      break;
    }
    case BenchOp::kMoeGateUp:
    case BenchOp::kMoeDown:
    case BenchOp::kMoeLayer: {
      KS_ASSIGN_OR_RETURN(MoeDims m, GetMoeDims(spec));
      d["topk_ids"] = TensorDesc{DType::kInt32, {m.t, m.k_top}};
      d["topk_weights"] = TensorDesc{DType::kFp32, {m.t, m.k_top}};
      if (op == BenchOp::kMoeDown) {
        d["x"] = TensorDesc{DType::kBf16, {m.t * m.k_top, m.inter}};
      } else {
        d["x"] = TensorDesc{DType::kBf16, {m.t, m.hidden}};
        d["w13"] = TensorDesc{DType::kFp4E2M1, {m.e, 2 * m.inter, m.hidden}};
        d["w13_scales"] = TensorDesc{DType::kE8M0, {m.e, 2 * m.inter, m.hidden / 32}};
      }
      if (op != BenchOp::kMoeGateUp) {
        d["w2"] = TensorDesc{DType::kFp4E2M1, {m.e, m.n, m.inter}};
        d["w2_scales"] = TensorDesc{DType::kE8M0, {m.e, m.n, m.inter / 32}};
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("spec.op: expected one of attention, fp8_attention, mla_decode, moe_gateup, "
                       "moe_down, moe_layer, got ",
                       spec.op()));
  }
  return d;
}

// Distinct experts per token, seeded.
HostTensor RandomTopkIds(int64_t t, int64_t k_top, int64_t e, uint64_t seed) {
  HostTensor ids(DType::kInt32, {t, k_top});
  numerics::SeededRng rng(seed);
  std::vector<int32_t> perm(static_cast<size_t>(e));
  for (int64_t j = 0; j < e; ++j) perm[j] = static_cast<int32_t>(j);
  std::vector<int64_t> picks(static_cast<size_t>(k_top));
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t r = 0; r < k_top; ++r) {  // partial Fisher-Yates
      const int64_t pick = std::min(r + static_cast<int64_t>(rng.Uniform() * static_cast<double>(e - r)), e - 1);
      std::swap(perm[r], perm[pick]);
      picks[r] = pick;
      ids.data<int32_t>()[i * k_top + r] = perm[r];
    }
    // Undo the swaps: perm is the identity again in O(top_k), not O(E) per token.
    for (int64_t r = k_top - 1; r >= 0; --r) std::swap(perm[r], perm[picks[r]]);
  }
  return ids;
}

HostTensor RandomTopkWeights(int64_t t, int64_t k_top, uint64_t seed) {
  HostTensor w(DType::kFp32, {t, k_top});
  numerics::SeededRng rng(seed);
  for (int64_t i = 0; i < t; ++i) {
    double sum = 0;
    std::vector<double> v(static_cast<size_t>(k_top));
    for (auto& x : v) sum += (x = 0.05 + rng.Uniform());
    for (int64_t r = 0; r < k_top; ++r) w.data<float>()[i * k_top + r] = static_cast<float>(v[r] / sum);
  }
  return w;
}

// Random E2M1 codes and E8M0 scales sized so that a dot product over `k`
// elements with N(0,1) activations is O(1).
void RandomMxfp4(const TensorDesc& wd, const TensorDesc& sd, int64_t k, uint64_t seed, HostTensor* w,
                 HostTensor* s) {
  *w = HostTensor(wd.dtype, wd.shape);
  *s = HostTensor(sd.dtype, sd.shape);
  numerics::SeededRng rng(seed);
  for (int64_t i = 0; i < w->num_bytes(); ++i) w->bytes()[i] = static_cast<uint8_t>(rng.NextBits());
  // E2M1 values have an RMS of about 3.
  const int base = 127 - static_cast<int>(std::lround(std::log2(3.0 * std::sqrt(static_cast<double>(k)))));
  for (int64_t i = 0; i < s->num_bytes(); ++i) {
    s->bytes()[i] = static_cast<uint8_t>(base - 1 + static_cast<int>(rng.NextBits() % 3));
  }
}

// Gaussian values quantized to FP8 codes with one per-tensor scale.
HostTensor GaussianFp8(const TensorDesc& d, uint64_t seed, float* scale) {
  HostTensor out(d.dtype, d.shape);
  numerics::SeededRng rng(seed);
  std::vector<float> x(static_cast<size_t>(d.num_elements()));
  for (auto& v : x) v = static_cast<float>(rng.Normal());
  *scale = numerics::QuantizeFp8(x.data(), static_cast<int64_t>(x.size()), d.dtype, out.bytes());
  return out;
}

int64_t CausalPairs(int64_t sq, int64_t skv) {
  int64_t pairs = 0;
  for (int64_t i = 0; i < sq; ++i) pairs += std::clamp<int64_t>(i + skv - sq + 1, 0, skv);
  return pairs;
}

// Wires the views of `job->host_call` to its tensors and validates the params.
absl::Status BuildCall(const pb::BenchJobSpec& spec, PreparedJob* job) {
  OpCall& c = job->host_call;
  c.op = static_cast<BenchOp>(spec.op());
  auto& t = job->tensors;
  auto view = [&t](const char* name) -> TensorView {
    auto it = t.find(name);
    return it == t.end() ? TensorView{} : it->second.view();
  };
  auto desc = [&t](const char* name) -> const TensorDesc* {
    auto it = t.find(name);
    return it == t.end() ? nullptr : &it->second.desc();
  };
  switch (c.op) {
    case BenchOp::kAttention: {
      const pb::AttentionShape& a = spec.attention();
      AttentionParams& p = c.attention;
      p.layout = ToLayout(a.layout());
      p.causal = a.causal();
      if (a.has_softmax_scale()) p.softmax_scale = a.softmax_scale();
      p.rounding = ToRounding(a.rounding());
      KS_RETURN_IF_ERROR(p.Validate(*desc("q"), *desc("k"), *desc("v")));
      c.q = view("q");
      c.k = view("k");
      c.v = view("v");
      const double pairs = static_cast<double>(p.causal ? CausalPairs(p.seq_q, p.seq_kv) : p.seq_q * p.seq_kv);
      job->flops = 4.0 * static_cast<double>(p.head_dim) * pairs * static_cast<double>(p.batch * p.heads_q);
      break;
    }
    case BenchOp::kFp8Attention: {
      const pb::AttentionShape& a = spec.attention();
      Fp8AttentionParams& p = c.fp8;
      p.layout = ToLayout(a.layout());
      p.causal = a.causal();
      if (a.has_softmax_scale()) p.softmax_scale = a.softmax_scale();
      p.format = ToFormat(a.format());
      p.p_mode = ToPMode(a.p_mode());
      p.hadamard = a.hadamard();
      p.descale_mode = a.descale_mode() == pb::PER_HEAD ? DescaleMode::kPerHead : DescaleMode::kPerTensor;
      p.rounding = ToRounding(a.rounding());
      KS_RETURN_IF_ERROR(p.Validate(*desc("q"), *desc("k"), *desc("v"), desc("q_descale"),
                                    desc("k_descale"), desc("v_descale")));
      c.fp8_in.q = view("q");
      c.fp8_in.k = view("k");
      c.fp8_in.v = view("v");
      c.fp8_in.q_descale = view("q_descale");
      c.fp8_in.k_descale = view("k_descale");
      c.fp8_in.v_descale = view("v_descale");
      const double pairs = static_cast<double>(p.causal ? CausalPairs(p.seq_q, p.seq_kv) : p.seq_q * p.seq_kv);
      job->flops = 2.0 * static_cast<double>(p.d_qk + p.d_v) * pairs * static_cast<double>(p.batch * p.heads_q);
      break;
    }
    case BenchOp::kMlaDecode: {
      const pb::MlaDecodeShape& m = spec.mla();
      MlaDecodeParams& p = c.mla;
      if (m.has_softmax_scale()) p.softmax_scale = m.softmax_scale();
      p.num_splits = m.num_splits();
      p.rounding = ToRounding(m.rounding());
      p.kv_scale = m.kv_scale() > 0 ? m.kv_scale() : job->host_call.mla.kv_scale;
      const bool paged = m.page_size() > 0;
      auto host = [&t](const char* name) -> const HostTensor* {
        auto it = t.find(name);
        return it == t.end() ? nullptr : &it->second;
      };
      KS_RETURN_IF_ERROR(p.Validate(*desc("q_lat"), *desc("q_pe"), *desc("kv"), paged,
                                    paged ? m.page_size() : 1, host("seq_lens"), host("kv_indices"),
                                    host("kv_indptr"), nullptr));
      c.mla_in.q_lat = view("q_lat");
      c.mla_in.q_pe = view("q_pe");
      c.mla_in.kv = view("kv");
      c.mla_in.seq_lens = view("seq_lens");
      c.mla_in.kv_indices = view("kv_indices");
      c.mla_in.kv_indptr = view("kv_indptr");
      double keys = 0;  // per (b, h): draft t sees S - q_len + t + 1 rows
      for (int64_t tt = 0; tt < p.q_len; ++tt) keys += static_cast<double>(p.max_seq - p.q_len + tt + 1);
      job->flops = 2.0 * static_cast<double>(kMlaRowDim + kMlaLatentDim) * keys *
                   static_cast<double>(p.batch * p.heads);
      break;
    }
    case BenchOp::kMoeGateUp:
    case BenchOp::kMoeDown:
    case BenchOp::kMoeLayer: {
      const pb::MoeShape& m = spec.moe();
      MoeParams& p = c.moe;
      p.stage = StageOf(c.op);
      p.swiglu = m.swiglu();
      p.weighted_sum = m.weighted_sum();
      p.rounding = ToRounding(m.rounding());
      const TensorDesc* weights = (p.stage == MoeStage::kGateUp ||
                                   (p.stage == MoeStage::kDown && !p.weighted_sum))
                                      ? nullptr
                                      : desc("topk_weights");
      KS_RETURN_IF_ERROR(p.Validate(*desc("x"), t.at("topk_ids"), weights, desc("w13"),
                                    desc("w13_scales"), desc("w2"), desc("w2_scales")));
      c.moe_in.x = view("x");
      c.moe_in.topk_ids = view("topk_ids");
      c.moe_in.topk_weights = weights ? view("topk_weights") : TensorView{};
      c.moe_in.w13 = view("w13");
      c.moe_in.w13_scales = view("w13_scales");
      c.moe_in.w2 = view("w2");
      c.moe_in.w2_scales = view("w2_scales");
      const double pairs = static_cast<double>(p.tokens * p.top_k);
      double flops = 0;
      if (p.stage != MoeStage::kDown) flops += 2.0 * pairs * 2.0 * p.inter * p.hidden;
      if (p.stage != MoeStage::kGateUp) flops += 2.0 * pairs * p.out_dim * p.inter;
      job->flops = flops;
      break;
    }
  }
  // Bytes: the inputs the op reads plus its output; MoE weights count only the
  // experts the routing touches.
  double bytes = static_cast<double>(c.OutputDesc().num_bytes());
  std::set<int32_t> experts;
  if (IsMoe(c.op)) {
    const HostTensor& ids = t.at("topk_ids");
    for (int64_t i = 0; i < ids.num_elements(); ++i) experts.insert(ids.data<int32_t>()[i]);
  }
  for (const auto& [name, tensor] : t) {
    if (name == "topk_weights" && c.moe_in.topk_weights.empty()) continue;
    double b = static_cast<double>(tensor.num_bytes());
    if (name == "w13" || name == "w13_scales" || name == "w2" || name == "w2_scales") {
      b *= static_cast<double>(experts.size()) / static_cast<double>(tensor.shape()[0]);
    }
    bytes += b;
  }
  job->bytes = bytes;
  job->shape_desc = ShapeDesc(spec);
  return absl::OkStatus();
}

}  // namespace

double DefaultTolerance(BenchOp op) {
  switch (op) {
    case BenchOp::kAttention:
    case BenchOp::kMlaDecode:
      return 0.01;
    case BenchOp::kFp8Attention:
      return 0.10;
    default:
      return 0.02;
  }
}

std::string ShapeDesc(const pb::BenchJobSpec& spec) {
  if (spec.has_attention()) {
    const pb::AttentionShape& a = spec.attention();
    std::string s = absl::StrCat("B=", a.batch(), " Hq=", a.heads_q(), " Hkv=",
                                 a.heads_kv() ? a.heads_kv() : a.heads_q(), " Sq=", a.seq_q(),
                                 " Skv=", a.seq_kv() ? a.seq_kv() : a.seq_q(), " D=", a.head_dim());
    if (a.head_dim_v() && a.head_dim_v() != a.head_dim()) absl::StrAppend(&s, "/", a.head_dim_v());
    absl::StrAppend(&s, a.causal() ? " causal" : " non-causal");
    if (spec.op() == pb::OP_FP8_ATTENTION) {
      absl::StrAppend(&s, " ", Fp8FormatName(ToFormat(a.format())));
      if (a.hadamard()) absl::StrAppend(&s, " hadamard");
    }
    return s;
  }
  if (spec.has_mla()) {
    const pb::MlaDecodeShape& m = spec.mla();
    std::string s = absl::StrCat("B=", m.batch(), " q_len=", m.q_len() ? m.q_len() : 1, " H=", m.heads(),
                                 " S=", m.seq_len());
    if (m.page_size() > 0) absl::StrAppend(&s, " paged page_size=", m.page_size());
    return s;
  }
  if (spec.has_moe()) {
    const pb::MoeShape& m = spec.moe();
    return absl::StrCat("T=", m.tokens(), " E=", m.experts(), " top", m.top_k(), " K=", m.hidden(),
                        " I=", m.inter(), " N=", m.out_dim() ? m.out_dim() : m.hidden());
  }
  return "";
}

absl::Status ValidateSpec(const pb::BenchJobSpec& spec, double* flops, double max_bytes) {
  KS_ASSIGN_OR_RETURN(auto descs, SpecDescs(spec));
  // Sizes in double: a hostile shape must neither overflow int64 nor be
  // allocated (std::bad_alloc would end the server).
  auto too_big = [&](double bytes, const char* what) -> absl::Status {
    if (max_bytes <= 0 || bytes <= max_bytes) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "spec: the job's %s take %.4g bytes; this server allows %.4g per job (--bench_max_job_mb)", what, bytes,
        max_bytes));
  };
  double in_bytes = 0;
  for (const auto& [name, d] : descs) {
    double n = 1;
    for (int64_t x : d.shape) n *= static_cast<double>(x);
    in_bytes += n * static_cast<double>(NumBytes(d.dtype, 1024)) / 1024.0;
  }
  KS_RETURN_IF_ERROR(too_big(in_bytes, "inputs"));
  if (spec.inputs().kind() == pb::INPUT_LONG_TAIL && spec.op() != pb::OP_ATTENTION &&
      spec.op() != pb::OP_FP8_ATTENTION) {
    return absl::InvalidArgumentError("spec.inputs.kind: long-tail inputs exist for attention ops only");
  }
  for (const auto& [name, id] : spec.inputs().buffers()) {
    if (!descs.count(name) && name != "q_descale" && name != "k_descale" && name != "v_descale") {
      std::vector<std::string> names;
      for (const auto& [n, d] : descs) names.push_back(n);
      return absl::InvalidArgumentError(absl::StrCat("spec.inputs.buffers: no input ", QuoteClientText(name), " for ",
                                                     BenchOpName(static_cast<BenchOp>(spec.op())),
                                                     "; inputs are ", absl::StrJoin(names, ", ")));
    }
  }
  // Validate the op on placeholder tensors: only the small index tensors are
  // materialised (MoE routing), the rest need just their descriptors, so give
  // the views no data.
  PreparedJob job;
  for (const auto& [name, d] : descs) {
    if (name == "topk_ids") {
      const MoeDims m = GetMoeDims(spec).value();
      job.tensors.emplace(name, RandomTopkIds(m.t, m.k_top, m.e, 1));
    } else if (name == "kv_indices") {
      HostTensor indices, indptr, seq_lens;
      PagedMlaLayout(GetMlaDims(spec).value(), std::nullopt, &indices, &indptr, &seq_lens);
      job.tensors.emplace("kv_indices", std::move(indices));
      job.tensors.emplace("kv_indptr", std::move(indptr));
      job.tensors.emplace("seq_lens", std::move(seq_lens));
    } else if (name == "kv_indptr" || name == "seq_lens") {
      continue;  // with kv_indices
    } else {
      job.tensors.emplace(name, HostTensor(d, {}));
    }
  }
  if (spec.op() == pb::OP_MLA_DECODE) job.host_call.mla.kv_scale = 1.0;
  KS_RETURN_IF_ERROR(BuildCall(spec, &job));
  {
    const TensorDesc out = job.host_call.OutputDesc();
    double n = 1;
    for (int64_t x : out.shape) n *= static_cast<double>(x);
    // The output on the device and the host, and the fp64 oracle reference (8 bytes per element).
    KS_RETURN_IF_ERROR(too_big(in_bytes + n * (2.0 * static_cast<double>(NumBytes(out.dtype, 1024)) / 1024.0 + 8.0),
                               "inputs, output and oracle reference"));
  }
  if (flops != nullptr) *flops = job.flops;
  return absl::OkStatus();
}

namespace {

// A buffer whose dtype is the generated input's must have its shape too.
absl::Status CheckBufferShape(const std::map<std::string, TensorDesc>& descs, const std::string& name,
                              const std::string& id, const TensorDesc& got) {
  auto it = descs.find(name);
  if (it == descs.end() || got.dtype != it->second.dtype || got.shape == it->second.shape) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("spec.inputs.buffers[\"", name, "\"]: buffer ", QuoteClientText(id),
                                                 " is ", got.DebugString(), " but the job's shape needs ",
                                                 it->second.DebugString()));
}

}  // namespace

absl::Status CheckSpecBuffers(const pb::BenchJobSpec& spec, const BufferDescriber& describe,
                              const std::string& tenant, const BufferContentCheck& check_contents) {
  if (spec.inputs().buffers().empty()) return absl::OkStatus();
  if (!describe) return absl::FailedPreconditionError("this server cannot read buffers for jobs");
  KS_ASSIGN_OR_RETURN(auto descs, SpecDescs(spec));
  const std::map<std::string, std::string> buffers(spec.inputs().buffers().begin(), spec.inputs().buffers().end());
  for (const auto& [name, id] : buffers) {
    absl::StatusOr<TensorDesc> d = describe(id, tenant);
    if (!d.ok()) {
      return absl::Status(d.status().code(),
                          absl::StrCat("spec.inputs.buffers[\"", name, "\"]: ", d.status().message()));
    }
    KS_RETURN_IF_ERROR(CheckBufferShape(descs, name, id, *d));
  }
  // The contents last: reading them is the costly part.
  if (check_contents) {
    for (const auto& [name, id] : buffers) {
      KS_RETURN_IF_ERROR(check_contents(id, tenant, absl::StrCat("spec.inputs.buffers[\"", name, "\"]")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PreparedJob>> PrepareJob(const pb::BenchJobSpec& spec,
                                                        const BufferReader& reader,
                                                        const std::string& tenant) {
  KS_RETURN_IF_ERROR(ValidateSpec(spec));
  KS_ASSIGN_OR_RETURN(auto descs, SpecDescs(spec));
  auto job = std::make_unique<PreparedJob>();
  const uint64_t seed = spec.inputs().seed() ? spec.inputs().seed() : 1;
  const BenchOp op = static_cast<BenchOp>(spec.op());
  auto& t = job->tensors;

  if (op == BenchOp::kAttention || op == BenchOp::kFp8Attention) {
    KS_ASSIGN_OR_RETURN(AttnDims a, GetAttnDims(spec));
    if (spec.inputs().kind() == pb::INPUT_LONG_TAIL) {
      numerics::LongTailOptions o;
      o.batch = a.b;
      o.heads_q = a.hq;
      o.heads_kv = a.hkv;
      o.seq_q = a.sq;
      o.seq_kv = a.skv;
      o.d_qk = a.dqk;
      o.d_v = a.dv;
      o.layout = ToLayout(spec.attention().layout());
      o.softmax_scale = spec.attention().has_softmax_scale() ? spec.attention().softmax_scale() : 0;
      o.seed = seed;
      numerics::AttentionTensors lt = numerics::LongTailAttention(o);
      t["q"] = std::move(lt.q);
      t["k"] = std::move(lt.k);
      t["v"] = std::move(lt.v);
    } else {
      t["q"] = numerics::GaussianBf16(descs["q"].shape, seed);
      t["k"] = numerics::GaussianBf16(descs["k"].shape, seed + 1);
      t["v"] = numerics::GaussianBf16(descs["v"].shape, seed + 2);
    }
  } else if (op == BenchOp::kMlaDecode) {
    t["q_lat"] = numerics::GaussianBf16(descs["q_lat"].shape, seed);
    t["q_pe"] = numerics::GaussianBf16(descs["q_pe"].shape, seed + 1);
    float scale = 1;
    t["kv"] = GaussianFp8(descs["kv"], seed + 2, &scale);
    job->host_call.mla.kv_scale = scale;
    if (descs.count("kv_indices")) {
      PagedMlaLayout(GetMlaDims(spec).value(), seed + 3, &t["kv_indices"], &t["kv_indptr"], &t["seq_lens"]);
    }
  } else {
    KS_ASSIGN_OR_RETURN(MoeDims m, GetMoeDims(spec));
    t["x"] = numerics::GaussianBf16(descs["x"].shape, seed);
    t["topk_ids"] = RandomTopkIds(m.t, m.k_top, m.e, seed + 1);
    t["topk_weights"] = RandomTopkWeights(m.t, m.k_top, seed + 2);
    if (descs.count("w13")) {
      RandomMxfp4(descs["w13"], descs["w13_scales"], m.hidden, seed + 3, &t["w13"], &t["w13_scales"]);
    }
    if (descs.count("w2")) {
      RandomMxfp4(descs["w2"], descs["w2_scales"], m.inter, seed + 4, &t["w2"], &t["w2_scales"]);
    }
  }

  // Uploaded buffers replace generated inputs; Validate checks that they fit.
  // Sorted by name so that errors are reproducible.
  const std::map<std::string, std::string> buffers(spec.inputs().buffers().begin(), spec.inputs().buffers().end());
  for (const auto& [name, id] : buffers) {
    if (!reader) return absl::FailedPreconditionError("this server cannot read buffers for jobs");
    absl::StatusOr<HostTensor> b = reader(id, tenant);
    if (!b.ok()) {
      return absl::Status(b.status().code(),
                          absl::StrCat("spec.inputs.buffers[\"", name, "\"]: ", b.status().message()));
    }
    KS_RETURN_IF_ERROR(CheckBufferShape(descs, name, id, b->desc()));
    t[name] = std::move(*b);
  }
  KS_RETURN_IF_ERROR(BuildCall(spec, job.get()));
  return job;
}

}  // namespace bench
}  // namespace kernelserve
