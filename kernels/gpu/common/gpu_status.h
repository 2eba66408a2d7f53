// GPU runtime errors as absl::Status: the one mapping, for every vendor.
// Every runtime call in the GPU code goes through GpuStatus, so that no
// error is dropped and none aborts the process.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_GPU_STATUS_H_
#define KERNELSERVE_KERNELS_GPU_COMMON_GPU_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {

// A fault after which the device context is unusable (every later call fails
// with the same error until the process exits): the device must be marked
// unhealthy.
bool IsStickyError(cudaError_t e);

// OK for cudaSuccess; otherwise a status naming the call and the error:
// RESOURCE_EXHAUSTED for out-of-memory, UNAVAILABLE for sticky faults and a
// missing or unusable device, INTERNAL otherwise.
absl::Status GpuStatus(cudaError_t e, absl::string_view what);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_GPU_STATUS_H_
