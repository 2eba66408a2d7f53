// Benchmark jobs of the MXFP4 MoE stages (BenchOp::kMoeGateUp, kMoeDown,
// kMoeLayer): one entry per stage, one implementation parameterized by it.
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/numerics/test_inputs.h"
#include "server/bench/op_registry.h"
#include "server/bench/ops/op_util.h"

namespace kernelserve {
namespace bench {
namespace ops {
namespace {

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
    return absl::InvalidArgumentError(absl::StrCat("spec.moe.top_k: expected <= experts (", d.e, "), got ", d.k_top));
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
void RandomMxfp4(const TensorDesc& wd, const TensorDesc& sd, int64_t k, uint64_t seed, HostTensor* w, HostTensor* s) {
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

bool IsWeight(const std::string& name) {
  return name == "w13" || name == "w13_scales" || name == "w2" || name == "w2_scales";
}

class MoeOp : public BenchOpEntry {
 public:
  MoeOp(BenchOp op, MoeStage stage) : BenchOpEntry(op), stage_(stage) {}

  absl::StatusOr<InputDescs> Inputs(const pb::BenchJobSpec& spec) const override {
    KS_ASSIGN_OR_RETURN(MoeDims m, GetMoeDims(spec));
    InputDescs d;
    d["topk_ids"] = TensorDesc{DType::kInt32, {m.t, m.k_top}};
    d["topk_weights"] = TensorDesc{DType::kFp32, {m.t, m.k_top}};
    if (stage_ == MoeStage::kDown) {
      d["x"] = TensorDesc{DType::kBf16, {m.t * m.k_top, m.inter}};
    } else {
      d["x"] = TensorDesc{DType::kBf16, {m.t, m.hidden}};
      d["w13"] = TensorDesc{DType::kFp4E2M1, {m.e, 2 * m.inter, m.hidden}};
      d["w13_scales"] = TensorDesc{DType::kE8M0, {m.e, 2 * m.inter, m.hidden / 32}};
    }
    if (stage_ != MoeStage::kGateUp) {
      d["w2"] = TensorDesc{DType::kFp4E2M1, {m.e, m.n, m.inter}};
      d["w2_scales"] = TensorDesc{DType::kE8M0, {m.e, m.n, m.inter / 32}};
    }
    return d;
  }

  absl::Status Generate(const pb::BenchJobSpec& spec, const InputDescs& descs, uint64_t seed, HostTensors* t,
                        OpCall* call) const override {
    (void)call;
    KS_ASSIGN_OR_RETURN(MoeDims m, GetMoeDims(spec));
    (*t)["x"] = numerics::GaussianBf16(descs.at("x").shape, seed);
    (*t)["topk_ids"] = RandomTopkIds(m.t, m.k_top, m.e, seed + 1);
    (*t)["topk_weights"] = RandomTopkWeights(m.t, m.k_top, seed + 2);
    if (descs.count("w13")) {
      RandomMxfp4(descs.at("w13"), descs.at("w13_scales"), m.hidden, seed + 3, &(*t)["w13"], &(*t)["w13_scales"]);
    }
    if (descs.count("w2")) {
      RandomMxfp4(descs.at("w2"), descs.at("w2_scales"), m.inter, seed + 4, &(*t)["w2"], &(*t)["w2_scales"]);
    }
    return absl::OkStatus();
  }

  // Validate checks the routing's expert ids, so they are real.
  absl::Status Placeholders(const pb::BenchJobSpec& spec, const InputDescs& descs, HostTensors* t,
                            OpCall* call) const override {
    KS_ASSIGN_OR_RETURN(MoeDims m, GetMoeDims(spec));
    for (const auto& [name, d] : descs) {
      t->emplace(name, name == "topk_ids" ? RandomTopkIds(m.t, m.k_top, m.e, 1) : HostTensor(d, {}));
    }
    (void)call;
    return absl::OkStatus();
  }

  absl::Status BuildCall(const pb::BenchJobSpec& spec, const HostTensors& t, OpCall* c) const override {
    const pb::MoeShape& m = spec.moe();
    c->op = op();
    MoeParams& p = c->moe;
    p.stage = stage_;
    p.swiglu = m.swiglu();
    p.weighted_sum = m.weighted_sum();
    p.rounding = ToRounding(m.rounding());
    const bool reads_weights = !(p.stage == MoeStage::kGateUp || (p.stage == MoeStage::kDown && !p.weighted_sum));
    const TensorDesc* weights = reads_weights ? FindDesc(t, "topk_weights") : nullptr;
    KS_RETURN_IF_ERROR(p.Validate(*FindDesc(t, "x"), t.at("topk_ids"), weights, FindDesc(t, "w13"),
                                  FindDesc(t, "w13_scales"), FindDesc(t, "w2"), FindDesc(t, "w2_scales")));
    c->moe_in.x = ViewOf(t, "x");
    c->moe_in.topk_ids = ViewOf(t, "topk_ids");
    c->moe_in.topk_weights = weights ? ViewOf(t, "topk_weights") : TensorView{};
    c->moe_in.w13 = ViewOf(t, "w13");
    c->moe_in.w13_scales = ViewOf(t, "w13_scales");
    c->moe_in.w2 = ViewOf(t, "w2");
    c->moe_in.w2_scales = ViewOf(t, "w2_scales");
    return absl::OkStatus();
  }

  void ToSpec(const OpCall& c, pb::BenchJobSpec* spec) const override {
    const MoeParams& p = c.moe;
    spec->set_op(static_cast<pb::BenchOp>(op()));
    pb::MoeShape* m = spec->mutable_moe();
    m->set_tokens(p.tokens);
    m->set_experts(p.experts);
    m->set_top_k(p.top_k);
    // A stage reads only its own dims: down has no K (hidden must still be
    // > 0, and it is what N defaults to), gate/up no N.
    m->set_hidden(stage_ == MoeStage::kDown ? p.out_dim : p.hidden);
    m->set_inter(p.inter);
    if (stage_ != MoeStage::kGateUp) m->set_out_dim(p.out_dim);
    m->set_swiglu(p.swiglu);
    m->set_weighted_sum(p.weighted_sum);
    m->set_rounding(FromRounding(p.rounding));
  }

  double Flops(const OpCall& c) const override {
    const MoeParams& p = c.moe;
    const double pairs = static_cast<double>(p.tokens * p.top_k);
    double flops = 0;
    if (p.stage != MoeStage::kDown) flops += 2.0 * pairs * 2.0 * p.inter * p.hidden;
    if (p.stage != MoeStage::kGateUp) flops += 2.0 * pairs * p.out_dim * p.inter;
    return flops;
  }

  // Weights count only for the experts the routing touches, and the routing
  // weights only where the stage reads them.
  double Bytes(const OpCall& c, const HostTensors& t) const override {
    std::set<int32_t> experts;
    const HostTensor& ids = t.at("topk_ids");
    for (int64_t i = 0; i < ids.num_elements(); ++i) experts.insert(ids.data<int32_t>()[i]);
    double bytes = static_cast<double>(c.OutputDesc().num_bytes());
    for (const auto& [name, tensor] : t) {
      if (name == "topk_weights" && c.moe_in.topk_weights.empty()) continue;
      double b = static_cast<double>(tensor.num_bytes());
      if (IsWeight(name)) b *= static_cast<double>(experts.size()) / static_cast<double>(tensor.shape()[0]);
      bytes += b;
    }
    return bytes;
  }

  double DefaultTolerance() const override { return 0.02; }

  std::string ShapeDesc(const pb::BenchJobSpec& spec) const override {
    const pb::MoeShape& m = spec.moe();
    return absl::StrCat("T=", m.tokens(), " E=", m.experts(), " top", m.top_k(), " K=", m.hidden(), " I=", m.inter(),
                        " N=", m.out_dim() ? m.out_dim() : m.hidden());
  }

 private:
  const MoeStage stage_;
};

const OpRegistration<MoeOp> kGateUp(BenchOp::kMoeGateUp, MoeStage::kGateUp);
const OpRegistration<MoeOp> kDown(BenchOp::kMoeDown, MoeStage::kDown);
const OpRegistration<MoeOp> kLayer(BenchOp::kMoeLayer, MoeStage::kLayer);

}  // namespace
}  // namespace ops
}  // namespace bench
}  // namespace kernelserve
