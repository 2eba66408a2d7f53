// The warp-specialized wgmma MoE gate/up GEMM with 128 x 256 tiles, both
// epilogues.
#include "kernels/gpu/arch/sm90/moe/wgmma_gate_up_ws.cuh"

namespace kernelserve {
namespace gpu {
namespace moe {

template cudaError_t LaunchWgmmaWsGateUp<128, kEpiSwiglu>(const GemmParams&, int64_t, cudaStream_t);
template cudaError_t LaunchWgmmaWsGateUp<128, kEpiBf16>(const GemmParams&, int64_t, cudaStream_t);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
