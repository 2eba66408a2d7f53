// The dense-tail KV split of the bf16 MHA forward kernels, shared by every
// chip's launcher (kernels/gpu/arch/sm90/attention/flash_fwd_ws_launch.h,
// kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.cc): the cost
// model that decides it, the KV chunks of a split work item and the fp32
// merge of their partials. Pure functions, the same on the host (launchers,
// CPU tests) and in the kernels.
//
// A grid of `items` work items (query tiles of one head and batch) runs in
// waves of `slots` = SMs (CUs) x CTAs per SM. When the last wave is partial,
// its slots that would idle can take part of its work: each of its `tail`
// items is split along KV into `splits` chunks (contiguous ranges of its K
// tiles), each chunk a CTA writing its fp32 (m, l, O) partials to a
// workspace, and a merge combines the chunks of a row in chunk order
// (deterministic: the result does not depend on which CTA finished first).
#ifndef KERNELSERVE_KERNELS_GPU_ATTENTION_DENSE_TAIL_H_
#define KERNELSERVE_KERNELS_GPU_ATTENTION_DENSE_TAIL_H_

#include <cstdint>

#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// Tiles [begin, end) of chunk s of `splits` over n tiles: as even as integers
// allow, in order, possibly empty when n < splits.
KS_HOST_DEVICE int ChunkBegin(int n, int s, int splits) {
  return static_cast<int>(static_cast<int64_t>(n) * s / splits);
}

// Chunk s of one query row left (m_s, l_s) at ml[s * ml_stride + {0, 1}]
// (m_s its largest score in log2 units, -Inf when no score of the chunk
// counted for the row; l_s the sum of 2^(t - m_s) over its keys) and the
// unnormalized O_s = sum 2^(t - m_s) v at o[s * o_stride]. The row's output
// is sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s with M = max_s m_s,
// summed in chunk order (deterministic).
//
// A chunk with m_s = -Inf adds its l_s alone: 0 when it had no key for the
// row (its O_s is never read: a forward may leave 0 * NaN there from a masked
// key's value), NaN when every score it saw was NaN (a NaN query row: the
// forwards' max drops NaN, their sums keep it), so that NaN reaches the
// output as in the fp64 oracle. A row that saw no key at all is 0, the
// oracle's output for it.
KS_HOST_DEVICE float MergeChunks(int chunks, const float* ml, int64_t ml_stride, const float* o, int64_t o_stride) {
  float m_max = -__builtin_inff();
  for (int s = 0; s < chunks; ++s) {
    const float m = ml[s * ml_stride];
    m_max = m > m_max ? m : m_max;
  }
  float l = 0.f, acc = 0.f;
  for (int s = 0; s < chunks; ++s) {
    const float m = ml[s * ml_stride];
    if (m == -__builtin_inff()) {
      l += ml[s * ml_stride + 1];
      continue;
    }
    const float w = __builtin_exp2f(m - m_max);
    l += w * ml[s * ml_stride + 1];
    acc += w * o[s * o_stride];
  }
  return l == 0.f ? 0.f : acc / l;
}

// The cost model's weights, in tile-steps (one CTA over one K tile of its
// kernel), the chip's and kernel's own.
struct DenseTailWeights {
  int partial_tiles;        // a CTA writing its fp32 partials (and the merge reading one)
  int merge_launch_tiles;   // the merge's launch on the stream
  int max_splits;           // bounds the workspace and the merge's loop
  int min_tiles_per_split;  // a shorter chunk is mostly prologue and epilogue
};

struct DenseTailPlan {
  bool on = false;
  int full_items = 0;  // items run whole (all of them when off)
  int tail_items = 0;  // items of the last partial wave, split when on
  int splits = 1;
  int ctas = 0;                       // CTAs of the forward: full_items + tail_items * splits
  int64_t cost_off = 0, cost_on = 0;  // the model's tile-steps (cost_on 0 when no split is possible)
};

// The cost model, on the critical path of the last wave, in tile-steps:
//   off: T = tail_kv_tiles, the K tiles of the longest item of the last wave;
//   on:  ceil(T / splits) + partial_tiles (writing the partials)
//        + merge_launch_tiles + ceil(tail * (splits + 1) / slots) * partial_tiles
//        (the merge reads every partial once and writes the output, spread
//        over every slot);
// splits = min(slots / tail, T / min_tiles_per_split, max_splits). On only
// when splits >= 2 and cost_on < cost_off.
// items: work items of the grid; slots >= 1: the CTAs the device runs at
// once; tail_kv_tiles: K tiles of the longest item of the last partial wave.
DenseTailPlan PlanDenseTail(int items, int slots, int tail_kv_tiles, const DenseTailWeights& w);

// The split forced on (tests, A/B timing): the last partial wave's items, or
// the last full wave's when the grid fills its waves evenly, each in `splits`
// chunks (>= 2, chunks may be empty), whatever the model says. splits = 0:
// as many as the wave's idle slots allow, at least 2, at most
// min(tail_kv_tiles, w.max_splits) when that is >= 2. Off (the plan of an
// unsplit grid) only when the items have fewer than 2 K tiles and splits is 0.
DenseTailPlan ForceDenseTail(int items, int slots, int tail_kv_tiles, int splits, const DenseTailWeights& w);

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ATTENTION_DENSE_TAIL_H_
