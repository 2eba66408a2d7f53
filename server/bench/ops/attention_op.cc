// Benchmark jobs of bf16 attention (BenchOp::kAttention).
#include "common/status_macros.h"
#include "server/bench/op_registry.h"
#include "server/bench/ops/op_util.h"

namespace kernelserve {
namespace bench {
namespace ops {
namespace {

class AttentionOp : public AttentionOpBase {
 public:
  AttentionOp() : AttentionOpBase(BenchOp::kAttention, /*same_head_dims=*/true) {}

  absl::Status BuildCall(const pb::BenchJobSpec& spec, const HostTensors& t, OpCall* c) const override {
    const pb::AttentionShape& a = spec.attention();
    c->op = op();
    AttentionParams& p = c->attention;
    ReadAttentionFields(a, &p);
    KS_RETURN_IF_ERROR(p.Validate(*FindDesc(t, "q"), *FindDesc(t, "k"), *FindDesc(t, "v")));
    c->q = ViewOf(t, "q");
    c->k = ViewOf(t, "k");
    c->v = ViewOf(t, "v");
    return absl::OkStatus();
  }

  void ToSpec(const OpCall& c, pb::BenchJobSpec* spec) const override {
    const AttentionParams& p = c.attention;
    spec->set_op(pb::OP_ATTENTION);
    WriteAttentionFields(p, p.head_dim, spec->mutable_attention());
  }

  double Flops(const OpCall& c) const override {
    const AttentionParams& p = c.attention;
    const double pairs = static_cast<double>(p.causal ? CausalPairs(p.seq_q, p.seq_kv) : p.seq_q * p.seq_kv);
    return 4.0 * static_cast<double>(p.head_dim) * pairs * static_cast<double>(p.batch * p.heads_q);
  }

  double DefaultTolerance() const override { return 0.01; }

  std::string ShapeDesc(const pb::BenchJobSpec& spec) const override { return AttentionShapeDesc(spec.attention()); }
};

const OpRegistration<AttentionOp> kRegistration;

}  // namespace
}  // namespace ops
}  // namespace bench
}  // namespace kernelserve
