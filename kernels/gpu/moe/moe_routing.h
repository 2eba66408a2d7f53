// Routing of the MXFP4 MoE: the (token, expert) pairs of topk_ids aligned to
// per-expert tiles, the work list (tile scheduler) of every GEMM of the call.
// Portable device code: moe_routing.cu compiles with nvcc and with clang
// for gfx942.
#ifndef KERNELSERVE_KERNELS_GPU_MOE_MOE_ROUTING_H_
#define KERNELSERVE_KERNELS_GPU_MOE_MOE_ROUTING_H_

#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {

// A histogram of the pairs per expert, a block scan into tiles of
// p.tile_rows rows (tile_start, tile_expert, tile_row_count, num_tiles) and
// a scatter of the pair ids into those tiles, padding rows -1, on `stream`;
// up to 8192 pairs (decode) all of it in one single-block launch.
// The slot of a pair inside its expert's tiles depends on atomics; each
// output row is computed from its own A row and its expert's weights only,
// so results do not.
cudaError_t LaunchMoeRouting(const RoutingParams& p, cudaStream_t stream);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MOE_MOE_ROUTING_H_
