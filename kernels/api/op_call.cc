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

OpCall MakeOpCall(const Fp8AttentionParams& p, const Fp8AttentionInputs& in) {
  OpCall c;
  c.op = BenchOp::kFp8Attention;
  c.fp8 = p;
  c.fp8_in = in;
  return c;
}

OpCall MakeOpCall(const MlaDecodeParams& p, const MlaDecodeInputs& in) {
  OpCall c;
  c.op = BenchOp::kMlaDecode;
  c.mla = p;
  c.mla_in = in;
  return c;
}

OpCall MakeOpCall(const MoeParams& p, const MoeInputs& in) {
  OpCall c;
  c.op = p.stage == MoeStage::kGateUp ? BenchOp::kMoeGateUp
         : p.stage == MoeStage::kDown ? BenchOp::kMoeDown
                                      : BenchOp::kMoeLayer;
  c.moe = p;
  c.moe_in = in;
  return c;
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
