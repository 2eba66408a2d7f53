#include "kernels/backends.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "local_config_cuda/config.h"
#include "local_config_hip/config.h"
#if KERNELSERVE_HAVE_CUDA
#include "kernels/gpu/gpu_backend.h"
#endif
#if KERNELSERVE_HAVE_HIP
#include "kernels/gpu/hip/hip_backend.h"
#endif

namespace kernelserve {
namespace {

constexpr bool kHaveCuda = KERNELSERVE_HAVE_CUDA;

std::string CudaNote() {
  if (kHaveCuda) return KERNELSERVE_CUDA_BUILD_NOTE;
  return absl::StrCat("this build has no CUDA backend (built without nvcc; set CUDA_PATH and rebuild); ",
                      KERNELSERVE_CUDA_BUILD_NOTE);
}

constexpr bool kHaveHip = KERNELSERVE_HAVE_HIP;

// Built: what from, and that the runtime is loaded when the backend starts.
std::string HipNote() {
  if (kHaveHip) {
    return absl::StrCat(KERNELSERVE_HIP_BACKEND_NOTE,
                        "; the HIP runtime (libamdhip64) is loaded at start-up, not linked; compiled, never run on "
                        "an AMD GPU by this project's CI");
  }
  return absl::StrCat("this build has no HIP (AMD) backend (", KERNELSERVE_HIP_BACKEND_NOTE,
                      "; install clang-19, lld-19 and libamdhip64-dev and rebuild)");
}

absl::StatusOr<std::unique_ptr<Backend>> CreateGpuBackend(absl::string_view name) {
  if (name == "cuda") {
#if KERNELSERVE_HAVE_CUDA
    return CreateCudaBackend();
#else
    return absl::UnimplementedError(CudaNote());
#endif
  }
#if KERNELSERVE_HAVE_HIP
  return CreateHipBackend();
#else
  return absl::UnimplementedError(HipNote());
#endif
}

}  // namespace

std::vector<BackendBuild> BuiltBackends() {
  return {
      {"cpu", true, "the embedded default: reference and fast CPU kernels"},
      {"cuda", kHaveCuda, CudaNote()},
      {"hip", kHaveHip, HipNote()},
  };
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view name,
                                                       const BackendOptions& options,
                                                       std::string* note) {
  if (name == "cpu") {
    if (note) *note = "backend cpu (requested)";
    return CreateCpuBackend(options.cpu_threads, options.cpu_devices);
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
    return CreateCpuBackend(options.cpu_threads, options.cpu_devices);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("backend: expected auto, cpu, cuda or hip, got \"", name, "\""));
}

}  // namespace kernelserve
