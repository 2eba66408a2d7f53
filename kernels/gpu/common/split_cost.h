// The split count of a split-KV decode kernel (MLA, decode attention): time ~
// waves x (steps per CTA + a fixed start cost), plus one for the merge when
// split; the fewest splits win ties. A pure host function both planners share.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_SPLIT_COST_H_
#define KERNELSERVE_KERNELS_GPU_COMMON_SPLIT_COST_H_

#include <algorithm>
#include <cstdint>

namespace kernelserve {
namespace gpu {

// `steps`: the longest request's key steps; `ctas_per_split`: CTAs of one
// split; `slots`: CTAs the device runs at once; splits 1..max_splits.
inline int64_t BestSplits(int64_t steps, int64_t max_splits, int64_t ctas_per_split, int64_t slots,
                          int64_t start_cost) {
  int64_t s_best = 1;
  double best = 1e30;
  for (int64_t s = 1; s <= std::min<int64_t>(steps, max_splits); ++s) {
    const int64_t per = (steps + s - 1) / s;
    const int64_t waves = (ctas_per_split * s + slots - 1) / slots;
    const double cost = static_cast<double>(waves) * (per + start_cost) + (s > 1 ? 1.0 : 0.0);
    if (cost < best - 1e-9) {
      best = cost;
      s_best = s;
    }
  }
  return s_best;
}

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_SPLIT_COST_H_
