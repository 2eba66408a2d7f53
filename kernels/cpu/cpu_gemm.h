// A cache-blocked, multi-threaded fp32 GEMM for the cpu backend's GEMM
// ceiling (Backend::MeasureGemmCeiling). It is built the way BLIS/GotoBLAS
// build theirs, so that the ceiling is what this CPU's vector units reach on
// dense fp32 work: per (KC x NC) step B is packed into column panels and A
// into 6-row panels, once, by all threads, and a register-blocked 6-row
// micro-kernel with 12 accumulators runs over them in (MC x 192) work items.
// Two micro-kernels: 6x16 AVX2/FMA (the vector width of the cpu ops,
// kernels/cpu/cpu_simd.h) and 6x32 AVX-512 where the CPU has it.
#ifndef KERNELSERVE_KERNELS_CPU_CPU_GEMM_H_
#define KERNELSERVE_KERNELS_CPU_CPU_GEMM_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kernelserve {
namespace cpu {

enum class GemmIsa { kAvx2, kAvx512 };
const char* GemmIsaName(GemmIsa isa);  // "AVX2/FMA", "AVX-512"
// Compiled in and supported by this CPU.
bool GemmIsaAvailable(GemmIsa isa);

// C[m][n] = A[m][k] * B[k][n], row-major fp32, on `threads` threads. m a
// multiple of 6, n a multiple of 16 (AVX2) or 32 (AVX-512), k >= 1; else
// INVALID_ARGUMENT, as for an ISA this CPU lacks (FAILED_PRECONDITION).
absl::Status Sgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c, int threads,
                   GemmIsa isa = GemmIsa::kAvx2);

struct GemmRate {
  double tflops = 0;
  std::string desc;  // what was measured ("fp32 GEMM 1152^3, ...")
};

// The ceiling: best of `reps` timed n x n x n Sgemm runs (after one warm-up)
// with each available micro-kernel; the fastest one is the rate.
// `cancelled` (may be empty) is polled before every run: true ends it with CANCELLED.
absl::StatusOr<GemmRate> MeasureSgemm(int64_t n, int reps, int threads,
                                      const std::function<bool()>& cancelled = nullptr);

}  // namespace cpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_CPU_GEMM_H_
