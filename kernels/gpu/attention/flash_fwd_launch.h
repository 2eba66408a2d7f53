// Launcher template; each flash_fwd_hdim*_*.cu instantiates it once.
#ifndef KERNELSERVE_KERNELS_CUDA_ATTENTION_FLASH_FWD_LAUNCH_H_
#define KERNELSERVE_KERNELS_CUDA_ATTENTION_FLASH_FWD_LAUNCH_H_

#include "kernels/gpu/attention/flash_fwd_kernel.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/kernel_traits.h"
#include "kernels/gpu/attention/tile_scheduler.h"

namespace kernelserve {
namespace gpu {

template <int kHeadDim, bool kCausal>
cudaError_t RunFlashFwd(const FlashFwdParams& params, cudaStream_t stream) {
  using Traits = FlashFwdTraits<kHeadDim, kCausal>;
  auto kernel = &FlashFwdKernel<Traits>;
  // Per call, not once: the attribute is per device and cheap to set.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Traits::kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid = SingleTileScheduler<Traits::kBlockM>::Grid(params);
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_ATTENTION_FLASH_FWD_LAUNCH_H_
