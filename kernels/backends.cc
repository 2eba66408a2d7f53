#include "kernels/backends.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace kernelserve {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> CreateGpuBackend(absl::string_view name) {
  if (name == "cuda") return CreateCudaBackend();
  return absl::UnimplementedError(
      "backend \"hip\": this build has no HIP (AMD) backend yet");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view name,
                                                       const BackendOptions& options,
                                                       std::string* note) {
  if (name == "cpu") {
    if (note) *note = "backend cpu (requested)";
    return CreateCpuBackend(options.cpu_threads);
  }
  if (name == "cuda" || name == "hip") return CreateGpuBackend(name);
  if (name == "auto") {
    auto gpu = CreateGpuBackend("cuda");
    if (gpu.ok()) {
      if (note) *note = "backend auto: using cuda";
      return gpu;
    }
    if (note) {
      *note = absl::StrCat("backend auto: no GPU backend answered (", gpu.status().message(),
                           "); falling back to cpu");
    }
    return CreateCpuBackend(options.cpu_threads);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("backend: expected auto, cpu, cuda or hip, got \"", name, "\""));
}

}  // namespace kernelserve
