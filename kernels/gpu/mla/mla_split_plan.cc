#include "kernels/gpu/mla/mla_split_plan.h"

#include <algorithm>

#include "kernels/gpu/common/split_cost.h"
#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {

MlaSplitPlan PlanMlaSplits(int batch, int q_len, int heads, int64_t max_seq, int num_splits, int num_sms,
                           int cta_rows) {
  MlaSplitPlan plan;
  plan.row_groups = (q_len * heads + kRows - 1) / kRows;
  const int64_t max_tiles = (max_seq + kTok - 1) / kTok;
  int64_t s_best = 1;
  if (num_splits > 0) {
    s_best = std::min<int64_t>(num_splits, max_tiles);
  } else {
    const int64_t ctas_per_split = static_cast<int64_t>(batch) * ((q_len * heads + cta_rows - 1) / cta_rows);
    s_best = BestSplits(max_tiles, 1024, ctas_per_split, num_sms, /*start_cost=*/2);
  }
  const int64_t tiles_per = (max_tiles + s_best - 1) / s_best;
  plan.chunk = tiles_per * kTok;
  plan.splits = static_cast<int>((max_seq + plan.chunk - 1) / plan.chunk);
  return plan;
}

int RegACtaRows(int64_t q_len, int64_t heads) {
  const int64_t rows = q_len * heads;
  return rows <= 16 ? 16 : rows <= 32 ? 32 : kRows;
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
