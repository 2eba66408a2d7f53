// Host side of the TMA loads (cp.async.bulk.tensor) every sm_90a kernel
// here issues: the driver's tensor-map encoder, reached through the
// runtime's entry-point query so that nothing links -lcuda.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_TENSOR_MAP_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_TENSOR_MAP_H_

#include <cuda.h>
#include <cuda_runtime.h>

namespace kernelserve {
namespace gpu {
namespace sm90 {

// cuTensorMapEncodeTiled's signature (CUDA 12.0 ABI).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's encoder, looked up once; nullptr if the driver has none.
inline EncodeTiledFn TensorMapEncoder() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<EncodeTiledFn>(nullptr);
    }
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

}  // namespace sm90
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_TENSOR_MAP_H_
