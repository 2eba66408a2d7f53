// CUDA runtime errors as absl::Status. Every CUDA call in the backend goes
// through GpuStatus so that no error is dropped and none aborts the process.
#ifndef KERNELSERVE_KERNELS_CUDA_CUDA_STATUS_H_
#define KERNELSERVE_KERNELS_CUDA_CUDA_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/gpu_compat.h"

namespace kernelserve {
namespace cuda {

// A fault after which the CUDA context is unusable (every later call fails
// with the same error until the process exits): the device must be marked
// unhealthy.
bool IsStickyError(gpuError_t e);

// OK for gpuSuccess; otherwise a status naming the call and the CUDA error:
// RESOURCE_EXHAUSTED for out-of-memory, UNAVAILABLE for sticky faults and a
// missing or unusable device, INTERNAL otherwise.
absl::Status GpuStatus(gpuError_t e, absl::string_view what);

}  // namespace cuda
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_CUDA_STATUS_H_
