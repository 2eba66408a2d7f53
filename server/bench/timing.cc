#include "server/bench/timing.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/rocm_smi.h"

namespace kernelserve {
namespace bench {
namespace {

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t RoundUpToPowerOfTwo(int64_t x) {
  int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

}  // namespace

int64_t FlushBytes(const BackendCapabilities& caps) { return std::max<int64_t>(0, caps.cache_bytes); }

// A backend with its own device timer has device memory, which copies ~10x
// faster than host memory: eight times its cache, rounded up to a power of
// two (512 MiB on an H200's 50 MiB L2), at least 64 MiB, ten copies a batch.
// A host backend's cache_bytes is already a size past its cache, and its
// copies are slow: one such copy, twice a batch.
CopyPlan CeilingCopyPlan(const BackendCapabilities& caps) {
  constexpr int64_t kMin = int64_t{64} << 20;
  if (caps.device_timer) return {std::max(kMin, RoundUpToPowerOfTwo(8 * caps.cache_bytes)), 10};
  return {std::max(kMin, caps.cache_bytes), 2};
}

std::optional<pb::DeviceCeilings> CeilingCache::Get(int device) const {
  absl::MutexLock l(&mu_);
  if (device < 0 || device >= static_cast<int>(ceilings_.size())) return std::nullopt;
  return ceilings_[static_cast<size_t>(device)];
}

void CeilingCache::Put(int device, const pb::DeviceCeilings& c) {
  absl::MutexLock l(&mu_);
  if (device >= 0 && device < static_cast<int>(ceilings_.size())) ceilings_[static_cast<size_t>(device)] = c;
}

std::vector<pb::DeviceCeilings> CeilingCache::All() const {
  absl::MutexLock l(&mu_);
  std::vector<pb::DeviceCeilings> all;
  for (const auto& c : ceilings_) {
    if (c) all.push_back(*c);
  }
  return all;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

pb::TimeStats ComputeStats(const std::vector<double>& ms) {
  pb::TimeStats s;
  if (ms.empty()) return s;
  const double n = static_cast<double>(ms.size());
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / n;
  double var = 0;
  for (double x : ms) var += (x - mean) * (x - mean);
  s.set_mean_ms(mean);
  s.set_median_ms(Median(ms));
  s.set_min_ms(*std::min_element(ms.begin(), ms.end()));
  s.set_max_ms(*std::max_element(ms.begin(), ms.end()));
  s.set_stddev_ms(std::sqrt(var / n));
  s.set_count(static_cast<int64_t>(ms.size()));
  s.set_value_ms(mean);
  return s;
}

absl::StatusOr<pb::DeviceCeilings> MeasureCeilings(Backend& backend, int device, double gemm_tflops_override,
                                                   double gemm_fp8_tflops_override,
                                                   const std::function<bool()>& cancelled) {
  auto stopped = [&] { return cancelled && cancelled(); };
  pb::DeviceCeilings c;
  c.set_measured_unix_ms(absl::ToUnixMillis(absl::Now()));
  std::vector<std::string> notes;

  // Copy: best of a few batches of device-to-device copies.
  const CopyPlan plan = CeilingCopyPlan(backend.Capabilities());
  const size_t bytes = static_cast<size_t>(plan.bytes);
  auto src = backend.Allocate(device, bytes);
  auto dst = backend.Allocate(device, bytes);
  if (src.ok() && dst.ok()) {
    const int per_batch = plan.per_batch;
    double best = 1e30;
    absl::Status st = backend.CopyOnDevice(device, (*dst)->data(), (*src)->data(), bytes);  // warm
    if (st.ok()) st = backend.Synchronize(device);
    for (int rep = 0; rep < 5 && st.ok(); ++rep) {
      if (stopped()) return absl::CancelledError("measuring the ceilings: cancelled");
      const double t0 = NowS();
      for (int i = 0; i < per_batch && st.ok(); ++i) {
        st = backend.CopyOnDevice(device, (*dst)->data(), (*src)->data(), bytes);
      }
      if (st.ok()) st = backend.Synchronize(device);
      best = std::min(best, (NowS() - t0) / per_batch);
    }
    if (st.ok() && best > 0) {
      c.set_copy_tbps(2.0 * static_cast<double>(bytes) / best / 1e12);
      c.set_copy_desc(absl::StrCat("CopyOnDevice ", bytes >> 20, " MiB, read + write bytes, best of 5"));
    } else {
      notes.push_back(absl::StrCat("copy ceiling failed: ", st.ToString()));
    }
  } else {
    notes.push_back(absl::StrCat("copy ceiling: allocation failed: ",
                                 (src.ok() ? dst.status() : src.status()).ToString()));
  }

  // GEMM: a ceiling measured elsewhere (flag) wins; else the backend's own
  // (cpu: blocked fp32 GEMM; cuda: cuBLAS bf16); else "not measured", never a
  // made-up 0.
  if (gemm_tflops_override > 0) {
    c.set_gemm_tflops(gemm_tflops_override);
    c.set_gemm_desc("given by --bench_gemm_tflops (measured elsewhere, not by this server)");
  } else {
    absl::StatusOr<Backend::GemmCeiling> g = backend.MeasureGemmCeiling(device, cancelled);
    if (stopped()) return absl::CancelledError("measuring the ceilings: cancelled");
    if (g.ok() && g->tflops > 0) {
      c.set_gemm_tflops(g->tflops);
      c.set_gemm_desc(g->desc);
    } else {
      // cuda without libcublas (UNAVAILABLE), or a backend with no GEMM at all.
      c.set_gemm_desc(kGemmNotMeasured);
      notes.push_back(absl::StrCat("GEMM ceiling not measured on backend ", backend.Name(), " (",
                                   g.ok() ? "it reported no rate" : g.status().message(),
                                   "); pass --bench_gemm_tflops (and --bench_gemm_fp8_tflops) measured "
                                   "elsewhere, e.g. with torch"));
    }
  }
  if (gemm_fp8_tflops_override > 0) c.set_gemm_fp8_tflops(gemm_fp8_tflops_override);
  c.set_note(absl::StrJoin(notes, "; "));
  return c;
}

// ------------------------------------------------------------------- NVML

struct ClockSampler::Nvml {
  using Device = void*;
  void* lib = nullptr;
  Device dev = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*handle_by_index)(unsigned, Device*) = nullptr;
  int (*clock_info)(Device, int, unsigned*) = nullptr;
  int (*power_usage)(Device, unsigned*) = nullptr;
  int (*temperature)(Device, int, unsigned*) = nullptr;

  ~Nvml() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

namespace {

// The NVML index of CUDA device `device`, honouring a numeric CUDA_VISIBLE_DEVICES.
unsigned NvmlIndex(int device) {
  const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
  if (vis == nullptr || *vis == '\0') return static_cast<unsigned>(device);
  std::vector<std::string> parts = absl::StrSplit(vis, ',');
  int idx = 0;
  if (device < static_cast<int>(parts.size()) && absl::SimpleAtoi(parts[device], &idx)) {
    return static_cast<unsigned>(idx);
  }
  return static_cast<unsigned>(device);
}

}  // namespace

ClockSampler::ClockSampler(const Backend& backend, int device, int period_ms) : period_ms_(period_ms) {
  if (!backend.Capabilities().device_timer) {
    note_ = absl::StrCat("no clock telemetry on backend ", backend.Name(),
                         " (no device timer, so no GPU to sample)");
    return;
  }
  if (backend.Name() == "hip") {
    OpenRocmSmi(device);
  } else {
    OpenNvml(device);
  }
}

void ClockSampler::OpenNvml(int device) {
  auto n = std::make_unique<Nvml>();
  n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (n->lib == nullptr) {
    note_ = "libnvidia-ml.so.1 not found: no clock, power or temperature samples";
    return;
  }
  n->init = reinterpret_cast<int (*)()>(dlsym(n->lib, "nvmlInit_v2"));
  n->shutdown = reinterpret_cast<int (*)()>(dlsym(n->lib, "nvmlShutdown"));
  n->handle_by_index =
      reinterpret_cast<int (*)(unsigned, Nvml::Device*)>(dlsym(n->lib, "nvmlDeviceGetHandleByIndex_v2"));
  n->clock_info = reinterpret_cast<int (*)(Nvml::Device, int, unsigned*)>(
      dlsym(n->lib, "nvmlDeviceGetClockInfo"));
  n->power_usage =
      reinterpret_cast<int (*)(Nvml::Device, unsigned*)>(dlsym(n->lib, "nvmlDeviceGetPowerUsage"));
  n->temperature = reinterpret_cast<int (*)(Nvml::Device, int, unsigned*)>(
      dlsym(n->lib, "nvmlDeviceGetTemperature"));
  if (!n->init || !n->handle_by_index || !n->clock_info || !n->power_usage || !n->temperature) {
    note_ = "libnvidia-ml.so.1 lacks the expected symbols";
    n->shutdown = nullptr;
    return;
  }
  if (int rc = n->init(); rc != 0) {
    note_ = absl::StrCat("nvmlInit_v2 failed (", rc, ")");
    n->shutdown = nullptr;
    return;
  }
  if (int rc = n->handle_by_index(NvmlIndex(device), &n->dev); rc != 0) {
    note_ = absl::StrCat("nvmlDeviceGetHandleByIndex_v2(", NvmlIndex(device), ") failed (", rc, ")");
    return;
  }
  nvml_ = std::move(n);
  source_ = "NVML";
}

void ClockSampler::OpenRocmSmi(int device) {
  constexpr char kNone[] = ": no clock, power or temperature samples";
  absl::StatusOr<uint32_t> index = rocm_smi::SmiIndexFromEnvironment(device);
  if (!index.ok()) {
    note_ = absl::StrCat("cannot map HIP device ", device, " to its ROCm SMI index: ", index.status().message(), kNone);
    return;
  }
  absl::StatusOr<std::unique_ptr<rocm_smi::Smi>> smi = rocm_smi::Smi::Open();
  if (!smi.ok()) {
    note_ = absl::StrCat(smi.status().message(), kNone);
    return;
  }
  absl::StatusOr<uint32_t> count = (*smi)->DeviceCount();
  if (count.ok() && *index >= *count) {
    note_ = absl::StrCat("HIP device ", device, " is ROCm SMI device ", *index, ", but ROCm SMI sees ", *count,
                         " devices", kNone);
    return;
  }
  smi_ = std::move(*smi);
  smi_index_ = *index;
  source_ = absl::StrCat("ROCm SMI (", smi_->library(), ")");
}

ClockSampler::~ClockSampler() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ClockSampler::Start() {
  if (!nvml_ && !smi_) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void ClockSampler::Loop() {
  constexpr int kNvmlClockSm = 1;
  constexpr int kNvmlTemperatureGpu = 0;
  while (!stop_ && smi_) {
    const rocm_smi::Reading r = smi_->Read(smi_index_);
    {
      absl::MutexLock l(&mu_);
      if (r.sys_clock_mhz) clock_mhz_.push_back(*r.sys_clock_mhz);
      if (r.power_w) power_w_.push_back(*r.power_w);
      if (r.temperature_c) temp_c_.push_back(*r.temperature_c);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
  }
  while (!stop_ && nvml_) {
    unsigned clock = 0, mw = 0, temp = 0;
    const bool ok_c = nvml_->clock_info(nvml_->dev, kNvmlClockSm, &clock) == 0;
    const bool ok_p = nvml_->power_usage(nvml_->dev, &mw) == 0;
    const bool ok_t = nvml_->temperature(nvml_->dev, kNvmlTemperatureGpu, &temp) == 0;
    {
      absl::MutexLock l(&mu_);
      if (ok_c) clock_mhz_.push_back(clock);
      if (ok_p) power_w_.push_back(mw / 1000.0);
      if (ok_t) temp_c_.push_back(temp);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
  }
}

pb::ClockStats ClockSampler::Stop() {
  pb::ClockStats s;
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (!nvml_ && !smi_) {
    s.set_note(note_);
    return s;
  }
  absl::MutexLock l(&mu_);
  auto mean = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  };
  auto maxv = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
  auto minv = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); };
  s.set_available(!clock_mhz_.empty());
  if (clock_mhz_.empty()) s.set_note(absl::StrCat(source_, " returned no clock samples"));
  s.set_samples(static_cast<int64_t>(clock_mhz_.size()));
  s.set_sm_clock_mhz_mean(mean(clock_mhz_));
  s.set_sm_clock_mhz_min(minv(clock_mhz_));
  s.set_sm_clock_mhz_max(maxv(clock_mhz_));
  s.set_power_w_mean(mean(power_w_));
  s.set_power_w_max(maxv(power_w_));
  s.set_temperature_c_mean(mean(temp_c_));
  s.set_temperature_c_max(maxv(temp_c_));
  // Every n-th sample, at most kMaxSeries: enough for a plot, small in the job record.
  constexpr size_t kMaxSeries = 600;
  const size_t stride = std::max<size_t>(1, (std::max(clock_mhz_.size(), power_w_.size()) + kMaxSeries - 1) / kMaxSeries);
  for (size_t i = 0; i < clock_mhz_.size(); i += stride) s.add_sm_clock_mhz_samples(static_cast<float>(clock_mhz_[i]));
  for (size_t i = 0; i < power_w_.size(); i += stride) s.add_power_w_samples(static_cast<float>(power_w_[i]));
  s.set_sample_period_ms(static_cast<double>(period_ms_ * stride));
  return s;
}

}  // namespace bench
}  // namespace kernelserve
