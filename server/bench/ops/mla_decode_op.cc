// Benchmark jobs of MLA absorbed decode (BenchOp::kMlaDecode): KV contiguous
// or as a decode server's paged pool with a shuffled page table.
#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"
#include "server/bench/op_registry.h"
#include "server/bench/ops/op_util.h"

namespace kernelserve {
namespace bench {
namespace ops {
namespace {

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
    return absl::InvalidArgumentError(absl::StrCat("spec.mla.seq_len: expected >= q_len (", d.q_len, "), got ", d.s));
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
void PagedMlaLayout(const MlaDims& m, std::optional<uint64_t> seed, HostTensors* t) {
  const int64_t n = m.b * m.pages;
  HostTensor indices(DType::kInt32, {n});
  auto* idx = indices.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
  if (seed.has_value()) {
    numerics::SeededRng rng(*seed);
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = std::min<int64_t>(static_cast<int64_t>(rng.Uniform() * static_cast<double>(i + 1)), i);
      std::swap(idx[i], idx[j]);
    }
  }
  HostTensor indptr(DType::kInt32, {m.b + 1});
  for (int64_t b = 0; b <= m.b; ++b) indptr.data<int32_t>()[b] = static_cast<int32_t>(b * m.pages);
  HostTensor seq_lens(DType::kInt32, {m.b});
  for (int64_t b = 0; b < m.b; ++b) seq_lens.data<int32_t>()[b] = static_cast<int32_t>(m.s);
  (*t)["kv_indices"] = std::move(indices);
  (*t)["kv_indptr"] = std::move(indptr);
  (*t)["seq_lens"] = std::move(seq_lens);
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

class MlaDecodeOp : public BenchOpEntry {
 public:
  MlaDecodeOp() : BenchOpEntry(BenchOp::kMlaDecode) {}

  absl::StatusOr<InputDescs> Inputs(const pb::BenchJobSpec& spec) const override {
    KS_ASSIGN_OR_RETURN(MlaDims m, GetMlaDims(spec));
    InputDescs d;
    d["q_lat"] = TensorDesc{DType::kBf16, {m.b, m.q_len, m.h, kMlaLatentDim}};
    d["q_pe"] = TensorDesc{DType::kBf16, {m.b, m.q_len, m.h, kMlaRopeDim}};
    const DType kv = Fp8FormatDType(ToFp8Format(spec.mla().kv_format()));
    if (m.page == 0) {
      d["kv"] = TensorDesc{kv, {m.b, m.s, kMlaRowDim}};
    } else {
      d["kv"] = TensorDesc{kv, {m.b * m.pages * m.page, kMlaRowDim}};
      d["kv_indices"] = TensorDesc{DType::kInt32, {m.b * m.pages}};
      d["kv_indptr"] = TensorDesc{DType::kInt32, {m.b + 1}};
      d["seq_lens"] = TensorDesc{DType::kInt32, {m.b}};
    }
    return d;
  }

  absl::Status Generate(const pb::BenchJobSpec& spec, const InputDescs& descs, uint64_t seed, HostTensors* t,
                        OpCall* call) const override {
    (*t)["q_lat"] = numerics::GaussianBf16(descs.at("q_lat").shape, seed);
    (*t)["q_pe"] = numerics::GaussianBf16(descs.at("q_pe").shape, seed + 1);
    float scale = 1;
    (*t)["kv"] = GaussianFp8(descs.at("kv"), seed + 2, &scale);
    call->mla.kv_scale = scale;
    if (descs.count("kv_indices")) {
      KS_ASSIGN_OR_RETURN(MlaDims m, GetMlaDims(spec));
      PagedMlaLayout(m, seed + 3, t);
    }
    return absl::OkStatus();
  }

  absl::Status Placeholders(const pb::BenchJobSpec& spec, const InputDescs& descs, HostTensors* t,
                            OpCall* call) const override {
    for (const auto& [name, d] : descs) {
      if (name != "kv_indices" && name != "kv_indptr" && name != "seq_lens") t->emplace(name, HostTensor(d, {}));
    }
    if (descs.count("kv_indices")) {
      KS_ASSIGN_OR_RETURN(MlaDims m, GetMlaDims(spec));
      PagedMlaLayout(m, std::nullopt, t);
    }
    call->mla.kv_scale = 1.0;
    return absl::OkStatus();
  }

  absl::Status BuildCall(const pb::BenchJobSpec& spec, const HostTensors& t, OpCall* c) const override {
    const pb::MlaDecodeShape& m = spec.mla();
    c->op = op();
    MlaDecodeParams& p = c->mla;
    if (m.has_softmax_scale()) p.softmax_scale = m.softmax_scale();
    p.num_splits = m.num_splits();
    p.rounding = ToRounding(m.rounding());
    if (m.kv_scale() > 0) p.kv_scale = m.kv_scale();
    const bool paged = m.page_size() > 0;
    KS_RETURN_IF_ERROR(p.Validate(*FindDesc(t, "q_lat"), *FindDesc(t, "q_pe"), *FindDesc(t, "kv"), paged,
                                  paged ? m.page_size() : 1, FindTensor(t, "seq_lens"), FindTensor(t, "kv_indices"),
                                  FindTensor(t, "kv_indptr"), nullptr));
    c->mla_in.q_lat = ViewOf(t, "q_lat");
    c->mla_in.q_pe = ViewOf(t, "q_pe");
    c->mla_in.kv = ViewOf(t, "kv");
    c->mla_in.seq_lens = ViewOf(t, "seq_lens");
    c->mla_in.kv_indices = ViewOf(t, "kv_indices");
    c->mla_in.kv_indptr = ViewOf(t, "kv_indptr");
    return absl::OkStatus();
  }

  void ToSpec(const OpCall& c, pb::BenchJobSpec* spec) const override {
    const MlaDecodeParams& p = c.mla;
    spec->set_op(pb::OP_MLA_DECODE);
    pb::MlaDecodeShape* m = spec->mutable_mla();
    m->set_batch(p.batch);
    m->set_q_len(p.q_len);
    m->set_heads(p.heads);
    m->set_seq_len(p.max_seq);
    m->set_num_splits(p.num_splits);
    m->set_kv_scale(p.kv_scale);
    m->set_kv_format(p.kv_dtype == DType::kFp8E4M3Fnuz ? pb::E4M3FNUZ : pb::E4M3FN);
    if (p.softmax_scale.has_value()) m->set_softmax_scale(*p.softmax_scale);
    m->set_rounding(FromRounding(p.rounding));
    m->set_page_size(p.paged ? p.page_size : 0);
  }

  double Flops(const OpCall& c) const override {
    const MlaDecodeParams& p = c.mla;
    double keys = 0;  // per (b, h): draft t sees S - q_len + t + 1 rows
    for (int64_t tt = 0; tt < p.q_len; ++tt) keys += static_cast<double>(p.max_seq - p.q_len + tt + 1);
    return 2.0 * static_cast<double>(kMlaRowDim + kMlaLatentDim) * keys * static_cast<double>(p.batch * p.heads);
  }

  double DefaultTolerance() const override { return 0.01; }

  std::string ShapeDesc(const pb::BenchJobSpec& spec) const override {
    const pb::MlaDecodeShape& m = spec.mla();
    std::string s =
        absl::StrCat("B=", m.batch(), " q_len=", m.q_len() ? m.q_len() : 1, " H=", m.heads(), " S=", m.seq_len());
    if (m.page_size() > 0) absl::StrAppend(&s, " paged page_size=", m.page_size());
    return s;
  }
};

const OpRegistration<MlaDecodeOp> kRegistration;

}  // namespace
}  // namespace ops
}  // namespace bench
}  // namespace kernelserve
