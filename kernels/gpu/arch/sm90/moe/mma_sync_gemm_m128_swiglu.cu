// The mma.sync MoE GEMM with 128-row expert tiles, fused SwiGLU epilogue.
#include "kernels/gpu/arch/sm90/moe/mma_sync_gemm.cuh"

namespace kernelserve {
namespace gpu {
namespace moe {

template cudaError_t LaunchMmaSyncGemm<128, kEpiSwiglu>(const GemmParams&, int64_t, int64_t, cudaStream_t);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
