// The mma.sync MoE GEMM with 16-row expert tiles, bf16 per pair epilogue.
#include "kernels/gpu/arch/sm90/moe/mma_sync_gemm.cuh"

namespace kernelserve {
namespace gpu {
namespace moe {

template cudaError_t LaunchMmaSyncGemm<16, kEpiBf16>(const GemmParams&, int64_t, int64_t, cudaStream_t);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
