// The split-KV plan of MLA decode: how many KV chunks each (request, row
// group) is cut into. A pure function of the shape and the SM count, so a
// graph captured once replays the same plan, and testable without a GPU.
#ifndef KERNELSERVE_KERNELS_GPU_MLA_MLA_SPLIT_PLAN_H_
#define KERNELSERVE_KERNELS_GPU_MLA_MLA_SPLIT_PLAN_H_

#include <cstdint>

#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {

struct MlaSplitPlan {
  int row_groups = 0;  // ceil(q_len * H / 64)
  int splits = 0;      // KV chunks per (request, row group)
  int64_t chunk = 0;   // tokens per chunk, a multiple of 64
};

// For a validated call (MlaDecodeParams::Validate: max_seq >= 1, num_splits
// 0..1024) and num_sms >= 1. num_splits > 0 asks for at most that many
// splits (no more than one per 64-token tile of max_seq); 0 plans them from
// the shape and num_sms. Every split holds at least one token of the longest
// request: splits * chunk covers max_seq and (splits - 1) * chunk does not.
// `cta_rows` is the query rows of the kernel's CTA (its CTAs per split are
// batch x ceil(q_len * H / cta_rows)); row_groups stays in kRows, the
// partials' layout.
MlaSplitPlan PlanMlaSplits(int batch, int q_len, int heads, int64_t max_seq, int num_splits, int num_sms,
                           int cta_rows = kRows);

// The query rows per CTA of the RegA kernel for a call of q_len x heads rows
// per request: 16 when they all fit one 16-row CTA (q_len * H <= 16: the
// bytes-bound class, one fp8 byte feeds at most 16 rows, where a 64-row CTA
// would do four times the tensor, softmax and accumulator work of the real
// rows), 32 when they fit a 32-row CTA (16 < q_len * H <= 32, e.g. q_len 2
// x H 16), else 64.
int RegACtaRows(int64_t q_len, int64_t heads);

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MLA_MLA_SPLIT_PLAN_H_
