#include "kernels/backends.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "local_config_cuda/config.h"
#include "local_config_hip/config.h"
#if KERNELSERVE_HAVE_CUDA
#include "kernels/gpu/gpu_backend.h"
#endif

namespace kernelserve {
namespace {

constexpr bool kHaveCuda = KERNELSERVE_HAVE_CUDA;

std::string CudaNote() {
  if (kHaveCuda) return KERNELSERVE_CUDA_BUILD_NOTE;
  return absl::StrCat("this build has no CUDA backend (built without nvcc; set CUDA_PATH and rebuild); ",
                      KERNELSERVE_CUDA_BUILD_NOTE);
}

constexpr char kNoHip[] = "this build has no HIP (AMD) backend: no AMD kernels exist yet";

std::string HipNote() {
  return absl::StrCat(kNoHip, "; AMD device compiler: ", KERNELSERVE_HIP_BUILD_NOTE);
}

absl::StatusOr<std::unique_ptr<Backend>> CreateGpuBackend(absl::string_view name) {
  if (name == "cuda") {
#if KERNELSERVE_HAVE_CUDA
    return CreateCudaBackend();
#else
    return absl::UnimplementedError(CudaNote());
#endif
  }
  return absl::UnimplementedError(kNoHip);
}

}  // namespace

std::vector<BackendBuild> BuiltBackends() {
  return {
      {"cpu", true, "the embedded default: reference and fast CPU kernels"},
      {"cuda", kHaveCuda, CudaNote()},
      {"hip", false, HipNote()},
  };
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view name,
                                                       const BackendOptions& options,
                                                       std::string* note) {
  if (name == "cpu") {
    if (note) *note = "backend cpu (requested)";
    return CreateCpuBackend(options.cpu_threads);
  }
  if (name == "cuda" || name == "hip") {
    auto gpu = CreateGpuBackend(name);
    if (gpu.ok() && note) *note = absl::StrCat("backend ", name, " (requested)");
    return gpu;
  }
  if (name == "auto") {
    // Each GPU backend that is missing or finds no device says why in the note.
    std::string why;
    for (const BackendBuild& b : BuiltBackends()) {
      if (b.name == "cpu") continue;
      auto gpu = CreateGpuBackend(b.name);
      if (gpu.ok()) {
        if (note) *note = absl::StrCat("backend auto: using ", b.name);
        return gpu;
      }
      absl::StrAppend(&why, why.empty() ? "" : "; ", b.name, ": ", gpu.status().message());
    }
    if (note) *note = absl::StrCat("backend auto: using cpu (", why, ")");
    return CreateCpuBackend(options.cpu_threads);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("backend: expected auto, cpu, cuda or hip, got \"", name, "\""));
}

}  // namespace kernelserve
