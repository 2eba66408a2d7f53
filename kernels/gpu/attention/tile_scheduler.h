// The tile scheduler of the bf16 MHA forward kernels: one CTA per (query
// tile, head, batch), the query tiles with the most work (the last rows under
// a causal mask) handed out first so that the short ones fill the tail of the
// grid; and the key tiles a query tile visits. Pure functions, the same on
// the host (launchers, CPU tests) and in every kernel.
#ifndef KERNELSERVE_KERNELS_GPU_ATTENTION_TILE_SCHEDULER_H_
#define KERNELSERVE_KERNELS_GPU_ATTENTION_TILE_SCHEDULER_H_

#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {
namespace attention {

struct WorkTile {
  int m_block;  // query rows [m_block * kBlockM, (m_block + 1) * kBlockM)
  int head;
  int batch;
};

// The grid: x over query tiles, y over heads, z over the batch.
struct TileGrid {
  int m_blocks, heads, batch;
};

KS_HOST_DEVICE TileGrid SingleTileGrid(int seq_q, int heads_q, int batch, int block_m) {
  return TileGrid{(seq_q + block_m - 1) / block_m, heads_q, batch};
}

// The tile of CTA (bx, by, bz) in a grid of m_blocks query tiles along x:
// CTA x = 0 takes the last query tile.
KS_HOST_DEVICE WorkTile SingleTileAt(unsigned bx, unsigned by, unsigned bz, unsigned m_blocks) {
  return WorkTile{static_cast<int>(m_blocks - 1 - bx), static_cast<int>(by), static_cast<int>(bz)};
}

// CUDA's device min is one instruction the optimizer keeps as written.
KS_HOST_DEVICE int Min(int a, int b) {
#if defined(__CUDA_ARCH__)
  return min(a, b);
#else
  return b < a ? b : a;
#endif
}

// Tiles of block_n keys that query rows [m0, m0 + block_m) visit: all of
// them, or under the causal mask (query i sees keys j <= i + causal_offset)
// those up to the last row's limit; 0 when no row sees a key.
KS_HOST_DEVICE int KvBlocks(int seq_kv, int m0, int block_m, int block_n, int causal_offset, bool causal) {
  int n_blocks = (seq_kv + block_n - 1) / block_n;
  if (causal) {
    const int last_key = Min(seq_kv - 1, m0 + block_m - 1 + causal_offset);
    n_blocks = last_key < 0 ? 0 : Min(n_blocks, last_key / block_n + 1);
  }
  return n_blocks;
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#if defined(__CUDACC__) || defined(__HIP__)
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// The functions above on a kernel's launch geometry.
template <int kBlockM>
struct SingleTileScheduler {
  static dim3 Grid(const FlashFwdParams& p) {
    const TileGrid g = SingleTileGrid(p.seq_q, p.heads_q, p.batch, kBlockM);
    return dim3(g.m_blocks, g.heads, g.batch);
  }
  __device__ static WorkTile Get() { return SingleTileAt(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x); }
};

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
#endif  // __CUDACC__ || __HIP__

#endif  // KERNELSERVE_KERNELS_GPU_ATTENTION_TILE_SCHEDULER_H_
