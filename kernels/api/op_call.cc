#include "kernels/api/op_call.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelserve {

std::string BenchOpName(BenchOp op) {
  switch (op) {
    case BenchOp::kAttention:
      return "attention";
    case BenchOp::kFp8Attention:
      return "fp8_attention";
    case BenchOp::kMlaDecode:
      return "mla_decode";
    case BenchOp::kMoeGateUp:
      return "moe_gateup";
    case BenchOp::kMoeDown:
      return "moe_down";
    case BenchOp::kMoeLayer:
      return "moe_layer";
  }
  return absl::StrCat("op", static_cast<int>(op));
}

absl::StatusOr<BenchOp> ParseBenchOp(absl::string_view name) {
  std::vector<std::string> names;
  for (BenchOp op : kAllBenchOps) {
    if (BenchOpName(op) == name) return op;
    names.push_back(BenchOpName(op));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown op \"", name, "\"; expected one of ", absl::StrJoin(names, ", ")));
}

OpCall MakeOpCall(const AttentionParams& p, const TensorView& q, const TensorView& k, const TensorView& v) {
  OpCall c;
  c.op = BenchOp::kAttention;
  c.attention = p;
  c.q = q;
  c.k = k;
  c.v = v;
  return c;
}

namespace {

// The ops whose inputs travel as one struct: the params and the inputs go to
// the call's member pair for that op, the others keep their defaults.
template <typename Params, typename Inputs>
OpCall MakeStructOpCall(BenchOp op, Params OpCall::*params_member, const Params& p,
                        Inputs OpCall::*inputs_member, const Inputs& in) {
  OpCall c;
  c.op = op;
  c.*params_member = p;
  c.*inputs_member = in;
  return c;
}

}  // namespace

OpCall MakeOpCall(const Fp8AttentionParams& p, const Fp8AttentionInputs& in) {
  return MakeStructOpCall(BenchOp::kFp8Attention, &OpCall::fp8, p, &OpCall::fp8_in, in);
}

OpCall MakeOpCall(const MlaDecodeParams& p, const MlaDecodeInputs& in) {
  return MakeStructOpCall(BenchOp::kMlaDecode, &OpCall::mla, p, &OpCall::mla_in, in);
}

OpCall MakeOpCall(const MoeParams& p, const MoeInputs& in) {
  const BenchOp op = p.stage == MoeStage::kGateUp ? BenchOp::kMoeGateUp
                     : p.stage == MoeStage::kDown ? BenchOp::kMoeDown
                                                  : BenchOp::kMoeLayer;
  return MakeStructOpCall(op, &OpCall::moe, p, &OpCall::moe_in, in);
}

TensorDesc OpCall::OutputDesc() const {
  switch (op) {
    case BenchOp::kAttention:
      return attention.OutputDesc();
    case BenchOp::kFp8Attention:
      return fp8.OutputDesc();
    case BenchOp::kMlaDecode:
      return mla.OutputDesc();
    case BenchOp::kMoeGateUp:
    case BenchOp::kMoeDown:
    case BenchOp::kMoeLayer:
      return moe.OutputDesc();
  }
  return TensorDesc{};
}

}  // namespace kernelserve
