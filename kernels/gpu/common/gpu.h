// The one header through which GPU code reaches the vendor: CUDA by default,
// HIP when compiling for AMD (vendors/cuda.h, vendors/hip.h). Code written
// against it uses the CUDA runtime's names, and gpu::kWarpSize, gpu::ShflXor,
// gpu::Exp2Approx, gpu::Exp2, gpu::Half2ToFloat2 and gpu::LoadOnce where the
// vendors differ; gpu::CurrentDeviceSms for the launchers.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_GPU_H_
#define KERNELSERVE_KERNELS_GPU_COMMON_GPU_H_

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
#include "kernels/gpu/common/vendors/hip.h"  // IWYU pragma: export
#else
#include "kernels/gpu/common/vendors/cuda.h"  // IWYU pragma: export
#endif

namespace kernelserve {
namespace gpu {

// The current device and its SM count, which the launchers' plans size their
// grids by.
inline cudaError_t CurrentDeviceSms(int* device, int* sms) {
  const cudaError_t e = cudaGetDevice(device);
  return e != cudaSuccess ? e : cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, *device);
}

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_GPU_H_
