// Stands in for the CUDA backend in the clang/libFuzzer build
// (build_libfuzzer.sh), which compiles no .cu code: --backend=auto falls back
// to the CPU backend exactly as on a machine without a GPU.
#include "kernels/cuda/cuda_backend.h"

namespace kernelserve {

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend() {
  return absl::UnavailableError("this fuzz build has no CUDA backend");
}

}  // namespace kernelserve
