// Explicit instantiation: warp-specialized FP8 kernel, (d_qk, d_v) = (192, 128), causal.
#include "kernels/gpu/arch/sm90/fp8_attention/fp8_ws_launch.cuh"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

template cudaError_t LaunchFp8Ws<192, true, 2>(const Fp8KernelParams&, int, int, cudaStream_t);

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
