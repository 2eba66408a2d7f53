// The launch of the gfx942 MLA decode kernels (the window CTA,
// mla_decode_a16w8.hip; the position CTA, mla_decode_a16w8_pos.hip), as pure
// host functions tested on the CPU: the CTA shapes the kernels are compiled
// for, the choice between them and the split plan, both fixed from the shape
// and the CU count before anything is queued (so a launch never reads a
// device value on the host), the grids, and the merge of the split partials
// (kernels/gpu/mla/mla_merge.cu, built for gfx942 too). The code objects are
// held to the same figures by the code-object tests of mla/BUILD.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MLA_MLA_GFX942_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MLA_MLA_GFX942_LAUNCH_H_

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace gfx942 {

constexpr int kThreads = 512;         // eight wave64s per CTA, both CTA shapes
constexpr int kRowBytes = kD + 16;    // an fp8 KV row in LDS, padded
constexpr int kMergeThreads = 128;    // MlaMergeKernel's block

// The window CTA (the seed's q_len 4..8 kernel): 64 query rows (a draft
// window of positions at H = 16), 16-token tiles double-buffered in LDS,
// every wave computing.
constexpr int kTileTok = 16;                         // KV tokens per LDS tile
constexpr int kLdsBytes = 2 * kTileTok * kRowBytes;  // double-buffered: 18944

// The position CTA (the seed's one-position kernel): 16 query rows (one
// draft position at H = 16), 64-token tiles, four consumer waves (16 tokens
// of each tile each) and four producer waves (the next tile in registers).
constexpr int kPosRows = 16;
constexpr int kPosTileTok = kTok;                               // 64
constexpr int kPosConsumers = 4;                                // waves 0..3; 4..7 produce
constexpr int kPosTileBytes = kPosTileTok * kRowBytes;          // 37888: one tile
constexpr int kPosStatsBytes = kPosConsumers * kPosRows * 2 * 4;  // the consumers' m and l per row
constexpr int kPosQRowBytes = kD * 2 + 16;                      // a bf16 query row, padded
constexpr int kPosQBytes = kPosRows * kPosQRowBytes;            // 18688: the CTA's Q
constexpr int kPosLdsBytes = kPosTileBytes + kPosStatsBytes + kPosQBytes;  // 57088

// The kernels' names in the code objects (C names, or the mangled name's
// identifier for the portable merge).
constexpr char kDecodeKernel[] = "KsMlaDecodeA16w8Gfx942";        // the window CTA
constexpr char kDecodePosKernel[] = "KsMlaDecodeA16w8PosGfx942";  // the position CTA
constexpr char kMergeKernel[] = "MlaMergeKernel";

}  // namespace gfx942
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#if !defined(__HIP_DEVICE_COMPILE__)
#include "kernels/api/ops.h"
#include "kernels/gpu/mla/mla_split_plan.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace gfx942 {

struct Dims {
  unsigned x = 1, y = 1, z = 1;
};

// Which CTA a call runs on. The window CTA reads each KV tile once for 64
// rows (a q_len 4..8 draft window at H = 16) and is the seed's choice there;
// the position CTA reads it once per 16 rows (one position) with every
// consumer wave on distinct tokens. ChooseCta picks, as the seed does by op:
// - q_len < 4: the position CTA (the window CTA is the seed's q_len 4..8
//   kernel; below 4 its 64 rows are partly empty at H = 16);
// - q_len 4..8: the window CTA while batch x row groups (its CTAs per split)
//   is at most half the CUs, the seed's cap (B x groups <= 152 on 304 CUs),
//   else the position CTA.
// A pure function of the shape and the CU count: fixed at plan time, so a
// captured graph replays the same kernel.
enum class Cta { kWindow, kPosition };
Cta ChooseCta(int batch, int q_len, int heads, int compute_units);

struct DecodeLaunch {
  Cta cta = Cta::kWindow;
  const char* kernel = kDecodeKernel;
  MlaSplitPlan plan;
  KParams params;          // workspace pointers null until SetWorkspace
  Dims grid;               // (splits, the CTA's row groups: 64 or 16 rows, batch)
  Dims merge_grid;         // (rows, batch); used only when `merge`
  bool merge = false;      // more than one split
  size_t workspace_bytes = 0;
};

// For a call that passed MlaDecodeParams::Validate; views and `out` are
// device memory; `compute_units` >= 1 (the device's CU count).
DecodeLaunch PlanDecode(const MlaDecodeParams& p, const MlaDecodeInputs& in, void* out, int compute_units);

// Points the partials of `launch` into `workspace` (workspace_bytes long).
void SetWorkspace(DecodeLaunch& launch, void* workspace);

}  // namespace gfx942
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
#endif  // !__HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MLA_MLA_GFX942_LAUNCH_H_
