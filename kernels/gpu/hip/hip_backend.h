// The HIP (AMD) backend: devices through the HIP runtime loaded at run time
// (hip_runtime.h), kernels from the gfx code objects embedded in the binary
// (hip_code_objects.h), loaded on each device with hipModuleLoadData when
// the backend starts, and dispatched through its variant table
// (hip_variants.h). One stream per device; every runtime call checked; a
// kernel fault marks the device unhealthy and later calls on it return
// UNAVAILABLE. Ops it has no kernel for return UNIMPLEMENTED naming the case.
// Clock rates the runtime does not report come from ROCm SMI when it loads;
// the GEMM ceiling from rocBLAS, loaded when a job first asks for it.
//
// It is a class of its own rather than kernels/gpu/gpu_backend.cc compiled
// for HIP: that one is host code that launches with <<<...>>> and links the
// vendor runtime, and this binary must start where ROCm is absent.
#ifndef KERNELSERVE_KERNELS_GPU_HIP_HIP_BACKEND_H_
#define KERNELSERVE_KERNELS_GPU_HIP_HIP_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/api/backend.h"
#include "kernels/gpu/hip/hip_code_objects.h"
#include "kernels/gpu/hip/hip_runtime.h"
#include "kernels/gpu/hip/rocblas_gemm.h"

namespace kernelserve {

// The backend over the process's HIP runtime (hip::SharedRuntime()) and this
// binary's code objects. UNAVAILABLE when the runtime does not load (the
// libraries tried and why) or no device answers.
absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackend();

namespace gpu {
namespace hip {

// The same over a given runtime and code objects (tests), and rocBLAS for
// the GEMM ceiling as `blas` returns it (called when a job first asks).
absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackendWith(
    const absl::StatusOr<Runtime>& runtime, const std::vector<CodeObject>& objects,
    const absl::StatusOr<Rocblas>& (*blas)() = SharedRocblas);

// What the "no HIP device" answer adds about the KFD device node `kfd`
// (/dev/kfd), through which ROCm's runtime reaches every AMD GPU: that it
// is missing (no amdgpu driver, or a container without the device) or not
// open to this user; empty when it is there and open.
std::string KfdHint(const char* kfd);

}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_HIP_HIP_BACKEND_H_
