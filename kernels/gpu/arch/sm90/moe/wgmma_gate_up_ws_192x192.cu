// The warp-specialized wgmma MoE gate/up GEMM with 192 x 192 tiles, both
// epilogues.
#include "kernels/gpu/arch/sm90/moe/wgmma_gate_up_ws.cuh"

namespace kernelserve {
namespace gpu {
namespace moe {

template cudaError_t LaunchWgmmaWsGateUp<192, kEpiSwiglu>(const GemmParams&, int64_t, cudaStream_t);
template cudaError_t LaunchWgmmaWsGateUp<192, kEpiBf16>(const GemmParams&, int64_t, cudaStream_t);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
