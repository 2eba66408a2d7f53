#include "common/rocm_smi.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kernelserve {
namespace rocm_smi {
namespace {

// rocm_smi.h's values (the same in ROCm 5 and 6).
constexpr int kSuccess = 0;
constexpr int kClkTypeSys = 0;
constexpr int kClkTypeMem = 4;
constexpr uint32_t kTempTypeEdge = 0;
constexpr uint32_t kTempTypeJunction = 1;
constexpr int kTempCurrent = 0;

// rsmi_frequencies_t, both layouts.
struct FrequenciesV5 {
  uint32_t num_supported;
  uint32_t current;
  uint64_t frequency[32];
};
struct FrequenciesV6 {
  bool has_deep_sleep;
  uint32_t num_supported;
  uint32_t current;
  uint64_t frequency[33];
};
static_assert(sizeof(FrequenciesV5) <= kFrequenciesBufferBytes);
static_assert(sizeof(FrequenciesV6) <= kFrequenciesBufferBytes);

// rsmi_version_t.
struct Version {
  uint32_t major, minor, patch;
  const char* build;
};

template <class F>
absl::StatusOr<Frequencies> Decode(const F& f) {
  constexpr uint32_t kMax = sizeof(f.frequency) / sizeof(f.frequency[0]);
  if (f.num_supported == 0 || f.num_supported > kMax || f.current >= f.num_supported) {
    return absl::DataLossError(absl::StrCat("rsmi_frequencies_t: ", f.num_supported, " frequencies, current index ",
                                            f.current, " (expected 1..", kMax, " and an index below the count)"));
  }
  Frequencies out;
  out.current_hz = f.frequency[f.current];
  out.max_hz = *std::max_element(f.frequency, f.frequency + f.num_supported);
  return out;
}

// One comma-separated visibility list: its indices, or why not.
absl::StatusOr<std::vector<uint32_t>> ParseList(absl::string_view list, absl::string_view variable) {
  std::vector<uint32_t> out;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    uint32_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(variable, "=\"", list, "\": entry \"", part,
                                                     "\" is not a device index (GPU UUIDs are not mapped to SMI "
                                                     "indices)"));
    }
    out.push_back(v);
  }
  return out;
}

// Applies `list` (empty: identity) to `index`.
absl::StatusOr<uint32_t> Select(uint32_t index, absl::string_view list, absl::string_view variable) {
  if (absl::StripAsciiWhitespace(list).empty()) return index;
  absl::StatusOr<std::vector<uint32_t>> parsed = ParseList(list, variable);
  if (!parsed.ok()) return parsed.status();
  if (index >= parsed->size()) {
    return absl::InvalidArgumentError(absl::StrCat(variable, "=\"", list, "\" lists ", parsed->size(),
                                                   " devices: device ", index, " is not among them"));
  }
  return (*parsed)[index];
}

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

struct Smi::Api {
  int (*init)(uint64_t) = nullptr;
  int (*shut_down)() = nullptr;
  int (*num_monitor_devices)(uint32_t*) = nullptr;
  int (*gpu_clk_freq_get)(uint32_t, int, void*) = nullptr;
  int (*power_ave_get)(uint32_t, uint32_t, uint64_t*) = nullptr;
  int (*temp_metric_get)(uint32_t, uint32_t, int, int64_t*) = nullptr;
  // Optional: ROCm 6's current socket power (MI300 reports no average),
  // the version, and the status texts.
  int (*power_get)(uint32_t, uint64_t*, int*) = nullptr;
  int (*version_get)(Version*) = nullptr;
  int (*status_string)(int, const char**) = nullptr;
};

absl::StatusOr<uint32_t> SmiIndex(int device, absl::string_view rocr_visible, absl::string_view hip_visible) {
  if (device < 0) return absl::InvalidArgumentError(absl::StrCat("device ", device, " is negative"));
  absl::StatusOr<uint32_t> rocr = Select(static_cast<uint32_t>(device), hip_visible, "HIP_VISIBLE_DEVICES");
  if (!rocr.ok()) return rocr.status();
  return Select(*rocr, rocr_visible, "ROCR_VISIBLE_DEVICES");
}

absl::StatusOr<uint32_t> SmiIndexFromEnvironment(int device) {
  const char* hip = std::getenv("HIP_VISIBLE_DEVICES");
  return SmiIndex(device, Env("ROCR_VISIBLE_DEVICES"), hip != nullptr ? hip : Env("CUDA_VISIBLE_DEVICES"));
}

std::vector<std::string> DefaultLibraryNames() {
  return {"librocm_smi64.so.1", "librocm_smi64.so.5", "librocm_smi64.so.6", "librocm_smi64.so.7",
          "librocm_smi64.so"};
}

bool UsesV6FrequencyLayout(uint32_t library_major) { return library_major >= 6; }

absl::StatusOr<Frequencies> DecodeFrequencies(const unsigned char* raw, bool v6_layout) {
  if (v6_layout) {
    FrequenciesV6 f;
    std::memcpy(&f, raw, sizeof(f));
    return Decode(f);
  }
  FrequenciesV5 f;
  std::memcpy(&f, raw, sizeof(f));
  return Decode(f);
}

absl::StatusOr<std::unique_ptr<Smi>> Smi::Open(const std::vector<std::string>& names) {
  std::vector<std::string> tried;
  for (const std::string& name : names) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* err = dlerror();
      tried.push_back(absl::StrCat(name, " (", err ? err : "not loadable", ")"));
      continue;
    }
    auto api = std::make_unique<Api>();
    std::string missing;
    auto resolve = [&](const char* symbol, auto& fn, bool required) {
      void* p = dlsym(h, symbol);
      if (p == nullptr && required && missing.empty()) missing = symbol;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    resolve("rsmi_init", api->init, true);
    resolve("rsmi_shut_down", api->shut_down, true);
    resolve("rsmi_num_monitor_devices", api->num_monitor_devices, true);
    resolve("rsmi_dev_gpu_clk_freq_get", api->gpu_clk_freq_get, true);
    resolve("rsmi_dev_power_ave_get", api->power_ave_get, true);
    resolve("rsmi_dev_temp_metric_get", api->temp_metric_get, true);
    resolve("rsmi_dev_power_get", api->power_get, false);
    resolve("rsmi_version_get", api->version_get, false);
    resolve("rsmi_status_string", api->status_string, false);
    if (!missing.empty()) {
      tried.push_back(absl::StrCat(name, " (loaded, but has no ", missing, ")"));
      dlclose(h);
      continue;
    }
    std::unique_ptr<Smi> smi(new Smi());
    smi->handle_ = h;
    smi->library_ = name;
    smi->api_ = std::move(api);
    Version v{};
    if (smi->api_->version_get != nullptr && smi->api_->version_get(&v) == kSuccess) {
      smi->major_ = v.major;
      smi->minor_ = v.minor;
      smi->patch_ = v.patch;
    }
    if (const int rc = smi->api_->init(0); rc != kSuccess) {
      const std::string why = smi->Describe("rsmi_init", rc);
      smi->api_->shut_down = nullptr;  // nothing to shut down
      return absl::UnavailableError(
          absl::StrCat(why, " in ", name, " ", smi->version(),
                       ": no AMD GPU visible to ROCm SMI (it reads the amdgpu driver's /sys/class/drm)"));
    }
    // Where the DRM class exists without an amdgpu device, rsmi_init
    // succeeds and finds nothing.
    if (absl::StatusOr<uint32_t> n = smi->DeviceCount(); !n.ok() || *n == 0) {
      return absl::UnavailableError(absl::StrCat("ROCm SMI (", name, " ", smi->version(), ") sees no AMD GPU: ",
                                                 n.ok() ? "0 devices" : n.status().message()));
    }
    return smi;
  }
  return absl::UnavailableError(absl::StrCat(
      "cannot load ROCm SMI (librocm_smi64; install ROCm or Debian's librocm-smi64-1, or put its lib directory "
      "on LD_LIBRARY_PATH): tried ",
      names.empty() ? std::string("no library") : absl::StrJoin(tried, "; ")));
}

Smi::~Smi() {
  if (api_ && api_->shut_down) api_->shut_down();
  if (handle_ != nullptr) dlclose(handle_);
}

std::string Smi::version() const { return absl::StrCat(major_, ".", minor_, ".", patch_); }

std::string Smi::Describe(absl::string_view what, int status) const {
  const char* text = nullptr;
  if (api_->status_string == nullptr || api_->status_string(status, &text) != kSuccess) text = nullptr;
  return absl::StrCat(what, " failed (RSMI status ", status, text ? absl::StrCat(": ", text) : "", ")");
}

absl::StatusOr<uint32_t> Smi::DeviceCount() const {
  uint32_t n = 0;
  if (const int rc = api_->num_monitor_devices(&n); rc != kSuccess) {
    return absl::UnavailableError(Describe("rsmi_num_monitor_devices", rc));
  }
  return n;
}

absl::StatusOr<Frequencies> Smi::Clock(uint32_t index, int type) const {
  alignas(8) unsigned char raw[kFrequenciesBufferBytes] = {};
  if (const int rc = api_->gpu_clk_freq_get(index, type, raw); rc != kSuccess) {
    return absl::UnavailableError(Describe(absl::StrCat("rsmi_dev_gpu_clk_freq_get(", index, ")"), rc));
  }
  return DecodeFrequencies(raw, UsesV6FrequencyLayout(major_));
}

absl::StatusOr<Frequencies> Smi::SysClock(uint32_t index) const { return Clock(index, kClkTypeSys); }
absl::StatusOr<Frequencies> Smi::MemClock(uint32_t index) const { return Clock(index, kClkTypeMem); }

Reading Smi::Read(uint32_t index) const {
  Reading r;
  if (auto f = SysClock(index); f.ok()) r.sys_clock_mhz = static_cast<double>(f->current_hz) / 1e6;
  if (auto f = MemClock(index); f.ok()) r.mem_clock_mhz = static_cast<double>(f->current_hz) / 1e6;
  uint64_t uw = 0;
  int type = 0;
  if (api_->power_ave_get(index, 0, &uw) == kSuccess) {
    r.power_w = static_cast<double>(uw) / 1e6;
  } else if (api_->power_get != nullptr && api_->power_get(index, &uw, &type) == kSuccess) {
    r.power_w = static_cast<double>(uw) / 1e6;
  }
  int64_t millidegrees = 0;
  if (api_->temp_metric_get(index, kTempTypeJunction, kTempCurrent, &millidegrees) == kSuccess ||
      api_->temp_metric_get(index, kTempTypeEdge, kTempCurrent, &millidegrees) == kSuccess) {
    r.temperature_c = static_cast<double>(millidegrees) / 1000.0;
  }
  return r;
}

}  // namespace rocm_smi
}  // namespace kernelserve
