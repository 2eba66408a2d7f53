// Launcher of the mma.sync kernel; each flash_fwd_mma_sync_hdim*_*.cu
// instantiates it once.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_MMA_SYNC_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_MMA_SYNC_LAUNCH_H_

#include "kernels/gpu/arch/sm90/attention/flash_fwd.h"
#include "kernels/gpu/arch/sm90/attention/flash_fwd_mma_sync_kernel.h"
#include "kernels/gpu/arch/sm90/attention/mma_sync_traits.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/tile_scheduler.h"

namespace kernelserve {
namespace gpu {
namespace attention {

template <int kHeadDim, bool kCausal>
cudaError_t RunFlashFwdMmaSync(const FlashFwdParams& params, cudaStream_t stream) {
  using Traits = MmaSyncTraits<kHeadDim, kCausal>;
  auto kernel = &FlashFwdMmaSyncKernel<Traits>;
  // Per call, not once: the attribute is per device and cheap to set.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid = SingleTileScheduler<Traits::kBlockM>::Grid(params);
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_MMA_SYNC_LAUNCH_H_
