// Measurement helpers for benchmark jobs: time statistics, the device
// ceilings (GEMM and copy throughput, measured once per device), and clock /
// power / temperature sampling through NVML loaded at run time.
#ifndef KERNELSERVE_SERVER_BENCH_TIMING_H_
#define KERNELSERVE_SERVER_BENCH_TIMING_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/api/backend.h"
#include "kernelserve/v1/bench.pb.h"

namespace kernelserve {
namespace rocm_smi {
class Smi;
}  // namespace rocm_smi
namespace bench {

namespace pb = ::kernelserve::v1;

// mean, median, min, max, population stddev and count of `ms`; value_ms = mean.
pb::TimeStats ComputeStats(const std::vector<double>& ms);
double Median(std::vector<double> v);

// DeviceCeilings.gemm_desc when no GEMM ceiling is known (gemm_tflops 0).
inline constexpr char kGemmNotMeasured[] = "not measured";

// Bytes of each of the two buffers an L2 flush copies between (so twice
// that passes through the cache): the cache the backend reports it must
// cover (BackendCapabilities::cache_bytes); 0, nothing to flush, where it
// reports none.
int64_t FlushBytes(const BackendCapabilities& caps);

// The copies that measure the copy ceiling: large enough to stream from
// memory rather than from the cache.
struct CopyPlan {
  int64_t bytes = 0;  // per buffer
  int per_batch = 0;  // copies per timed batch
};
CopyPlan CeilingCopyPlan(const BackendCapabilities& caps);

// Measures the device's ceilings through the Backend interface: copy
// throughput with CopyOnDevice (read + write bytes), and the GEMM ceiling with
// Backend::MeasureGemmCeiling (cpu: a blocked fp32 GEMM; cuda: cuBLAS bf16,
// loaded at run time), sized by CeilingCopyPlan. `gemm_tflops_override` > 0 replaces the GEMM
// measurement; the FP8 GEMM ceiling exists only as `gemm_fp8_tflops_override`.
// Without either, gemm_tflops is 0 with gemm_desc "not measured" and a note.
// Call it on the device's worker, with nothing else running there.
// `cancelled` (may be empty) is polled between copy batches and GEMM runs:
// true gives CANCELLED (nothing measured), so a job cancelled meanwhile stops.
absl::StatusOr<pb::DeviceCeilings> MeasureCeilings(Backend& backend, int device, double gemm_tflops_override,
                                                   double gemm_fp8_tflops_override,
                                                   const std::function<bool()>& cancelled = nullptr);

// The ceilings measured on each device, kept for the jobs that run there
// later. Thread-safe.
class CeilingCache {
 public:
  explicit CeilingCache(int devices) : ceilings_(static_cast<size_t>(std::max(0, devices))) {}
  std::optional<pb::DeviceCeilings> Get(int device) const;
  void Put(int device, const pb::DeviceCeilings& c);
  std::vector<pb::DeviceCeilings> All() const;  // the measured ones, by device

 private:
  mutable absl::Mutex mu_;
  std::vector<std::optional<pb::DeviceCeilings>> ceilings_ ABSL_GUARDED_BY(mu_);
};

// Samples SM clock, power and temperature of one GPU every `period_ms` while
// running, through a vendor library opened with dlopen: NVML
// (libnvidia-ml.so.1) on the cuda backend, ROCm SMI (librocm_smi64,
// common/rocm_smi.h; the system clock, average or socket power, junction
// temperature) on the hip backend. A backend without a device timer runs on
// no GPU and is not sampled; without the library, or when it finds no GPU,
// Stop() returns ClockStats{available=false, note saying why} too, and the
// job runs on.
class ClockSampler {
 public:
  ClockSampler(const Backend& backend, int device, int period_ms = 50);
  ~ClockSampler();
  void Start();
  pb::ClockStats Stop();

 private:
  void Loop();

  void OpenNvml(int device);
  void OpenRocmSmi(int device);

  struct Nvml;
  std::unique_ptr<Nvml> nvml_;
  std::unique_ptr<rocm_smi::Smi> smi_;
  uint32_t smi_index_ = 0;
  std::string source_;  // the library sampled
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
