// The MoE routing kernels (moe_routing.h), written against the vendor layer
// alone: no inline PTX, no vendor library.
#include "kernels/gpu/moe/moe_routing.h"

#include <algorithm>
#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace moe {
namespace {

constexpr int kScanWarps = kScanThreads / kWarpSize;
static_assert(kScanThreads % kWarpSize == 0 && kScanWarps <= kWarpSize, "the warp totals fit one warp");

__global__ void MoeCountKernel(const int32_t* ids, int64_t pairs, int* counts) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    atomicAdd(&counts[ids[i]], 1);
  }
}

// Inclusive prefix sum over the lanes of a warp.
__device__ __forceinline__ int WarpInclusiveSum(int v, int lane) {
#pragma unroll
  for (int d = 1; d < kWarpSize; d *= 2) {
    const int u = ShflUp(v, d);
    if (lane >= d) v += u;
  }
  return v;
}

// Exclusive prefix sum over the block of kScanThreads threads (thread order),
// and the block's total.
__device__ __forceinline__ int BlockExclusiveSum(int v, int* total) {
  __shared__ int warp_sums[kScanWarps];
  __shared__ int block_total;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int incl = WarpInclusiveSum(v, lane);
  if (lane == kWarpSize - 1) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int s = lane < kScanWarps ? warp_sums[lane] : 0;
    const int si = WarpInclusiveSum(s, lane);
    if (lane < kScanWarps) warp_sums[lane] = si - s;  // the warps before it
    if (lane == kWarpSize - 1) block_total = si;
  }
  __syncthreads();
  *total = block_total;
  return warp_sums[warp] + incl - v;
}

// Over one block: the tiles of each expert's counts, their exclusive prefix
// (tile_start, and `starts` where not null), the expert and rows of each
// tile, and where `sorted` is not null -1 in the padding rows of each
// expert's last tile. Returns the tile count.
__device__ __forceinline__ int ScanIntoTiles(const int* counts, int experts, int bm, int* tile_start, int* starts,
                                             int* tile_expert, int* tile_rows, int* sorted) {
  int tiles[kScanItems];
  int sum = 0;
#pragma unroll
  for (int i = 0; i < kScanItems; ++i) {
    const int e = threadIdx.x * kScanItems + i;
    tiles[i] = e < experts ? (counts[e] + bm - 1) / bm : 0;
    sum += tiles[i];
  }
  int total;
  int start = BlockExclusiveSum(sum, &total);
#pragma unroll
  for (int i = 0; i < kScanItems; ++i) {
    const int e = threadIdx.x * kScanItems + i;
    if (e < experts) {
      tile_start[e] = start;
      if (starts != nullptr) starts[e] = start;
      for (int t = 0; t < tiles[i]; ++t) {
        tile_expert[start + t] = e;
        tile_rows[start + t] = min(bm, counts[e] - t * bm);
      }
      if (sorted != nullptr) {
        for (int r = counts[e]; r < tiles[i] * bm; ++r) sorted[start * bm + r] = -1;
      }
    }
    start += tiles[i];
  }
  return total;
}

// One block: the tiles of the global counts.
__global__ void __launch_bounds__(kScanThreads) MoeScanKernel(const int* counts, int experts, int bm,
                                                              int* tile_start, int* tile_expert,
                                                              int* tile_rows, int* num_tiles) {
  const int total = ScanIntoTiles(counts, experts, bm, tile_start, nullptr, tile_expert, tile_rows, nullptr);
  if (threadIdx.x == 0) *num_tiles = total;
}

__global__ void MoeScatterKernel(const int32_t* ids, int64_t pairs, const int* tile_start, int* cursor,
                                 int bm, int* sorted) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int e = ids[i];
    const int slot = atomicAdd(&cursor[e], 1);
    sorted[tile_start[e] * bm + slot] = static_cast<int>(i);
  }
}

// The whole routing in one block, for calls with at most kSmallPairs pairs
// (decode): counts and slots by shared-memory atomics, the tile scan, the
// scatter, and -1 in the padding rows of each expert's last tile, so no
// memset and no second launch (at decode the launches cost more than the work).
constexpr int kSmallPairItems = 8;
constexpr int64_t kSmallPairs = int64_t{kScanThreads} * kSmallPairItems;

__global__ void __launch_bounds__(kScanThreads) MoeRouteSmallKernel(const int32_t* ids, int pairs, int experts,
                                                                    int bm, int* tile_start, int* tile_expert,
                                                                    int* tile_rows, int* num_tiles, int* sorted) {
  __shared__ int counts[kMaxExperts];
  __shared__ int starts[kMaxExperts];
  for (int e = threadIdx.x; e < experts; e += kScanThreads) counts[e] = 0;
  __syncthreads();
  int slot[kSmallPairItems];
#pragma unroll
  for (int i = 0; i < kSmallPairItems; ++i) {
    const int pr = threadIdx.x + i * kScanThreads;
    slot[i] = pr < pairs ? atomicAdd(&counts[ids[pr]], 1) : 0;
  }
  __syncthreads();
  const int total = ScanIntoTiles(counts, experts, bm, tile_start, starts, tile_expert, tile_rows, sorted);
  if (threadIdx.x == 0) *num_tiles = total;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kSmallPairItems; ++i) {
    const int pr = threadIdx.x + i * kScanThreads;
    if (pr < pairs) sorted[starts[ids[pr]] * bm + slot[i]] = pr;
  }
}

}  // namespace

cudaError_t LaunchMoeRouting(const RoutingParams& p, cudaStream_t stream) {
  if (p.pairs <= kSmallPairs) {
    MoeRouteSmallKernel<<<1, kScanThreads, 0, stream>>>(p.topk_ids, static_cast<int>(p.pairs), p.experts,
                                                        p.tile_rows, p.tile_start, p.tile_expert, p.tile_row_count,
                                                        p.num_tiles, p.sorted);
    return cudaGetLastError();
  }
  cudaError_t r;
  if ((r = cudaMemsetAsync(p.counts, 0, 2 * static_cast<size_t>(p.experts) * 4, stream)) != cudaSuccess) return r;
  if ((r = cudaMemsetAsync(p.sorted, 0xFF, static_cast<size_t>(p.max_tiles) * p.tile_rows * 4, stream)) !=
      cudaSuccess) {
    return r;
  }
  const int blocks = static_cast<int>(std::min<int64_t>((p.pairs + 255) / 256, 1024));
  MoeCountKernel<<<blocks, 256, 0, stream>>>(p.topk_ids, p.pairs, p.counts);
  MoeScanKernel<<<1, kScanThreads, 0, stream>>>(p.counts, p.experts, p.tile_rows, p.tile_start, p.tile_expert,
                                                p.tile_row_count, p.num_tiles);
  MoeScatterKernel<<<blocks, 256, 0, stream>>>(p.topk_ids, p.pairs, p.tile_start, p.cursor, p.tile_rows,
                                               p.sorted);
  return cudaGetLastError();
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
