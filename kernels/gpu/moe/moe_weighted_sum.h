// The weighted per-token sum of the MoE down projection: each token's top_k
// fp32 rows summed in routing order (no float atomics, so results are the
// same run to run) and rounded once to bf16. Portable device code:
// moe_weighted_sum.cu compiles with nvcc and with clang for gfx942.
#ifndef KERNELSERVE_KERNELS_GPU_MOE_MOE_WEIGHTED_SUM_H_
#define KERNELSERVE_KERNELS_GPU_MOE_MOE_WEIGHTED_SUM_H_

#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {

// p.n even.
cudaError_t LaunchMoeWeightedSum(const WeightedSumParams& p, cudaStream_t stream);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MOE_MOE_WEIGHTED_SUM_H_
