// The device's dense bf16 GEMM rate, for benchmark jobs' ceilings (DESIGN §6:
// the server measures its GEMM and copy ceilings once per device). Measured
// with cuBLAS loaded at run time (dlopen, like NVML for clocks), so the
// server links no vendor library and runs where cuBLAS is absent.
#ifndef KERNELSERVE_KERNELS_GPU_GEMM_CEILING_H_
#define KERNELSERVE_KERNELS_GPU_GEMM_CEILING_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/statusor.h"

namespace kernelserve {
namespace gpu {

struct GemmRate {
  double tflops = 0;
  std::string desc;  // how it was measured
};

// bf16 n x n x n GEMM (fp32 accumulation) on `stream` of the current device,
// random operands, best of `reps` after warm-up, timed by device events.
// UNAVAILABLE when libcublas cannot be loaded; other failures as statuses.
absl::StatusOr<GemmRate> MeasureCublasBf16Gemm(cudaStream_t stream, int n = 8192, int reps = 10);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_GEMM_CEILING_H_
