// Explicit instantiation: FP8 mma.sync kernel, (d_qk, d_v) = (192, 128), causal.
#include "kernels/gpu/arch/sm90/fp8_attention/fp8_mma_sync_launch.cuh"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

template cudaError_t LaunchFp8MmaSync<192, true>(const Fp8KernelParams&, int, int, cudaStream_t);

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
