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
