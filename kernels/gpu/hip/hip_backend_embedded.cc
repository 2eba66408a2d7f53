// CreateHipBackend over the process's runtime and this binary's code objects
// (kept apart so that the backend class builds without the embedded ones).
#include "kernels/gpu/hip/hip_backend.h"
#include "kernels/gpu/hip/hip_code_objects.h"
#include "kernels/gpu/hip/hip_runtime.h"

namespace kernelserve {

absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackend() {
  return gpu::hip::CreateHipBackendWith(gpu::hip::SharedRuntime(), gpu::hip::EmbeddedCodeObjects());
}

}  // namespace kernelserve
