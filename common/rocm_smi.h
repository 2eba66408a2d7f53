// AMD GPU telemetry (clocks, power, temperature) through ROCm SMI
// (librocm_smi64), loaded at run time like NVML is for NVIDIA: kernelserve
// never links ROCm, so one binary starts where it is absent. The few entry
// points used are declared here with their documented C signatures, so this
// builds without ROCm headers. Shared by the HIP backend (DeviceInfo clocks)
// and the benchmark clock sampler (server/bench/timing.h).
#ifndef KERNELSERVE_COMMON_ROCM_SMI_H_
#define KERNELSERVE_COMMON_ROCM_SMI_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelserve {
namespace rocm_smi {

// The SMI index of HIP device `device`. SMI numbers every AMD GPU of the
// host; ROCr (`rocr_visible`, ROCR_VISIBLE_DEVICES) selects among them and
// HIP (`hip_visible`, HIP_VISIBLE_DEVICES) among those, each a
// comma-separated list of indices (empty: all, in order). This assumes SMI
// and ROCr enumerate the GPUs in the same order, as both do on ROCm 5 and 6
// (KFD topology order). INVALID_ARGUMENT naming the variable when an entry is
// not a non-negative index (GPU UUIDs are not mapped) or `device` is past the
// end of a list.
absl::StatusOr<uint32_t> SmiIndex(int device, absl::string_view rocr_visible, absl::string_view hip_visible);

// SmiIndex with this process's ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES
// (CUDA_VISIBLE_DEVICES when HIP_VISIBLE_DEVICES is unset: HIP honours it too).
absl::StatusOr<uint32_t> SmiIndexFromEnvironment(int device);

// The sonames tried, in order: Debian 12's (ROCm 5.2), ROCm 5, 6 and 7's,
// then the development symlink.
std::vector<std::string> DefaultLibraryNames();

// One rsmi_frequencies_t decoded: the current and the highest supported
// frequency in Hz. ROCm 6 put a bool (has_deep_sleep) first and made the
// list 33 long, so the layout depends on the library's major version.
struct Frequencies {
  uint64_t current_hz = 0;
  uint64_t max_hz = 0;
};
// The library reports its own version (rsmi_version_get): 6 and later use
// the new layout. Debian's build of ROCm 5.2.3 reports 1.0.
bool UsesV6FrequencyLayout(uint32_t library_major);
// Bytes enough for either layout.
inline constexpr size_t kFrequenciesBufferBytes = 288;
// DATA_LOSS when the counts do not fit the layout (no frequency, or an index
// past the list).
absl::StatusOr<Frequencies> DecodeFrequencies(const unsigned char* raw, bool v6_layout);

// What one Read() got; a quantity the device does not report is empty.
struct Reading {
  std::optional<double> sys_clock_mhz;
  std::optional<double> mem_clock_mhz;
  std::optional<double> power_w;
  std::optional<double> temperature_c;  // junction (hotspot), else edge
};

class Smi {
 public:
  // dlopens the first of `names` that loads and has every entry point, and
  // initialises it. UNAVAILABLE when none loads (each name tried and why),
  // when rsmi_init fails (its status and text: typically no amdgpu driver,
  // i.e. no AMD GPU on this machine), or when it sees no GPU.
  static absl::StatusOr<std::unique_ptr<Smi>> Open(const std::vector<std::string>& names = DefaultLibraryNames());
  ~Smi();
  Smi(const Smi&) = delete;
  Smi& operator=(const Smi&) = delete;

  const std::string& library() const { return library_; }  // the name dlopen accepted
  std::string version() const;                             // "5.2.3" and the like

  absl::StatusOr<uint32_t> DeviceCount() const;
  // The current clocks, power and temperature of GPU `index`.
  Reading Read(uint32_t index) const;
  // The highest supported system (shader) and memory clocks, MHz.
  absl::StatusOr<Frequencies> SysClock(uint32_t index) const;
  absl::StatusOr<Frequencies> MemClock(uint32_t index) const;

  // "<what> failed (RSMI status N: <the library's text>)".
  std::string Describe(absl::string_view what, int status) const;

  struct Api;

 private:
  Smi() = default;
  absl::StatusOr<Frequencies> Clock(uint32_t index, int type) const;

  void* handle_ = nullptr;
  std::string library_;
  uint32_t major_ = 0, minor_ = 0, patch_ = 0;
  std::unique_ptr<Api> api_;
};

}  // namespace rocm_smi
}  // namespace kernelserve

#endif  // KERNELSERVE_COMMON_ROCM_SMI_H_
