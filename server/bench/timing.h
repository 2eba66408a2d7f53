// Measurement helpers for benchmark jobs: time statistics, the device
// ceilings (GEMM and copy throughput, measured once per device), and clock /
// power / temperature sampling through NVML loaded at run time.
#ifndef KERNELSERVE_SERVER_BENCH_TIMING_H_
#define KERNELSERVE_SERVER_BENCH_TIMING_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/api/backend.h"
#include "kernelserve/v1/bench.pb.h"

namespace kernelserve {
namespace bench {

namespace pb = ::kernelserve::v1;

// mean, median, min, max, population stddev and count of `ms`; value_ms = mean.
pb::TimeStats ComputeStats(const std::vector<double>& ms);
double Median(std::vector<double> v);

// DeviceCeilings.gemm_desc when no GEMM ceiling is known (gemm_tflops 0).
inline constexpr char kGemmNotMeasured[] = "not measured";

// Measures the device's ceilings through the Backend interface: copy
// throughput with CopyOnDevice (read + write bytes), and the GEMM ceiling with
// Backend::MeasureGemmCeiling (cpu: a blocked fp32 GEMM; cuda: cuBLAS bf16,
// loaded at run time). `gemm_tflops_override` > 0 replaces the GEMM
// measurement; the FP8 GEMM ceiling exists only as `gemm_fp8_tflops_override`.
// Without either, gemm_tflops is 0 with gemm_desc "not measured" and a note.
// Call it on the device's worker, with nothing else running there.
// `cancelled` (may be empty) is polled between copy batches and GEMM runs:
// true gives CANCELLED (nothing measured), so a job cancelled meanwhile stops.
absl::StatusOr<pb::DeviceCeilings> MeasureCeilings(Backend& backend, int device, double gemm_tflops_override,
                                                   double gemm_fp8_tflops_override,
                                                   const std::function<bool()>& cancelled = nullptr);

// Samples SM clock, power and temperature of one GPU every `period_ms` while
// running, through libnvidia-ml.so.1 opened with dlopen. Without the library
// (or on a non-NVIDIA backend) Stop() returns ClockStats{available=false, note}.
class ClockSampler {
 public:
  ClockSampler(const std::string& backend, int device, int period_ms = 50);
  ~ClockSampler();
  void Start();
  pb::ClockStats Stop();

 private:
  void Loop();

  struct Nvml;
  std::unique_ptr<Nvml> nvml_;
  std::string note_;
  int period_ms_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<double> clock_mhz_ ABSL_GUARDED_BY(mu_);
  std::vector<double> power_w_ ABSL_GUARDED_BY(mu_);
  std::vector<double> temp_c_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_TIMING_H_
