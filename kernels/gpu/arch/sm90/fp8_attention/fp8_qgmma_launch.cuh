// Launcher of the FP8 QGMMA kernel; each fp8_qgmma_d128_*.cu instantiates it
// once.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_QGMMA_LAUNCH_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_QGMMA_LAUNCH_CUH_

#include "kernels/gpu/arch/sm90/fp8_attention/fp8_kernels.h"
#include "kernels/gpu/arch/sm90/fp8_attention/fp8_qgmma_kernel.cuh"
#include "kernels/gpu/arch/sm90/fp8_attention/p_block.cuh"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace qgmma {

// One CTA per 128 query rows of one (batch, head).
template <bool kCausal, int kMode>
cudaError_t LaunchKernel(const Fp8KernelParams& p, int batch, cudaStream_t stream) {
  const auto kernel = Fp8AttnQgmmaKernel<kCausal, kMode>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid((p.seq_q + kRows - 1) / kRows, p.heads_q, batch);
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace qgmma

template <bool kCausal>
cudaError_t LaunchFp8QgmmaD128(const Fp8KernelParams& p, int batch, int p_mode, cudaStream_t stream) {
  switch (p_mode) {
    case kLean:
      return qgmma::LaunchKernel<kCausal, kLean>(p, batch, stream);
    case kNaive:
      return qgmma::LaunchKernel<kCausal, kNaive>(p, batch, stream);
    default:
      return qgmma::LaunchKernel<kCausal, kExact>(p, batch, stream);
  }
}

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_QGMMA_LAUNCH_CUH_
