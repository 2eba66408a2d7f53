// Launcher of the FP8 mma.sync kernel; each fp8_mma_sync_d*_*.cu instantiates
// it once.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_MMA_SYNC_LAUNCH_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_MMA_SYNC_LAUNCH_CUH_

#include "kernels/gpu/arch/sm90/fp8_attention/fp8_kernels.h"
#include "kernels/gpu/arch/sm90/fp8_attention/fp8_mma_sync_kernel.cuh"
#include "kernels/gpu/arch/sm90/fp8_attention/p_block.cuh"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace mma_sync {

// One CTA per 128 query rows of one (batch, head).
template <int DQK, bool kCausal, int kMode>
cudaError_t LaunchKernel(const KParams& p, int batch, cudaStream_t stream) {
  const auto kernel = Fp8AttnKernel<DQK, kCausal, kMode>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem<DQK>::kBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid((p.seq_q + kRows - 1) / kRows, p.heads_q, batch);
  kernel<<<grid, kThreads, Smem<DQK>::kBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mma_sync

template <int kDqk, bool kCausal>
cudaError_t LaunchFp8MmaSync(const Fp8KernelParams& p, int batch, int p_mode, cudaStream_t stream) {
  switch (p_mode) {
    case kLean:
      return mma_sync::LaunchKernel<kDqk, kCausal, kLean>(p, batch, stream);
    case kNaive:
      return mma_sync::LaunchKernel<kDqk, kCausal, kNaive>(p, batch, stream);
    default:
      return mma_sync::LaunchKernel<kDqk, kCausal, kExact>(p, batch, stream);
  }
}

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_MMA_SYNC_LAUNCH_CUH_
