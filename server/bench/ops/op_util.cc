#include "server/bench/ops/op_util.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace bench {
namespace ops {

Layout ToLayout(pb::Layout l) { return l == pb::BSHD ? Layout::kBshd : Layout::kBhsd; }
pb::Layout FromLayout(Layout l) { return l == Layout::kBshd ? pb::BSHD : pb::BHSD; }

Rounding ToRounding(pb::Rounding r) {
  if (r == pb::RTNA) return Rounding::kRtna;
  if (r == pb::RTZ) return Rounding::kRtz;
  return Rounding::kRtne;
}
pb::Rounding FromRounding(Rounding r) {
  if (r == Rounding::kRtna) return pb::RTNA;
  if (r == Rounding::kRtz) return pb::RTZ;
  return pb::RTNE;
}

Fp8Format ToFp8Format(pb::Fp8Format f) { return f == pb::E4M3FNUZ ? Fp8Format::kE4M3Fnuz : Fp8Format::kE4M3Fn; }
pb::Fp8Format FromFp8Format(Fp8Format f) { return f == Fp8Format::kE4M3Fnuz ? pb::E4M3FNUZ : pb::E4M3FN; }

PMode ToPMode(pb::PMode m) {
  if (m == pb::LEAN) return PMode::kLean;
  if (m == pb::NAIVE) return PMode::kNaive;
  return PMode::kExact;
}
pb::PMode FromPMode(PMode m) {
  if (m == PMode::kLean) return pb::LEAN;
  if (m == PMode::kNaive) return pb::NAIVE;
  return pb::EXACT;
}

DescaleMode ToDescaleMode(pb::DescaleMode m) {
  return m == pb::PER_HEAD ? DescaleMode::kPerHead : DescaleMode::kPerTensor;
}
pb::DescaleMode FromDescaleMode(DescaleMode m) { return m == DescaleMode::kPerHead ? pb::PER_HEAD : pb::PER_TENSOR; }

absl::Status Positive(const std::string& field, int64_t v) {
  if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(field, ": expected > 0, got ", v));
  return absl::OkStatus();
}

const HostTensor* FindTensor(const HostTensors& t, const char* name) {
  auto it = t.find(name);
  return it == t.end() ? nullptr : &it->second;
}

const TensorDesc* FindDesc(const HostTensors& t, const char* name) {
  const HostTensor* h = FindTensor(t, name);
  return h == nullptr ? nullptr : &h->desc();
}

TensorView ViewOf(const HostTensors& t, const char* name) {
  const HostTensor* h = FindTensor(t, name);
  return h == nullptr ? TensorView{} : h->view();
}

// ------------------------------------------------------------- attention

absl::StatusOr<AttnDims> GetAttnDims(const pb::BenchJobSpec& spec, bool same_head_dims) {
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
  if (same_head_dims && a.head_dim_v() != 0 && a.head_dim_v() != a.head_dim()) {
    return absl::InvalidArgumentError("spec.attention.head_dim_v: bf16 attention needs head_dim_v == head_dim");
  }
  return d;
}

namespace {

Shape AttnShape(Layout layout, int64_t b, int64_t h, int64_t s, int64_t d) {
  return layout == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

}  // namespace

absl::StatusOr<InputDescs> AttentionOpBase::Inputs(const pb::BenchJobSpec& spec) const {
  KS_ASSIGN_OR_RETURN(AttnDims a, GetAttnDims(spec, same_head_dims_));
  const Layout l = ToLayout(spec.attention().layout());
  return InputDescs{{"q", TensorDesc{DType::kBf16, AttnShape(l, a.b, a.hq, a.sq, a.dqk)}},
                    {"k", TensorDesc{DType::kBf16, AttnShape(l, a.b, a.hkv, a.skv, a.dqk)}},
                    {"v", TensorDesc{DType::kBf16, AttnShape(l, a.b, a.hkv, a.skv, a.dv)}}};
}

absl::Status AttentionOpBase::Generate(const pb::BenchJobSpec& spec, const InputDescs& descs, uint64_t seed,
                                       HostTensors* t, OpCall* call) const {
  (void)call;
  if (spec.inputs().kind() != pb::INPUT_LONG_TAIL) {
    (*t)["q"] = numerics::GaussianBf16(descs.at("q").shape, seed);
    (*t)["k"] = numerics::GaussianBf16(descs.at("k").shape, seed + 1);
    (*t)["v"] = numerics::GaussianBf16(descs.at("v").shape, seed + 2);
    return absl::OkStatus();
  }
  KS_ASSIGN_OR_RETURN(AttnDims a, GetAttnDims(spec, same_head_dims_));
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
  (*t)["q"] = std::move(lt.q);
  (*t)["k"] = std::move(lt.k);
  (*t)["v"] = std::move(lt.v);
  return absl::OkStatus();
}

int64_t CausalPairs(int64_t sq, int64_t skv) {
  int64_t pairs = 0;
  for (int64_t i = 0; i < sq; ++i) pairs += std::clamp<int64_t>(i + skv - sq + 1, 0, skv);
  return pairs;
}

std::string AttentionShapeDesc(const pb::AttentionShape& a) {
  std::string s = absl::StrCat("B=", a.batch(), " Hq=", a.heads_q(), " Hkv=", a.heads_kv() ? a.heads_kv() : a.heads_q(),
                               " Sq=", a.seq_q(), " Skv=", a.seq_kv() ? a.seq_kv() : a.seq_q(), " D=", a.head_dim());
  if (a.head_dim_v() && a.head_dim_v() != a.head_dim()) absl::StrAppend(&s, "/", a.head_dim_v());
  absl::StrAppend(&s, a.causal() ? " causal" : " non-causal");
  return s;
}

}  // namespace ops
}  // namespace bench
}  // namespace kernelserve
