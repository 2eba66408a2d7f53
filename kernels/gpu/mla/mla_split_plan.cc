#include "kernels/gpu/mla/mla_split_plan.h"

#include <algorithm>

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
    // Time ~ waves x (tiles per CTA + a fixed start cost), plus a little for
    // the merge; the fewest splits win ties.
    const int64_t ctas_per_split = static_cast<int64_t>(batch) * ((q_len * heads + cta_rows - 1) / cta_rows);
    double best = 1e30;
    for (int64_t s = 1; s <= std::min<int64_t>(max_tiles, 1024); ++s) {
      const int64_t tiles = (max_tiles + s - 1) / s;
      const int64_t waves = (ctas_per_split * s + num_sms - 1) / num_sms;
      const double cost = static_cast<double>(waves) * (tiles + 2) + (s > 1 ? 1.0 : 0.0);
      if (cost < best - 1e-9) {
        best = cost;
        s_best = s;
      }
    }
  }
  const int64_t tiles_per = (max_tiles + s_best - 1) / s_best;
  plan.chunk = tiles_per * kTok;
  plan.splits = static_cast<int>((max_seq + plan.chunk - 1) / plan.chunk);
  return plan;
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
