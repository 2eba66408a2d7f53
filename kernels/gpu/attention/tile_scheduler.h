// Maps a thread block to its (query tile, head, batch). One block per tile;
// tiles with the most work (the last query rows under a causal mask) are
// handed out first so the short ones fill the tail of the grid.
#ifndef KERNELSERVE_KERNELS_CUDA_ATTENTION_TILE_SCHEDULER_H_
#define KERNELSERVE_KERNELS_CUDA_ATTENTION_TILE_SCHEDULER_H_

#include "kernels/gpu/attention/flash_params.h"

namespace kernelserve {
namespace gpu {

struct WorkTile {
  int m_block;
  int head;
  int batch;
};

template <int kBlockM>
struct SingleTileScheduler {
  static dim3 Grid(const FlashFwdParams& p) {
    return dim3((p.seq_q + kBlockM - 1) / kBlockM, p.heads_q, p.batch);
  }
  __device__ static WorkTile Get() {
    return WorkTile{static_cast<int>(gridDim.x - 1 - blockIdx.x), static_cast<int>(blockIdx.y),
                    static_cast<int>(blockIdx.z)};
  }
};

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_ATTENTION_TILE_SCHEDULER_H_
