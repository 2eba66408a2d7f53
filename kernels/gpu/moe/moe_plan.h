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
  // Every GEMM of the call runs on the sm_90a wgmma kernel with the weights
  // in registers, over expert tiles of kRsRows rows (mma_rows unused).
  bool wgmma_rs = false;
  // wgmma_rs keeps a routing tile's B resident and walks rs_resident_cols
  // column tiles per CTA in its GEMMs with K <= kRsResidentMaxK; with B
  // streamed a CTA walks rs_stream_cols.
  bool rs_b_resident = false;
  int rs_resident_cols = kRsResidentCols;
  int rs_stream_cols = 1;
  // Rows of an expert tile of the mma.sync kernel: 64 on CUDA (the gfx942
  // backend's plan puts its own tile rows here).
  int mma_rows = 64;

  // Rows of the routing's expert tiles: the tile of the kernel that reads them.
  int TileRows() const { return stream ? kStreamRows : wgmma_rs ? kRsRows : mma_rows; }
  bool operator==(const MoePlan& o) const {
    return stream == o.stream && wgmma_rs == o.wgmma_rs && rs_b_resident == o.rs_b_resident &&
           rs_resident_cols == o.rs_resident_cols && rs_stream_cols == o.rs_stream_cols && mma_rows == o.mma_rows;
  }
};

// Mean rows per expert over the experts the batch can touch (0 without
// pairs): what every backend's tile choice starts from.
double RowsPerExpert(const MoeParams& p);

// The dispatcher's plan for validated params. Rows per expert r = pairs /
// min(pairs, E) (the mean over the experts a batch can touch); measured on
// the Kimi shard (bench/NOTES.md, session 36):
// - below 12 rows every GEMM streams the weights (decode: the bytes of the
//   touched experts bound it, the MMA work is a few rows per weight);
// - gate/up and the layer run on wgmma_rs from there (gate/up 1.2-1.3x the
//   mma.sync kernel at 18-55 rows, the layer 1.04-1.09x);
// - down runs on wgmma_rs from 64 rows (1.17x at 73 rows; mma.sync 64-row
//   tiles below: K = I is only 6 k-tiles, so a 192-row tile's fill costs
//   more than its MMAs save at 18-55 rows).
// wgmma_rs plans keep B resident (rs_b_resident) in the GEMMs whose K
// allows, walking kRsResidentCols column tiles per CTA; where B streams a
// CTA walks RsStreamCols.
MoePlan PlanMoe(const MoeParams& p);

// The column tiles a B-streamed wgmma_rs CTA walks: kRsStreamCols below
// kRsRows rows per expert, one from there (bf16 gate/up on the Kimi shard,
// H200: walking 2 was 2-6 % faster at 73 and 146 rows, 1.4 % slower at 292,
// where each walk's second pass over B comes from DRAM: +1.5 GB read per
// call).
int RsStreamCols(const MoeParams& p);

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
