// Device-side parameters of the MXFP4 MoE kernels: what the launcher
// (moe_launch.cc) hands to the routing, GEMM and weighted-sum kernels. Plain
// C++ (no CUDA, no absl): the host compiler, nvcc and clang for HIP all read it.
#ifndef KERNELSERVE_KERNELS_GPU_MOE_MOE_PARAMS_H_
#define KERNELSERVE_KERNELS_GPU_MOE_MOE_PARAMS_H_

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace moe {

// K of gate/up and I of down must be multiples of this: the mma.sync
// kernel's k-tile, and the K window of the four E8M0 scales the wgmma kernel
// loads per weight row.
constexpr int kKMultiple = 128;

// Rows of the expert tiles of the weight-streaming decode GEMM: two n8
// tiles of mma.sync.
constexpr int kStreamRows = 16;

// Rows of the expert tiles of the wgmma GEMM with the weights in registers
// (its N is a tile's rows rounded up to 32, at most 192).
constexpr int kRsRows = 192;
// wgmma_rs keeps a routing tile's whole activation tile (B) in shared memory
// and walks kRsResidentCols column tiles per CTA when K is at most this
// (down's K = I on TP-sharded models, e.g. the Kimi shard's 384).
constexpr int kRsResidentMaxK = 384;
constexpr int kRsResidentCols = 7;
// With B streamed (longer K: gate/up), a CTA walks this many column tiles
// below kRsRows rows per expert (PlanMoe), so that its start and its
// pipeline's fill are paid once per walk and the producer fills the next
// column tile while the consumers store the last.
constexpr int kRsStreamCols = 2;

// The routing scan runs in one block of kScanThreads threads, kScanItems
// experts each.
constexpr int kScanThreads = 1024;
constexpr int kScanItems = 4;
constexpr int kMaxExperts = kScanThreads * kScanItems;

// The GEMM epilogues: bf16 per pair, fused SwiGLU (bf16 silu(gate) * up),
// fp32 per pair (for the weighted per-token sum).
enum Epilogue { kEpiBf16 = 0, kEpiSwiglu = 1, kEpiF32 = 2 };

// Routing: the (token, expert) pairs of topk_ids grouped into per-expert
// tiles of tile_rows rows, the work list every GEMM of the call walks.
struct RoutingParams {
  const int32_t* topk_ids;  // [pairs]
  int64_t pairs;
  int experts;
  int tile_rows;
  int64_t max_tiles;  // capacity of tile_expert / tile_rows (MoeWorkspace)
  int* counts;        // [experts] pairs per expert; counts and cursor are adjacent
  int* cursor;        // [experts] the scatter's next free slot of each expert
  int* tile_start;    // [experts] the expert's first tile
  int* tile_expert;   // [max_tiles] the expert of each tile
  int* tile_row_count;  // [max_tiles] rows of each tile holding a pair
  int* num_tiles;     // [1]
  int* sorted;        // [max_tiles * tile_rows] pair ids by tile, -1 padding
};

// One grouped GEMM over the routing's tiles: out[pair] = A[pair / a_row_div]
// x W[expert]^T, W MXFP4 [E, nw, k] with E8M0 scales along k.
struct GemmParams {
  const uint16_t* a;  // bf16 [rows, K]
  int a_row_div;      // A row of pair p is p / a_row_div
  const uint8_t* w;   // [E, nw, K/2]
  const uint8_t* ws;  // [E, nw, K/32]
  int64_t nw, k;
  int inter;          // swiglu: up rows start at inter; output columns
  const int* sorted;  // [max_tiles * BM] pair ids, -1 padding
  const int* tile_expert;
  const int* tile_rows;  // valid rows of each tile
  const int* num_tiles;
  void* out;
  int64_t out_cols;
  int rounding;
  // wgmma_rs: the column tiles a CTA walks, with the routing tile's B
  // resident in shared memory (K <= kRsResidentMaxK) or streamed per k-tile.
  int cols_per_cta = 1;
  bool b_resident = false;
};

// out[t, n] = sum_r w[t, r] * y[t * top_k + r, n] over r in order, rounded once.
struct WeightedSumParams {
  const float* y;        // [tokens * top_k, n] fp32
  const float* weights;  // [tokens, top_k]
  int64_t tokens;
  int top_k;
  int64_t n;
  uint16_t* out;  // bf16 [tokens, n]
  int rounding;
};

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MOE_MOE_PARAMS_H_
