#include "kernels/gpu/decode_attention/decode_split_plan.h"

#include <algorithm>

#include "kernels/gpu/common/split_cost.h"
#include "kernels/gpu/decode_attention/decode_attention_params.h"

namespace kernelserve {
namespace gpu {
namespace decode {

DecodeSplitPlan PlanDecodeSplits(int batch, int heads_kv, int rows, int head_dim, int64_t max_seq, int num_sms,
                                 int ctas_per_sm) {
  DecodeSplitPlan plan;
  // Two m-tiles share every K and V fragment; at head_dim 256 their fp32
  // accumulators would not fit the registers.
  plan.mt = (rows > 16 && head_dim <= 128) ? 2 : 1;
  plan.row_groups = (rows + 16 * plan.mt - 1) / (16 * plan.mt);
  const int64_t steps = (max_seq + kStepTokens - 1) / kStepTokens;
  const int64_t ctas_per_split = static_cast<int64_t>(batch) * heads_kv * plan.row_groups;
  const int64_t slots = static_cast<int64_t>(std::max(num_sms, 1)) * std::max(ctas_per_sm, 1);
  // The grid's y extent (heads_kv x splits) stays within 65535.
  const int64_t max_splits = std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, 65535 / std::max(heads_kv, 1)));
  const int64_t s_best = BestSplits(steps, max_splits, ctas_per_split, slots, /*start_cost=*/1);
  const int64_t per = (steps + s_best - 1) / s_best;
  plan.chunk = per * kStepTokens;
  plan.splits = static_cast<int>((max_seq + plan.chunk - 1) / plan.chunk);
  return plan;
}

}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve
