// The GPU backend (DESIGN §1), written once against the vendor layer
// (kernels/gpu/common/gpu.h): built for CUDA it is CreateCudaBackend, and a
// HIP build compiles the same class again as CreateHipBackend. One stream per
// device, device memory from a per-device block cache, every runtime call
// checked. A sticky kernel fault (illegal address and the like) leaves the
// device's context unusable: the device is then marked unhealthy
// (GetDeviceInfo().healthy == false, with the reason) and every later call on
// it returns UNAVAILABLE instead of touching it again.
#ifndef KERNELSERVE_KERNELS_GPU_GPU_BACKEND_H_
#define KERNELSERVE_KERNELS_GPU_GPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/api/backend.h"

namespace kernelserve {

// UNAVAILABLE ("no CUDA device: ...") when no device answers, e.g. on a
// machine without a GPU or with a driver older than the runtime.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend();
// The same for HIP; defined only in a build with the HIP backend.
absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackend();

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_GPU_BACKEND_H_
