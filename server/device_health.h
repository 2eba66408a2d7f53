// Device health probes (server/user_kernels/device_probe.h) and what their
// verdicts do to the server's device state: after a user kernel's worker
// died abnormally, on an admin's request (DeviceService.Probe), and
// periodically for devices a failed probe took out of service
// (--user_kernel_reprobe_interval_s). A failed probe marks the device
// UNHEALTHY; a passing one returns it to service.
#ifndef KERNELSERVE_SERVER_DEVICE_HEALTH_H_
#define KERNELSERVE_SERVER_DEVICE_HEALTH_H_

#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server_context.h"
#include "server/server_state.h"
#include "server/user_kernels/builder.h"

namespace kernelserve {

class DeviceHealthMonitor {
 public:
  DeviceHealthMonitor(ServerState* state, user_kernels::UserKernelOptions options, std::string backend);
  ~DeviceHealthMonitor();  // stops the periodic re-probe
  DeviceHealthMonitor(const DeviceHealthMonitor&) = delete;
  DeviceHealthMonitor& operator=(const DeviceHealthMonitor&) = delete;

  // After a user kernel's worker died abnormally on `device` (`fault`: how):
  // the probe's status, for the job's notes; a failure marks the device
  // unhealthy.
  absl::Status AfterFault(int device, const absl::Status& fault);

  struct Verdict {
    bool passed = false;
    std::string text;  // as Device.health_probe
  };
  // Probes `device` now, as a task on its device worker (after whatever runs
  // there: a timing window is not disturbed), and records the verdict: a
  // pass returns the device to service, a failure marks it unhealthy with
  // the probe's reason. `why` says who asked ("requested by tenant
  // \"ops\""). INVALID_ARGUMENT "index: ..." for a device out of range;
  // FAILED_PRECONDITION when the backend itself reports the device
  // unhealthy (the server's own context: another process's probe cannot
  // repair it).
  absl::StatusOr<Verdict> Reprobe(int device, const std::string& why, grpc::ServerContext* ctx = nullptr);

  // Every `interval_s` seconds, re-probes each device that a failed probe
  // marked unhealthy. 0: off. Call once.
  void StartPeriodic(double interval_s);

 private:
  Verdict Probe(int device, const std::string& when_why);
  void PeriodicLoop(double interval_s);
  bool Stopping();

  ServerState* const state_;
  const user_kernels::UserKernelOptions options_;
  const std::string backend_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread periodic_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_DEVICE_HEALTH_H_
