// The launch plan of an MXFP4 MoE call: which GEMM kernel runs the gate/up
// projection, the rows of an expert tile, and the device workspace. Pure host
// functions of the validated params (no GPU): the variant table's predicates,
// the launcher and the CPU unit tests (moe_plan_test.cc) share this one copy.
#ifndef KERNELSERVE_KERNELS_GPU_MOE_MOE_PLAN_H_
#define KERNELSERVE_KERNELS_GPU_MOE_MOE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/api/ops.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {

struct MoePlan {
  // Every GEMM of the call runs on the weight-streaming decode kernel, over
  // expert tiles of kStreamRows rows (the fields below are then unused).
  bool stream = false;
  // Weight rows per CTA of the sm_90a wgmma kernel with the weights in
  // registers, 64 or 128; when set, every GEMM of the call runs on it (any
  // stage), over expert tiles of kRsRows rows. 0: off.
  int wgmma_rs = 0;
  // Rows of an expert tile of the sm_90a wgmma gate/up kernel: 128 (tiles of
  // 128 rows x 256 weight rows) or 192 (192 x 192); 0: gate/up runs on the
  // mma.sync kernel. Serves the gate/up projection alone.
  int wgmma_rows = 0;
  // Rows of an expert tile of the mma.sync kernel: 64 or 128, for every
  // mma.sync GEMM of the call. PlanMoe picks it by rows per expert; the
  // CUDA tests force each value on small shapes (the only other writer).
  int mma_rows = 64;

  // Rows of the routing's expert tiles: the tile of the kernel that reads them.
  int TileRows() const {
    return stream ? kStreamRows : wgmma_rs != 0 ? kRsRows : wgmma_rows != 0 ? wgmma_rows : mma_rows;
  }
  bool operator==(const MoePlan& o) const {
    return stream == o.stream && wgmma_rs == o.wgmma_rs && wgmma_rows == o.wgmma_rows && mma_rows == o.mma_rows;
  }
};

// Mean rows per expert over the experts the batch can touch (0 without
// pairs): what every backend's tile choice starts from.
double RowsPerExpert(const MoeParams& p);

// The dispatcher's plan for validated params. Rows per expert r = pairs /
// min(pairs, E) (the mean over the experts a batch can touch):
// - below 12 rows every GEMM streams the weights (decode: the bytes of the
//   touched experts bound it, the MMA work is a few rows per weight);
// - mma.sync row tile: 64 below 256 rows, else 128 (a larger tile
//   dequantizes each weight tile once for more rows; a smaller one fits
//   more CTAs on an SM when the experts hold few rows);
// - gate/up alone at r >= 72 runs on wgmma (below, mma.sync is faster), in
//   whichever tiling launches fewer CTAs (ties: 128 x 256): a CTA of either
//   tiling costs about the same, so the count decides.
// A layer stays on mma.sync: its down half reads the same routing tiles.
MoePlan PlanMoe(const MoeParams& p);

// Empty when `plan` serves `p` (validated) on this backend, else why not
// (the message of UNIMPLEMENTED).
std::string MoeUnsupported(const MoeParams& p, const MoePlan& plan);

// Byte offsets into one device allocation, each 256-byte aligned where it
// starts an array of its own; counts and cursor are adjacent (one memset).
struct MoeWorkspace {
  int64_t max_tiles = 0;  // expert tiles at most: ceil(pairs / rows) + min(pairs, E)
  size_t counts = 0, cursor = 0, tile_start = 0;  // int [E] each
  size_t tile_expert = 0, tile_rows = 0;         // int [max_tiles] each
  size_t num_tiles = 0;                          // int [1]
  size_t sorted = 0;                             // int [max_tiles * TileRows()]
  size_t h = 0;  // bf16 [pairs, I]: a layer's intermediate (0 bytes otherwise)
  size_t y = 0;  // fp32 [pairs, N]: the weighted sum's input (0 bytes otherwise)
  size_t bytes = 0;
};

MoeWorkspace MoeWorkspaceLayout(const MoeParams& p, const MoePlan& plan);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MOE_MOE_PLAN_H_
