// The CUDA backend (DESIGN §1): one stream per device, cudaMalloc'd memory,
// every CUDA call checked. A sticky kernel fault (illegal address and the
// like) leaves the device's context unusable: the device is then marked
// unhealthy (GetDeviceInfo().healthy == false, with the reason) and every
// later call on it returns UNAVAILABLE instead of touching it again.
#ifndef KERNELSERVE_KERNELS_CUDA_CUDA_BACKEND_H_
#define KERNELSERVE_KERNELS_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/api/backend.h"

namespace kernelserve {

// UNAVAILABLE ("no CUDA device: ...") when no device answers, e.g. on a
// machine without a GPU or with a driver older than the runtime.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_CUDA_BACKEND_H_
