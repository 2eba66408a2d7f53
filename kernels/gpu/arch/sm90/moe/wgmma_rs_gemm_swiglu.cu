// The wgmma MoE GEMM with the weights in registers, swiglu epilogue.
#include "kernels/gpu/arch/sm90/moe/wgmma_rs_gemm.cuh"

namespace kernelserve {
namespace gpu {
namespace moe {

template cudaError_t LaunchWgmmaRsGemm<kEpiSwiglu>(const GemmParams&, int64_t, cudaStream_t);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
