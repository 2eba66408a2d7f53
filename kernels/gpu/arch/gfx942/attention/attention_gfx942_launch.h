// The launch of the gfx942 bf16 MHA forward (attention_fwd_bf16.hip and
// attention_aux_bf16.hip), as pure host functions tested on the CPU: the CTA
// shape the kernels are compiled for, the device parameters, the work order,
// the dense-tail KV split (its cost model and its plan), the workspace and
// the grids. The code objects are held to the same figures by
// attention_gfx942_hip_test and attention_aux_gfx942_hip_test.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_GFX942_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_GFX942_LAUNCH_H_

#include <cstdint>

#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/tile_scheduler.h"
#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {

// The forward CTA: eight wave64s, each owning three 16-row query tiles.
constexpr int kWaves = 8;
constexpr int kThreads = kWaves * 64;
constexpr int kQTilesPerWave = 3;
constexpr int kWaveRows = kQTilesPerWave * 16;  // 48
constexpr int kRows = kWaves * kWaveRows;       // 384 query rows per CTA
constexpr int kTileTok = 32;                    // keys per K tile in LDS: two MFMA k-steps of P V
constexpr int kHeadDim = 128;
constexpr int kRowBytes = kHeadDim * 2 + 16;               // a bf16 K or Q row in LDS, padded: 272
constexpr int kKTileBytes = kTileTok * kRowBytes;          // 8704
constexpr int kQStageBytes = kWaves * 16 * kRowBytes;      // every wave's third Q tile: 34816
constexpr int kLdsBytes = 2 * kKTileBytes + kQStageBytes;  // K double-buffered + Q stage: 52224

// The auxiliary kernels (attention_aux_bf16.hip): the V transpose and the
// dense-tail merge, 256 threads each.
constexpr int kAuxThreads = 256;
constexpr int kVtTok = 64;                                // tokens per transpose block
constexpr int kVtLdsBytes = kVtTok * kRowBytes;           // 17408
constexpr int kMergeRowsPerBlock = kAuxThreads / kHeadDim;  // 2: one thread per output column

constexpr char kKernel[] = "KsAttentionFwdBf16Gfx942";
constexpr char kCausalKernel[] = "KsAttentionFwdBf16CausalGfx942";
constexpr char kVTransposeKernel[] = "KsAttentionVTransposeGfx942";
constexpr char kMergeKernel[] = "KsAttentionMergeGfx942";

// What every kernel of the op reads (one argument, by value).
struct Gfx942AttnParams {
  FlashFwdParams f;
  // V transposed: vt[((b * heads_kv + hk) * kHeadDim + d) * vt_len + j],
  // zeros for j >= seq_kv (so P V needs no bounds).
  uint16_t* vt = nullptr;
  // Dense-tail partials of tail item t, split s, CTA row r:
  // part_o[((t * splits + s) * kRows + r) * kHeadDim + d] (unnormalized O),
  // part_ml[((t * splits + s) * kRows + r) * 2 + {0, 1}] = (m, l), m in log2
  // units (-Inf when the chunk has no key for the row).
  float* part_o = nullptr;
  float* part_ml = nullptr;
  int64_t vt_head_stride = 0;  // kHeadDim * vt_len
  int vt_len = 0;              // seq_kv rounded up to kVtTok
  int q_blocks = 0;            // per (batch, head): ceil(seq_q / kRows)
  int full_items = 0;          // work items run whole, CTA = item
  int tail_items = 0;          // work items split along KV
  int splits = 1;              // KV chunks per tail item
  int reserved = 0;
};

// Work item u of q_blocks * heads_q * batch: query blocks in decreasing
// order, all heads and batches of a block together (they share K and V in
// L2 under GQA), so under a causal mask the longest items go first and the
// shortest make the last, partial round.
struct WorkItem {
  int qb, head, batch;
};
KS_HOST_DEVICE WorkItem WorkItemAt(int u, int q_blocks, int heads_q, int batch) {
  const int per_block = heads_q * batch;
  const int r = u % per_block;
  return WorkItem{q_blocks - 1 - u / per_block, r % heads_q, r / heads_q};
}

// The K tiles (of kTileTok keys) query block qb visits.
KS_HOST_DEVICE int ItemKvTiles(const FlashFwdParams& f, int qb, bool causal) {
  return KvBlocks(f.seq_kv, qb * kRows, kRows, kTileTok, f.causal_offset, causal);
}

// Tiles [begin, end) of chunk s of `splits` over n tiles: as even as integers
// allow, in order, possibly empty when n < splits.
KS_HOST_DEVICE int ChunkBegin(int n, int s, int splits) {
  return static_cast<int>(static_cast<int64_t>(n) * s / splits);
}

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#if !defined(__HIP_DEVICE_COMPILE__)
#include <cstddef>
#include <string>

#include "kernels/api/ops.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {

// Empty when the kernels serve validated `p`, else why not.
std::string Unsupported(const AttentionParams& p);

// The dense-tail KV split. The forward runs one eight-wave CTA per CU (its
// LDS and registers allow no second), so a grid of q_blocks work items runs
// in rounds of `cus`; when the last round is partial, its items are split
// along KV into `splits` chunks run by the idle CUs, the fp32 partials merged
// by KsAttentionMergeGfx942. The cost model counts tile-steps (one CTA over
// one K tile) on the critical path of the last round:
//   off: T, the K tiles of the longest item of the last round;
//   on:  ceil(T / splits) + kPartialTiles (writing a CTA's fp32 partials)
//        + the merge: kMergeLaunchTiles + ceil(tail * (splits + 1) / cus)
//        * kPartialTiles (every partial read once, the output written, the
//        work spread over every CU),
// and the split is on only when it is cheaper. The weights are a model's,
// uncalibrated: no MI300X has run this code.
constexpr int kPartialTiles = 8;      // a CTA's partials: 384 x 128 fp32 (192 KiB) against 8 KiB of K per tile
constexpr int kMergeLaunchTiles = 2;  // one more launch on the stream
constexpr int kMaxSplits = 16;        // bounds the workspace and the merge's loop
constexpr int kMinTilesPerSplit = 4;  // a chunk shorter than this is mostly prologue and epilogue

struct DenseTailPlan {
  bool on = false;
  int full_items = 0;  // items run whole (all of them when off)
  int tail_items = 0;  // items of the last partial round, split when on
  int splits = 1;
  int ctas = 0;        // CTAs of the forward launch: full_items + tail_items * splits
  int64_t cost_off = 0, cost_on = 0;  // the model's tile-steps (cost_on 0 when no split is possible)
};

// q_blocks: work items of the grid; cus: the device's CUs (>= 1);
// tail_kv_tiles: K tiles of the longest item of the last partial round
// (under a causal mask the items of that round are the shortest, WorkItemAt).
DenseTailPlan PlanDenseTail(int q_blocks, int cus, int tail_kv_tiles);

// Byte offsets in the launch's workspace (256-byte aligned pieces).
struct Workspace {
  size_t vt = 0, part_o = 0, part_ml = 0;
  size_t bytes = 0;
};

struct Dims {
  unsigned x = 1, y = 1, z = 1;
};

struct AttentionLaunch {
  Gfx942AttnParams params;  // workspace pointers null until SetWorkspace
  DenseTailPlan tail;
  Workspace workspace;
  const char* kernel = kKernel;
  Dims vt_grid;     // (vt_len / kVtTok, heads_kv, batch), kAuxThreads threads
  Dims fwd_grid;    // (tail.ctas), kThreads threads
  Dims merge_grid;  // (tail_items * kRows / kMergeRowsPerBlock), kAuxThreads; only when tail.on
};

// For params from MakeFlashFwdParams with HasWork; compute_units >= 1.
AttentionLaunch PlanAttention(const FlashFwdParams& f, bool causal, int compute_units);

// Points the launch's V^T and partials into `workspace` (workspace.bytes long).
void SetWorkspace(AttentionLaunch& launch, void* workspace);

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
#endif  // !__HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_GFX942_LAUNCH_H_
