// What the op entries share: proto enum <-> kernels/api enum conversions,
// dimension checks, tensor lookups by input name, and the attention shape
// that attention and FP8 attention both read.
#ifndef KERNELSERVE_SERVER_BENCH_OPS_OP_UTIL_H_
#define KERNELSERVE_SERVER_BENCH_OPS_OP_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernelserve/v1/bench.pb.h"
#include "server/bench/op_registry.h"

namespace kernelserve {
namespace bench {
namespace ops {

// Unspecified proto values map to the kernels' defaults; Submit has already
// refused values outside the enums (CheckEnumFields).
Layout ToLayout(pb::Layout l);
pb::Layout FromLayout(Layout l);
Rounding ToRounding(pb::Rounding r);
pb::Rounding FromRounding(Rounding r);
Fp8Format ToFp8Format(pb::Fp8Format f);
pb::Fp8Format FromFp8Format(Fp8Format f);
PMode ToPMode(pb::PMode m);
pb::PMode FromPMode(PMode m);
DescaleMode ToDescaleMode(pb::DescaleMode m);
pb::DescaleMode FromDescaleMode(DescaleMode m);

// INVALID_ARGUMENT "<field>: expected > 0, got <v>" unless v > 0.
absl::Status Positive(const std::string& field, int64_t v);

// The input `name` of a job, or none.
const HostTensor* FindTensor(const HostTensors& t, const char* name);
const TensorDesc* FindDesc(const HostTensors& t, const char* name);
TensorView ViewOf(const HostTensors& t, const char* name);  // empty when absent

// ------------------------------------------------------------- attention

// The attention shape with its defaults applied (heads_kv, seq_kv, head_dim_v).
struct AttnDims {
  int64_t b, hq, hkv, sq, skv, dqk, dv;
};
// Requires spec.attention with positive dims; `same_head_dims` (bf16
// attention) refuses a head_dim_v other than head_dim.
absl::StatusOr<AttnDims> GetAttnDims(const pb::BenchJobSpec& spec, bool same_head_dims);
// What both attention entries do alike: read the attention shape and make
// q, k and v in bf16, in the spec's layout: Gaussian (seeds seed, seed + 1,
// seed + 2) or, with INPUT_LONG_TAIL, kernels/numerics/test_inputs.h
// LongTailAttention. `same_head_dims` (bf16 attention) refuses a head_dim_v
// other than head_dim.
class AttentionOpBase : public BenchOpEntry {
 public:
  AttentionOpBase(BenchOp op, bool same_head_dims) : BenchOpEntry(op), same_head_dims_(same_head_dims) {}
  absl::StatusOr<InputDescs> Inputs(const pb::BenchJobSpec& spec) const override;
  bool HasLongTailInputs() const override { return true; }
  absl::Status Generate(const pb::BenchJobSpec& spec, const InputDescs& descs, uint64_t seed, HostTensors* t,
                        OpCall* call) const override;

 private:
  const bool same_head_dims_;
};
// Query-key pairs a causal mask keeps, bottom-right aligned.
int64_t CausalPairs(int64_t sq, int64_t skv);
// "B=1 Hq=8 Hkv=8 Sq=512 Skv=512 D=128[/Dv] causal|non-causal".
std::string AttentionShapeDesc(const pb::AttentionShape& a);

// The fields AttentionParams and Fp8AttentionParams share, from the shape
// message (ReadAttentionFields) and back (WriteAttentionFields, after
// Validate filled the dims; `head_dim` is d_qk).
template <typename Params>
void ReadAttentionFields(const pb::AttentionShape& a, Params* p) {
  p->layout = ToLayout(a.layout());
  p->causal = a.causal();
  if (a.has_softmax_scale()) p->softmax_scale = a.softmax_scale();
  p->rounding = ToRounding(a.rounding());
}

template <typename Params>
void WriteAttentionFields(const Params& p, int64_t head_dim, pb::AttentionShape* a) {
  a->set_batch(p.batch);
  a->set_heads_q(p.heads_q);
  a->set_heads_kv(p.heads_kv);
  a->set_seq_q(p.seq_q);
  a->set_seq_kv(p.seq_kv);
  a->set_head_dim(head_dim);
  a->set_layout(FromLayout(p.layout));
  a->set_causal(p.causal);
  if (p.softmax_scale.has_value()) a->set_softmax_scale(*p.softmax_scale);
  a->set_rounding(FromRounding(p.rounding));
}

}  // namespace ops
}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_OPS_OP_UTIL_H_
