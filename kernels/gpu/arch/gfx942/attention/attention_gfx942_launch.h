// The launch of the gfx942 bf16 MHA forward (attention_fwd_bf16_kernel.h and
// attention_aux_bf16_kernel.h, instantiated per head dim), as pure host
// functions tested on the CPU: the CTA shape and tiling each head dim's
// kernels are compiled for, the device parameters, the work order, the
// dense-tail KV split (its cost model and its plan), the workspace and the
// grids. The code objects are held to the same figures by
// attention_gfx942_hdim*_hip_test and attention_aux_gfx942_hdim*_hip_test.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_GFX942_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_GFX942_LAUNCH_H_

#include <cstdint>

#include "kernels/gpu/attention/dense_tail.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/tile_scheduler.h"
#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {

// The forward CTA: eight wave64s, each owning its own 16-row query tiles,
// K streamed through LDS in tiles of kTileTok keys (double-buffered).
constexpr int kWaves = 8;
constexpr int kThreads = kWaves * 64;
constexpr int kTileTok = 32;  // keys per K tile in LDS: two MFMA k-steps of P V
constexpr int kCuLdsBytes = 64 * 1024;    // gfx942's LDS per CU
constexpr int kLaneRegs = 512;            // VGPR + AGPR per lane of a SIMD (the unified file)

// The tiling of one head dim (one instantiation per file:
// attention_fwd_bf16_hdim{64,128,256}.hip). What the code objects are held to
// (attention_gfx942_hdim*_hip_test) is derived here and tested on the CPU
// (attention_gfx942_launch_test).
struct FwdShape {
  int head_dim;
  int q_tiles_per_wave;  // 16-row query tiles a wave owns
  int reg_q_tiles;       // of them, held in registers; the rest staged once in the wave's LDS slice
  int ctas_per_cu;       // the occupancy the kernel is compiled for (amdgpu_waves_per_eu)

  constexpr int wave_rows() const { return q_tiles_per_wave * 16; }
  constexpr int rows() const { return kWaves * wave_rows(); }  // query rows per CTA
  constexpr int row_bytes() const { return head_dim * 2 + 16; }  // a bf16 K or Q row in LDS, padded
  constexpr int k_tile_bytes() const { return kTileTok * row_bytes(); }
  constexpr int q_stage_bytes() const { return kWaves * (q_tiles_per_wave - reg_q_tiles) * 16 * row_bytes(); }
  constexpr int lds_bytes() const { return 2 * k_tile_bytes() + q_stage_bytes(); }
  // Waves per SIMD (four SIMDs per CU) and the registers each lane may use.
  constexpr int waves_per_simd() const { return kWaves / 4 * ctas_per_cu; }
  constexpr int max_regs() const { return kLaneRegs / waves_per_simd(); }
  constexpr int n_tiles() const { return head_dim / 16; }  // 16-column tiles of O (and k-steps of Q K^T)
};

// d64: the d128 CTA at half the width; its LDS (27648 bytes) and registers
// (<= 128) leave room for a second CTA per CU (four waves per SIMD).
// d128: the seed's CTA; 52224 bytes of LDS, one CTA per CU, <= 256 registers.
// d256: a row of K or Q is 528 bytes in LDS, so one staged 16-row Q tile per
// wave would need 67584 bytes on its own: both of a wave's Q tiles are held
// in registers, and a wave owns two tiles instead of three (O alone is 2 x 16
// x 4 = 128 fp32 per lane), so the CTA stays at eight waves, two per SIMD,
// <= 256 registers, and 33792 bytes of LDS (the two K tiles).
constexpr FwdShape kHdim64{64, 3, 2, 2};
constexpr FwdShape kHdim128{128, 3, 2, 1};
constexpr FwdShape kHdim256{256, 2, 2, 1};

// The shape of head dim d (64, 128 or 256; anything else is kHdim128, which
// Unsupported has declined already).
KS_HOST_DEVICE constexpr FwdShape ShapeOf(int head_dim) {
  return head_dim == 64 ? kHdim64 : head_dim == 256 ? kHdim256 : kHdim128;
}

// The auxiliary kernels (attention_aux_bf16_hdim*.hip): the V transpose and
// the dense-tail merge, 256 threads each.
constexpr int kAuxThreads = 256;
constexpr int kVtTok = 64;  // tokens per transpose block
KS_HOST_DEVICE constexpr int VtLdsBytes(const FwdShape& s) { return kVtTok * s.row_bytes(); }
// One merge thread per output column.
KS_HOST_DEVICE constexpr int MergeRowsPerBlock(const FwdShape& s) { return kAuxThreads / s.head_dim; }

// What every kernel of the op reads (one argument, by value).
struct Gfx942AttnParams {
  FlashFwdParams f;
  // V transposed: vt[((b * heads_kv + hk) * head_dim + d) * vt_len + j],
  // zeros for j >= seq_kv (so P V needs no bounds).
  uint16_t* vt = nullptr;
  // Dense-tail partials of tail item t, split s, CTA row r:
  // part_o[((t * splits + s) * rows + r) * head_dim + d] (unnormalized O),
  // part_ml[((t * splits + s) * rows + r) * 2 + {0, 1}] = (m, l), m in log2
  // units (-Inf when the chunk has no key for the row).
  float* part_o = nullptr;
  float* part_ml = nullptr;
  int64_t vt_head_stride = 0;  // head_dim * vt_len
  int vt_len = 0;              // seq_kv rounded up to kVtTok
  int q_blocks = 0;            // per (batch, head): ceil(seq_q / rows), rows = ShapeOf(head_dim).rows()
  int full_items = 0;          // work items run whole, CTA = item
  int tail_items = 0;          // work items split along KV
  int splits = 1;              // KV chunks per tail item
  int head_dim = 128;          // 64, 128 or 256: which instantiation runs (each has its own as a constant)
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

// The K tiles (of kTileTok keys) query block qb (of `rows` rows) visits.
KS_HOST_DEVICE int ItemKvTiles(const FlashFwdParams& f, int rows, int qb, bool causal) {
  return KvBlocks(f.seq_kv, qb * rows, rows, kTileTok, f.causal_offset, causal);
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

// The names of one head dim's kernels (hipModuleGetFunction).
struct HdimKernels {
  int head_dim;
  const char* fwd;
  const char* causal;
  const char* v_transpose;
  const char* merge;
};
constexpr HdimKernels kKernels[] = {
    {64, "KsAttentionFwdBf16Hdim64Gfx942", "KsAttentionFwdBf16CausalHdim64Gfx942", "KsAttentionVTransposeHdim64Gfx942",
     "KsAttentionMergeHdim64Gfx942"},
    {128, "KsAttentionFwdBf16Hdim128Gfx942", "KsAttentionFwdBf16CausalHdim128Gfx942",
     "KsAttentionVTransposeHdim128Gfx942", "KsAttentionMergeHdim128Gfx942"},
    {256, "KsAttentionFwdBf16Hdim256Gfx942", "KsAttentionFwdBf16CausalHdim256Gfx942",
     "KsAttentionVTransposeHdim256Gfx942", "KsAttentionMergeHdim256Gfx942"},
};
// kKernels' entry for head_dim (64, 128 or 256).
const HdimKernels& KernelsOf(int head_dim);

// The dense-tail KV split (kernels/gpu/attention/dense_tail.h, the cost
// model shared with the sm90 launcher). The forward runs ctas_per_cu CTAs
// per CU (its LDS and registers allow no more: one at d128 and d256, two at
// d64), so a grid of q_blocks work items runs in rounds of `slots` = CUs x
// ctas_per_cu; the model's tile-step is one CTA over one 32-key K tile.
// The weights are a model's, uncalibrated: no MI300X has run this code.
// A CTA's partials against one K tile are rows x head_dim fp32 against 32 x
// head_dim bf16 whatever the head dim (d128: 192 KiB against 8 KiB), so one
// weight serves every shape.
constexpr int kPartialTiles = 8;
constexpr int kMergeLaunchTiles = 2;  // one more launch on the stream
constexpr int kMaxSplits = 16;        // bounds the workspace and the merge's loop
constexpr int kMinTilesPerSplit = 4;  // a chunk shorter than this is mostly prologue and epilogue
constexpr DenseTailWeights kDenseTailWeights{kPartialTiles, kMergeLaunchTiles, kMaxSplits, kMinTilesPerSplit};

// q_blocks: work items of the grid; slots: the CTAs the device runs at once
// (CUs x ctas_per_cu, >= 1); tail_kv_tiles: K tiles of the longest item of
// the last partial round (under a causal mask the items of that round are
// the shortest, WorkItemAt). attention::PlanDenseTail with this chip's weights.
DenseTailPlan PlanDenseTail(int q_blocks, int slots, int tail_kv_tiles);

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
  FwdShape shape = kHdim128;
  const char* kernel = nullptr;       // the forward, causal or not
  const char* v_transpose = nullptr;  // of the head dim
  const char* merge = nullptr;
  Dims vt_grid;     // (vt_len / kVtTok, heads_kv, batch), kAuxThreads threads
  Dims fwd_grid;    // (tail.ctas), kThreads threads
  Dims merge_grid;  // (tail_items * rows / MergeRowsPerBlock), kAuxThreads; only when tail.on
};

// For params from MakeFlashFwdParams with HasWork, head_dim 64, 128 or 256
// (Unsupported empty); compute_units >= 1.
AttentionLaunch PlanAttention(const FlashFwdParams& f, int head_dim, bool causal, int compute_units);

// Points the launch's V^T and partials into `workspace` (workspace.bytes long).
void SetWorkspace(AttentionLaunch& launch, void* workspace);

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
#endif  // !__HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_GFX942_LAUNCH_H_
