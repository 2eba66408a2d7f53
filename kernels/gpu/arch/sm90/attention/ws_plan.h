// The launch plan of the warp-specialized sm_90a forward (flash_fwd_ws_*):
// its tiles, the order of its work items, the dense-tail KV split
// (kernels/gpu/attention/dense_tail.h's cost model with this kernel's
// weights), the workspace of the split's partials and the merge's grid.
// Pure host code (no vendor header), tested on the CPU (ws_plan_test); the
// launcher (flash_fwd_ws_launch.h) runs what it says.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_WS_PLAN_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_WS_PLAN_H_

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/attention/dense_tail.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/tile_scheduler.h"
#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// The kernel's CTA tile: kBlockM query rows (two consumer warpgroups of 64)
// by kBlockN keys (flash_fwd_ws_kernel.h's WsTraits, which the launcher
// holds to these): 128 x 64 at d256; 128 x 176 at d128 without the causal
// mask, where a tile's fixed costs (the row maxima's shuffles, O's rescale,
// the turn barriers, the waits) are spread over 176 keys instead of 128 and
// S (88 registers) still fits beside O and P; 128 x 128 otherwise (a causal
// tile's diagonal and d64's).
constexpr int kWsBlockM = 128;
constexpr int WsBlockN(int head_dim, bool causal) {
  return head_dim == 256 ? 64 : head_dim == 128 && !causal ? 176 : 128;
}

// The model's weights for this kernel on H100 / H200, in tile-steps of one
// CTA over one K tile (d128 causal: 128 x 128 x 128, 8.4 MFLOP, about 1.8 us
// at 600 TFLOP/s over 132 SMs; d256's 64-key tile is the same FLOP, d64's
// half; d128's 176-key tile 11.5 MFLOP, about 2.5 us):
//   partial_tiles 1: a CTA's fp32 partials are 128 x d x 4 bytes (64 KiB at
//     d128), about as many bytes as the step's K and V tiles (64 KiB, 88 at
//     176 keys), written once (the bf16 epilogue it replaces writes half);
//   merge_launch_tiles 2: a second kernel on the stream, its launch and the
//     forward's drain before it, about 3 us;
//   max_splits 16: bounds the workspace (16 chunks of 64 KiB per item at
//     d128) and the merge's loop;
//   min_tiles_per_split 2: each chunk loads its Q tile and fills the K/V
//     ring before its first product, about a tile-step of prologue.
// Estimates, to be fitted against timings (bench/NOTES.md).
constexpr DenseTailWeights kWsDenseTailWeights{1, 2, 16, 2};

// What CTA c of the forward's grid runs (plan: full_items, splits): work
// item c whole below full_items; after them, chunk `split` of item
// full_items + (c - full_items) / splits, the chunks of an item side by side.
struct WsCta {
  int item;
  int split;
  bool chunk;
};
KS_HOST_DEVICE WsCta WsCtaAt(int c, int full_items, int splits) {
  if (c < full_items) return WsCta{c, 0, false};
  const int r = c - full_items;
  const int t = r / splits;
  return WsCta{full_items + t, r - t * splits, true};
}

// The first row of chunk `split` of tail item `item` in the partials
// (WsLaunchPlan's layout: kWsBlockM rows per chunk, the chunks of an item
// side by side).
KS_HOST_DEVICE int64_t WsPartialRow(int item, int split, int full_items, int splits) {
  return (static_cast<int64_t>(item - full_items) * splits + split) * kWsBlockM;
}

// How the launcher decides the split; the default is the cost model.
struct WsLaunchOptions {
  // < 0: the cost model decides; 0: never split; 1: split whenever the grid
  // has a last wave (ForceDenseTail with as many chunks as the idle SMs
  // allow); >= 2: exactly this many chunks per item of the last wave.
  int dense_tail = -1;
  // Causal grids in the order of one (head, batch) after another instead of
  // the L2 sections (tile_scheduler.h), for A/B timing.
  bool per_head_causal_order = false;
};

struct WsLaunchPlan {
  TileOrder order;
  DenseTailPlan tail;
  int slots = 0;          // CTAs the device runs at once
  int tail_kv_tiles = 0;  // K tiles of the longest item of the last wave
  // The workspace when the split is on (0 bytes otherwise), 256-byte aligned
  // pieces: part_o[((t * splits + s) * kWsBlockM + r) * head_dim + d] (the
  // unnormalized O of chunk s of tail item t, CTA row r), then
  // part_ml[((t * splits + s) * kWsBlockM + r) * 2 + {0, 1}] = (m, l).
  size_t part_o = 0, part_ml = 0, workspace_bytes = 0;
  // The merge: 256 threads, one per output column of 256 / head_dim rows;
  // grid (tail_items, kWsBlockM * head_dim / 256).
  unsigned merge_grid_x = 0, merge_grid_y = 0;
};

constexpr int kWsMergeThreads = 256;

// For params from MakeFlashFwdParams with HasWork and seq_kv >= 1, head_dim
// 64, 128 or 256; slots = SMs x CTAs per SM >= 1.
WsLaunchPlan PlanWsLaunch(const FlashFwdParams& p, int head_dim, bool causal, int slots, const WsLaunchOptions& opt);

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_WS_PLAN_H_
