// What every GPU backend does the same way with its devices: answer
// GetDeviceInfo with the health it tracks, refuse an index it does not have,
// and refuse a device after a fault left it unusable. Plain C++ (no vendor
// runtime), so that the CUDA and HIP backends share it.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_DEVICE_HEALTH_H_
#define KERNELSERVE_KERNELS_GPU_COMMON_DEVICE_HEALTH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/api/backend.h"

namespace kernelserve {
namespace gpu {

// Healthy until the first fault; then unusable for good, with that fault's
// reason (later ones are its consequences). Shared between the threads that
// use the device.
class DeviceHealth {
 public:
  // `info` with its health fields filled in.
  DeviceInfo Report(DeviceInfo info) const {
    absl::MutexLock lock(&mu_);
    info.healthy = healthy_;
    info.health_reason = reason_;
    return info;
  }

  // The first reason stays.
  void MarkUnhealthy(absl::string_view reason) {
    absl::MutexLock lock(&mu_);
    if (!healthy_) return;
    healthy_ = false;
    reason_ = std::string(reason);
  }

  // OK, or UNAVAILABLE "<vendor> device <index> is unhealthy: <reason>".
  absl::Status CheckHealthy(absl::string_view vendor, int index) const {
    absl::MutexLock lock(&mu_);
    if (healthy_) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(vendor, " device ", index, " is unhealthy: ", reason_));
  }

 private:
  mutable absl::Mutex mu_;
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;
  std::string reason_ ABSL_GUARDED_BY(mu_);
};

// A backend's devices: D has `DeviceInfo info` and `DeviceHealth health`.
template <typename D>
DeviceInfo ReportDevice(const std::vector<std::unique_ptr<D>>& devices, absl::string_view backend, int device) {
  if (device < 0 || device >= static_cast<int>(devices.size())) return NoSuchDevice(backend, device);
  const D& d = *devices[device];
  return d.health.Report(d.info);
}

// The device at `device` if there is one and it is healthy: INVALID_ARGUMENT
// "device: expected 0..<n-1><range_note>, got <device>", or the health's
// UNAVAILABLE.
template <typename D>
absl::StatusOr<D*> HealthyDevice(const std::vector<std::unique_ptr<D>>& devices, absl::string_view vendor,
                                 int device, absl::string_view range_note = "") {
  const int n = static_cast<int>(devices.size());
  if (device < 0 || device >= n) {
    return absl::InvalidArgumentError(absl::StrCat("device: expected 0..", n - 1, range_note, ", got ", device));
  }
  D* d = devices[device].get();
  const absl::Status healthy = d->health.CheckHealthy(vendor, device);
  if (!healthy.ok()) return healthy;
  return d;
}

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_DEVICE_HEALTH_H_
