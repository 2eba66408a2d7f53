#include "kernels/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace cuda {

bool IsStickyError(gpuError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorHardwareStackError:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorContained:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

absl::Status GpuStatus(gpuError_t e, absl::string_view what) {
  if (e == gpuSuccess) return absl::OkStatus();
  const std::string msg =
      absl::StrCat(what, ": ", gpuGetErrorName(e), " (", gpuGetErrorString(e), ")");
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  if (IsStickyError(e) || e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
      e == cudaErrorDevicesUnavailable) {
    return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

}  // namespace cuda
}  // namespace kernelserve
