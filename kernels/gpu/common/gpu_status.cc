#include "kernels/gpu/common/gpu_status.h"

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace gpu {

bool IsStickyError(cudaError_t e) {
  // Comparisons, not a switch: HIP folds several of CUDA's codes into one.
  for (cudaError_t sticky : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorLaunchTimeout,
                             cudaErrorMisalignedAddress, cudaErrorIllegalInstruction, cudaErrorHardwareStackError,
                             cudaErrorInvalidAddressSpace, cudaErrorInvalidPc, cudaErrorAssert,
                             cudaErrorECCUncorrectable, KS_GPU_VENDOR_STICKY_ERRORS cudaErrorUnknown}) {
    if (e == sticky) return true;
  }
  return false;
}

absl::Status GpuStatus(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  if (IsStickyError(e) || e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
      e == cudaErrorDevicesUnavailable) {
    return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

}  // namespace gpu
}  // namespace kernelserve
