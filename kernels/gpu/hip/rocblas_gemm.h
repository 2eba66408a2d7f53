// The AMD device's dense bf16 GEMM rate, the GEMM ceiling of benchmark jobs
// (DESIGN §6: measured once per device), with rocBLAS loaded at run time
// like the HIP runtime and ROCm SMI: kernelserve links no ROCm library, and
// rocBLAS (hundreds of MB of tuned kernels) is opened only when a job first
// needs the ceiling, never at start-up. The CUDA backend's counterpart is
// kernels/gpu/gemm_ceiling.h (cuBLAS).
//
// The entry points used are declared here with rocBLAS's C ABI (handles are
// pointers, enums and rocblas_status ints, rocblas_int 32-bit as in the
// default LP64 build); rocblas_gemm_ex has kept this signature and these
// enum values from ROCm 5 through 7, so no rocBLAS header is needed.
#ifndef KERNELSERVE_KERNELS_GPU_HIP_ROCBLAS_GEMM_H_
#define KERNELSERVE_KERNELS_GPU_HIP_ROCBLAS_GEMM_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gpu/hip/hip_runtime.h"

namespace kernelserve {
namespace gpu {
namespace hip {

// rocblas_operation, rocblas_datatype and rocblas_gemm_algo values used.
constexpr int kRocblasOpNone = 111;
constexpr int kRocblasOpTranspose = 112;
constexpr int kRocblasF32 = 151;
constexpr int kRocblasBf16 = 168;
constexpr int kRocblasAlgoStandard = 0;

struct Rocblas {
  using Handle = struct RocblasHandleOpaque*;
  std::string library;  // the name dlopen accepted

  int (*CreateHandle)(Handle*) = nullptr;
  int (*DestroyHandle)(Handle) = nullptr;
  int (*SetStream)(Handle, Stream) = nullptr;
  // D = alpha op(A) op(B) + beta C, column-major; C and D may be one matrix.
  int (*GemmEx)(Handle, int trans_a, int trans_b, int m, int n, int k, const void* alpha, const void* a, int a_type,
                int lda, const void* b, int b_type, int ldb, const void* beta, const void* c, int c_type, int ldc,
                void* d, int d_type, int ldd, int compute_type, int algo, int32_t solution_index,
                uint32_t flags) = nullptr;
  // rocblas_status_to_string; optional (null: the status as a number).
  const char* (*StatusToString)(int) = nullptr;

  // "rocblas_gemm_ex: rocblas_status_invalid_size (status 4)" and the like.
  std::string Describe(const char* what, int status) const;
};

// The names tried, in order: the development symlink, then the sonames of
// ROCm 7 (rocBLAS 5), ROCm 6 (rocBLAS 4) and ROCm 5 (also Debian 12's
// librocblas0).
std::vector<std::string> DefaultRocblasNames();

// dlopens the first of `names` that loads and has every required entry
// point. UNAVAILABLE naming each library tried and why otherwise.
absl::StatusOr<Rocblas> LoadRocblas(const std::vector<std::string>& names);

// The process-wide rocBLAS from DefaultRocblasNames(), loaded on first use
// (the first attempt's status is kept).
const absl::StatusOr<Rocblas>& SharedRocblas();

struct GemmRate {
  double tflops = 0;
  std::string desc;  // how it was measured
};

// bf16 n x n x n GEMM with fp32 accumulation (bf16 A, B, C; compute f32) on
// `stream` of the current device: random operands that are never zero
// (zeros switch fewer bits and run at a higher clock), three warm-up calls,
// then the best of `reps` timed by events around one call each. The
// device's buffers, events and rocBLAS handle are released on every path.
// `cancelled` (may be empty) is polled between the timed calls: true ends
// the measurement with CANCELLED.
absl::StatusOr<GemmRate> MeasureRocblasBf16Gemm(const Runtime& rt, const Rocblas& blas, Stream stream,
                                                const std::function<bool()>& cancelled = {}, int n = 8192,
                                                int reps = 10);

}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_HIP_ROCBLAS_GEMM_H_
