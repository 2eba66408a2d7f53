// The split-KV plan of decode attention: how many KV chunks each (request,
// KV head, row group) is cut into, and the row-group shape. A pure function of
// the shape and the SM count, so a graph captured once replays the same plan,
// and testable without a GPU.
#ifndef KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_SPLIT_PLAN_H_
#define KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_SPLIT_PLAN_H_

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace decode {

struct DecodeSplitPlan {
  int mt = 1;          // 16-row m-tiles per CTA: 2 when the rows fill them and D <= 128
  int row_groups = 0;  // ceil(q_len * group / (16 * mt))
  int splits = 0;      // KV chunks per (request, KV head, row group)
  int64_t chunk = 0;   // tokens per chunk, a multiple of kStepTokens
};

// For a validated call (max_seq >= 1) and num_sms >= 1, ctas_per_sm >= 1 (the
// kernel's occupancy). Every split holds at least one token of the longest
// request: splits * chunk covers max_seq and (splits - 1) * chunk does not.
// Time is modelled as waves x (64-token steps per CTA + a fixed start), plus
// one step for the merge when there is one; the fewest splits win ties.
DecodeSplitPlan PlanDecodeSplits(int batch, int heads_kv, int rows, int head_dim, int64_t max_seq, int num_sms,
                                 int ctas_per_sm);

}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_SPLIT_PLAN_H_
