// The two ceilings a bench row is held against, measured in the bench's own
// run (METHOD: datasheet rates are leads): device copy bandwidth, counting
// bytes read plus written, and the dense bf16 GEMM rate through cuBLAS (f16
// runs at the same tensor-core rate on Hopper). A row's roofline is
// max(bytes / copy, FLOP / GEMM); its time over that is the gap.
#ifndef KERNELSERVE_BENCH_ROOFLINE_H_
#define KERNELSERVE_BENCH_ROOFLINE_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "bench/cuda_bench_util.h"
#include "kernels/gpu/gemm_ceiling.h"

namespace kernelserve {
namespace bench {

struct Ceilings {
  double copy_tbps = 0;     // device-to-device copy, read + write
  double gemm_tflops = 0;   // 0 when cuBLAS could not be loaded
  std::string gemm_desc;    // how the GEMM rate was measured, or why not

  // Microseconds the row cannot beat; 0 for the compute term when the GEMM
  // rate is unknown (the row then says so).
  double RooflineUs(double bytes, double flops) const {
    const double mem = bytes / (copy_tbps * 1e6);
    const double math = gemm_tflops > 0 ? flops / (gemm_tflops * 1e6) : 0;
    return std::max(mem, math);
  }
  // "bytes" or "FLOP": which term sets the roofline.
  const char* Bound(double bytes, double flops) const {
    return gemm_tflops > 0 && flops / (gemm_tflops * 1e6) > bytes / (copy_tbps * 1e6) ? "FLOP" : "bytes";
  }
};

// Best of 5 copies of 2 GiB (well past the L2) and cuBLAS bf16 8192^3.
inline Ceilings MeasureCeilings() {
  Ceilings c;
  const size_t bytes = size_t{2} << 30;
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 0x3c, bytes));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int i = 0; i < 6; ++i) {
    CHECK_CUDA(cudaEventRecord(e0, s));
    CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    CHECK_CUDA(cudaEventRecord(e1, s));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (i > 0) best = std::min(best, ms);  // the first one warms up
  }
  c.copy_tbps = 2.0 * static_cast<double>(bytes) / (best * 1e9);
  cudaFree(a);
  cudaFree(b);
  const absl::StatusOr<gpu::GemmRate> gemm = gpu::MeasureCublasBf16Gemm(s);
  if (gemm.ok()) {
    c.gemm_tflops = gemm->tflops;
    c.gemm_desc = gemm->desc;
  } else {
    c.gemm_desc = std::string(gemm.status().message());
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
  return c;
}

inline void PrintCeilings(const Ceilings& c) {
  const std::string gemm = c.gemm_tflops > 0
                               ? std::to_string(static_cast<int>(c.gemm_tflops + 0.5)) + " TFLOP/s (" + c.gemm_desc + ")"
                               : "unknown (" + c.gemm_desc + "): rooflines count bytes only";
  std::printf("ceilings measured in this run: copy %.2f TB/s (read + write); GEMM %s\n", c.copy_tbps, gemm.c_str());
}

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_BENCH_ROOFLINE_H_
