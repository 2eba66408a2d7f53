// Benchmark jobs of FP8 attention (BenchOp::kFp8Attention, ZYFA numerics).
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/bench/op_registry.h"
#include "server/bench/ops/op_util.h"

namespace kernelserve {
namespace bench {
namespace ops {
namespace {

class Fp8AttentionOp : public AttentionOpBase {
 public:
  Fp8AttentionOp() : AttentionOpBase(BenchOp::kFp8Attention, /*same_head_dims=*/false) {}

  // Generated inputs are bf16 (the backend quantizes them); uploaded ones may
  // be FP8 codes, which come with their descales.
  std::vector<std::string> OptionalInputs() const override { return {"q_descale", "k_descale", "v_descale"}; }

  absl::Status BuildCall(const pb::BenchJobSpec& spec, const HostTensors& t, OpCall* c) const override {
    const pb::AttentionShape& a = spec.attention();
    c->op = op();
    Fp8AttentionParams& p = c->fp8;
    ReadAttentionFields(a, &p);
    p.format = ToFp8Format(a.format());
    p.p_mode = ToPMode(a.p_mode());
    p.hadamard = a.hadamard();
    p.descale_mode = ToDescaleMode(a.descale_mode());
    KS_RETURN_IF_ERROR(p.Validate(*FindDesc(t, "q"), *FindDesc(t, "k"), *FindDesc(t, "v"), FindDesc(t, "q_descale"),
                                  FindDesc(t, "k_descale"), FindDesc(t, "v_descale")));
    c->fp8_in.q = ViewOf(t, "q");
    c->fp8_in.k = ViewOf(t, "k");
    c->fp8_in.v = ViewOf(t, "v");
    c->fp8_in.q_descale = ViewOf(t, "q_descale");
    c->fp8_in.k_descale = ViewOf(t, "k_descale");
    c->fp8_in.v_descale = ViewOf(t, "v_descale");
    return absl::OkStatus();
  }

  void ToSpec(const OpCall& c, pb::BenchJobSpec* spec) const override {
    const Fp8AttentionParams& p = c.fp8;
    spec->set_op(pb::OP_FP8_ATTENTION);
    pb::AttentionShape* a = spec->mutable_attention();
    WriteAttentionFields(p, p.d_qk, a);
    a->set_head_dim_v(p.d_v);
    a->set_format(FromFp8Format(p.format));
    a->set_p_mode(FromPMode(p.p_mode));
    a->set_hadamard(p.hadamard);
    a->set_descale_mode(FromDescaleMode(p.descale_mode));
  }

  double Flops(const OpCall& c) const override {
    const Fp8AttentionParams& p = c.fp8;
    const double pairs = static_cast<double>(p.causal ? CausalPairs(p.seq_q, p.seq_kv) : p.seq_q * p.seq_kv);
    return 2.0 * static_cast<double>(p.d_qk + p.d_v) * pairs * static_cast<double>(p.batch * p.heads_q);
  }

  double DefaultTolerance() const override { return 0.10; }

  std::string ShapeDesc(const pb::BenchJobSpec& spec) const override {
    const pb::AttentionShape& a = spec.attention();
    std::string s = AttentionShapeDesc(a);
    absl::StrAppend(&s, " ", Fp8FormatName(ToFp8Format(a.format())));
    if (a.hadamard()) absl::StrAppend(&s, " hadamard");
    return s;
  }

  // Its matrix work runs on the FP8 units.
  bool ComparesWithFp8Gemm() const override { return true; }
};

const OpRegistration<Fp8AttentionOp> kRegistration;

}  // namespace
}  // namespace ops
}  // namespace bench
}  // namespace kernelserve
