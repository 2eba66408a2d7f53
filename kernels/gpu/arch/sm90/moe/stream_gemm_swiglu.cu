// The weight-streaming MoE GEMM for decode, fused SwiGLU epilogue.
#include "kernels/gpu/arch/sm90/moe/stream_gemm.cuh"

namespace kernelserve {
namespace gpu {
namespace moe {

template cudaError_t LaunchStreamGemm<kEpiSwiglu>(const GemmParams&, int64_t, int, cudaStream_t);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
