// One validated call of any op, as benchmark jobs, kernel variant tables and
// the oracle pass it around: which op, its params and its input views.
#ifndef KERNELSERVE_KERNELS_API_OP_CALL_H_
#define KERNELSERVE_KERNELS_API_OP_CALL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {

// Values match proto kernelserve.v1.BenchOp.
enum class BenchOp : int {
  kAttention = 1,
  kFp8Attention = 2,
  kMlaDecode = 3,
  kMoeGateUp = 4,
  kMoeDown = 5,
  kMoeLayer = 6,
};
constexpr BenchOp kAllBenchOps[] = {BenchOp::kAttention, BenchOp::kFp8Attention,
                                    BenchOp::kMlaDecode, BenchOp::kMoeGateUp,
                                    BenchOp::kMoeDown,   BenchOp::kMoeLayer};

// "attention", "fp8_attention", "mla_decode", "moe_gateup", "moe_down", "moe_layer".
std::string BenchOpName(BenchOp op);
absl::StatusOr<BenchOp> ParseBenchOp(absl::string_view name);
inline bool IsMoeOp(BenchOp op) {
  return op == BenchOp::kMoeGateUp || op == BenchOp::kMoeDown || op == BenchOp::kMoeLayer;
}

// The views point into the memory the call runs on: device memory for
// device variants, host memory for host variants.
struct OpCall {
  BenchOp op = BenchOp::kAttention;
  AttentionParams attention;
  Fp8AttentionParams fp8;
  MlaDecodeParams mla;
  MoeParams moe;  // stage matches op for the MoE ops
  TensorView q, k, v;  // attention
  Fp8AttentionInputs fp8_in;
  MlaDecodeInputs mla_in;
  MoeInputs moe_in;

  TensorDesc OutputDesc() const;
};

// The call each op method of Backend stands for, for a backend that sends
// every op through one dispatch (the MoE op follows p.stage).
OpCall MakeOpCall(const AttentionParams& p, const TensorView& q, const TensorView& k, const TensorView& v);
OpCall MakeOpCall(const Fp8AttentionParams& p, const Fp8AttentionInputs& in);
OpCall MakeOpCall(const MlaDecodeParams& p, const MlaDecodeInputs& in);
OpCall MakeOpCall(const MoeParams& p, const MoeInputs& in);

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_API_OP_CALL_H_
