#include "server/device_health.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/user_kernels/device_probe.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace {

std::string Now() { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()); }

}  // namespace

DeviceHealthMonitor::DeviceHealthMonitor(ServerState* state, user_kernels::UserKernelOptions options,
                                         std::string backend)
    : state_(state), options_(std::move(options)), backend_(std::move(backend)) {}

DeviceHealthMonitor::~DeviceHealthMonitor() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (periodic_.joinable()) periodic_.join();
}

absl::Status DeviceHealthMonitor::AfterFault(int device, const absl::Status& fault) {
  const absl::Status probe = user_kernels::ProbeDevice(options_, backend_, device);
  const std::string after(fault.message().substr(0, 300));
  state_->SetHealthProbe(device, absl::StrCat(probe.ok() ? "passed" : "failed", " at ", Now(), " after: ", after,
                                              probe.ok() ? "" : absl::StrCat("; ", probe.message())));
  if (!probe.ok()) {
    state_->MarkUnhealthy(device, absl::StrCat("failed its health probe after a user kernel's worker fault (", after,
                                               "): ", probe.message()));
  }
  return probe;
}

DeviceHealthMonitor::Verdict DeviceHealthMonitor::Probe(int device, const std::string& why) {
  const absl::Status probe = user_kernels::ProbeDevice(options_, backend_, device);
  Verdict v;
  v.passed = probe.ok();
  v.text = absl::StrCat(v.passed ? "passed" : "failed", " at ", Now(), " (", why, ")",
                        v.passed ? "" : absl::StrCat(": ", probe.message()));
  state_->SetHealthProbe(device, v.text);
  state_->SetProbedHealth(device, v.passed,
                          absl::StrCat("failed its health probe (", why, "): ", probe.message()));
  return v;
}

absl::StatusOr<DeviceHealthMonitor::Verdict> DeviceHealthMonitor::Reprobe(int device, const std::string& why,
                                                                          grpc::ServerContext* ctx) {
  if (device < 0 || device >= state_->device_count()) {
    return absl::InvalidArgumentError(
        absl::StrCat("index: expected a device index in [0, ", state_->device_count(), "), got ", device));
  }
  const DeviceInfo info = state_->backend().GetDeviceInfo(device);
  if (!info.healthy) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device ", device, ": the server's own ", backend_, " context reports it unhealthy (",
        info.health_reason.empty() ? state_->health_reason(device) : info.health_reason,
        "); a probe in another process cannot repair that: restart the server"));
  }
  Verdict v;
  const absl::Status ran = state_->RunOnDevice(device, ctx, [&] {
    v = Probe(device, why);
    return absl::OkStatus();
  });
  if (!ran.ok()) return ran;
  return v;
}

bool DeviceHealthMonitor::Stopping() {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void DeviceHealthMonitor::StartPeriodic(double interval_s) {
  if (interval_s <= 0 || periodic_.joinable()) return;
  periodic_ = std::thread([this, interval_s] { PeriodicLoop(interval_s); });
}

void DeviceHealthMonitor::PeriodicLoop(double interval_s) {
  const std::string why = absl::StrFormat("periodic re-probe, every %g s (--user_kernel_reprobe_interval_s)",
                                          interval_s);
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Seconds(interval_s))) break;
    mu_.Unlock();
    for (int d = 0; d < state_->device_count() && !Stopping(); ++d) {
      // Only what a probe took out of service: the backend's own verdict
      // (a sticky error in the server's context) is not a probe's to lift.
      if (state_->healthy(d) || !state_->backend().GetDeviceInfo(d).healthy) continue;
      absl::StatusOr<Verdict> v = Reprobe(d, why);
      if (!v.ok()) {
        spdlog::warn("device {}: {} did not run: {}", d, why, v.status().ToString());
      } else if (!v->passed) {
        spdlog::warn("device {} failed its {}; still unhealthy", d, why);
      }
    }
    mu_.Lock();
  }
}

}  // namespace kernelserve
