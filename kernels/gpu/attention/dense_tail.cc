#include "kernels/gpu/attention/dense_tail.h"

#include <algorithm>
#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace attention {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

DenseTailPlan Unsplit(int items, int tail_kv_tiles) {
  DenseTailPlan d;
  d.full_items = items;
  d.ctas = items;
  d.cost_off = tail_kv_tiles;
  return d;
}

DenseTailPlan Split(DenseTailPlan d, int items, int tail, int splits) {
  d.on = true;
  d.full_items = items - tail;
  d.tail_items = tail;
  d.splits = splits;
  d.ctas = d.full_items + tail * splits;
  return d;
}

int64_t CostOn(int tail, int slots, int tail_kv_tiles, int splits, const DenseTailWeights& w) {
  return CeilDiv(tail_kv_tiles, splits) + w.partial_tiles + w.merge_launch_tiles +
         CeilDiv(static_cast<int64_t>(tail) * (splits + 1), slots) * w.partial_tiles;
}

}  // namespace

DenseTailPlan PlanDenseTail(int items, int slots, int tail_kv_tiles, const DenseTailWeights& w) {
  DenseTailPlan d = Unsplit(items, tail_kv_tiles);
  const int tail = items % slots;
  if (tail == 0 || tail_kv_tiles <= 0) return d;
  const int splits = std::min({slots / tail, tail_kv_tiles / w.min_tiles_per_split, w.max_splits});
  if (splits < 2) return d;
  d.cost_on = CostOn(tail, slots, tail_kv_tiles, splits, w);
  if (d.cost_on >= d.cost_off) return d;
  return Split(d, items, tail, splits);
}

DenseTailPlan ForceDenseTail(int items, int slots, int tail_kv_tiles, int splits, const DenseTailWeights& w) {
  DenseTailPlan d = Unsplit(items, tail_kv_tiles);
  int tail = items % slots;
  if (tail == 0) tail = std::min(items, slots);
  if (tail <= 0) return d;
  if (splits == 0) {
    splits = std::max(2, std::min({slots / tail, tail_kv_tiles, w.max_splits}));
    if (tail_kv_tiles < 2) return d;
  }
  d.cost_on = CostOn(tail, slots, tail_kv_tiles, splits, w);
  return Split(d, items, tail, splits);
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
