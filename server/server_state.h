// What the services share: the backend, one worker per device, the registry
// and the memory accounting, and device health.
#ifndef KERNELSERVE_SERVER_SERVER_STATE_H_
#define KERNELSERVE_SERVER_SERVER_STATE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "kernels/api/backend.h"
#include "server/call_log.h"
#include "server/device_worker.h"
#include "server/registry.h"
#include "server/security/call_gate.h"

namespace kernelserve {

inline constexpr char kServerVersion[] = "0.1.0";
// Room left in a message for everything but the payload bytes.
inline constexpr int64_t kMessageOverheadBytes = 64 * 1024;

struct StateOptions {
  int queue_capacity = 64;
  int64_t max_message_bytes = 64 << 20;
  std::vector<int64_t> memory_limits;  // per device, bytes
  std::shared_ptr<security::CallGate> gate;  // auth and tenant limits; null: open
  // Which backends the binary has (DeviceService.List reports them) and the
  // line saying how --backend chose the one running.
  std::vector<BackendBuild> backend_builds;
  std::string backend_selection;
  bool reject_nonfinite = false;  // --reject_nonfinite: NaN/Inf inputs are INVALID_ARGUMENT
};

class ServerState {
 public:
  ServerState(Backend* backend, StateOptions options);
  ~ServerState();  // stops the workers

  Backend& backend() { return *backend_; }
  Registry& registry() { return registry_; }
  MemoryAccountant& accountant() { return accountant_; }
  DeviceWorker& worker(int device) { return *workers_[device]; }
  int device_count() const { return static_cast<int>(workers_.size()); }
  int64_t max_message_bytes() const { return options_.max_message_bytes; }
  const std::vector<BackendBuild>& backend_builds() const { return options_.backend_builds; }
  const std::string& backend_selection() const { return options_.backend_selection; }
  // Largest payload that fits in one message.
  int64_t max_payload_bytes() const;

  // First thing in every handler: token -> tenant, the tenant's request rate
  // and, for streams, its concurrent-stream limit (held while `Admission` lives).
  absl::StatusOr<security::CallGate::Admission> Admit(grpc::ServerContext* ctx, bool stream = false) {
    return gate_->Admit(*ctx, stream);
  }
  // The frame of a handler: one CallLog line, admission (Admit), then
  // body(&log) under CallLog::Run.
  template <typename Body>
  grpc::Status Serve(absl::string_view method, grpc::ServerContext* ctx, bool stream, Body&& body) {
    CallLog log(method, ctx, &calls_);
    return log.Run([&]() -> absl::Status {
      auto admission = Admit(ctx, stream);  // held for the call: the stream slot
      if (!admission.ok()) return admission.status();
      return body(&log);
    });
  }
  // Called after each request of a KernelService.Session with its method
  // ("Attention", ...), status code and time (the metrics, when on: the
  // interceptor sees the session as one call). Set before serving.
  using CallObserver = std::function<void(absl::string_view method, int code, absl::Duration elapsed)>;
  void SetCallObserver(CallObserver observer) { call_observer_ = std::move(observer); }
  void ObserveCall(absl::string_view method, int code, absl::Duration elapsed) const {
    if (call_observer_) call_observer_(method, code, elapsed);
  }
  // Tenant of a call ("" with authentication off); owner of what it creates.
  std::string TenantOf(grpc::ServerContext* ctx) const { return gate_->TenantOf(*ctx); }
  security::CallGate& gate() { return *gate_; }

  // INVALID_ARGUMENT when `device` is out of range, UNAVAILABLE when unhealthy.
  absl::Status CheckDevice(absl::string_view field, int device) const;
  // Runs fn on the device's worker (device_worker.h). A failure that leaves
  // the backend reporting the device unhealthy marks it unhealthy here.
  absl::Status RunOnDevice(int device, grpc::ServerContext* ctx, std::function<absl::Status()> fn,
                           TaskTiming* timing = nullptr,
                           DeviceWorker::Placement placement = DeviceWorker::Placement::kWorker);

  // Accounted device memory for `what`; call from a device task only.
  absl::Status Allocate(int device, const std::string& tenant, int64_t bytes, absl::string_view what,
                        Reservation* reservation, std::unique_ptr<DeviceMemory>* memory);
  // Device memory for bytes already reserved; call from a device task only.
  absl::StatusOr<std::unique_ptr<DeviceMemory>> AllocateReserved(int device, int64_t bytes,
                                                                 absl::string_view what);
  // Host memory a call keeps beyond the message in hand (staging, host
  // copies, the oracle's working set) counts like device memory: against the
  // device's limit and the tenant's quota, added to *held. RESOURCE_EXHAUSTED
  // naming `what` and the numbers when it does not fit; *held is unchanged then.
  absl::Status ChargeHost(int device, const std::string& tenant, int64_t bytes, absl::string_view what,
                          Reservation* held);
  bool reject_nonfinite() const { return options_.reject_nonfinite; }
  // --reject_nonfinite for a server-resident buffer: INVALID_ARGUMENT naming
  // `field` and the first NaN / Inf element (CheckFinite, tensor_proto.h).
  // The bytes pass through a small host window charged to `tenant`, so a
  // large buffer costs no more host memory than a small one. Call from a
  // device task only.
  absl::Status CheckBufferFinite(const Buffer& buffer, const std::string& tenant, absl::string_view field);

  bool healthy(int device) const;
  std::string health_reason(int device) const;
  void MarkUnhealthy(int device, const std::string& reason);
  // A health probe's verdict (server/device_health.h): `healthy` clears the
  // mark, otherwise `reason` replaces whatever reason the device had.
  void SetProbedHealth(int device, bool healthy, const std::string& reason);
  // The last health probe's verdict (DeviceService.List reports it).
  void SetHealthProbe(int device, std::string verdict);
  std::string health_probe(int device) const;
  // Draining (admin): CheckDevice refuses new work with UNAVAILABLE. An empty
  // reason returns the device to service.
  void SetDraining(int device, const std::string& reason);
  std::string draining_reason(int device) const;  // "" when not draining
  // Shutdown: CheckDevice refuses new work on every device with UNAVAILABLE;
  // downloads, frees and lists still run (results of running calls travel back).
  void BeginShutdown();
  // The calls in flight (the services' CallLogs count them).
  CallCounter& calls() { return calls_; }
  // Called (without locks held) whenever a device's health changes.
  void SetHealthListener(std::function<void()> listener);
  bool AnyHealthy() const;

  void StopWorkers();

 private:
  Backend* backend_;
  StateOptions options_;
  std::shared_ptr<security::CallGate> gate_;  // before accountant_: its tenant check uses it
  MemoryAccountant accountant_;  // outlives the registry's reservations
  Registry registry_;
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  CallObserver call_observer_;
  mutable absl::Mutex mu_;
  std::vector<std::string> unhealthy_reason_ ABSL_GUARDED_BY(mu_);  // "" = healthy
  std::vector<std::string> draining_reason_ ABSL_GUARDED_BY(mu_);   // "" = in service
  std::vector<std::string> health_probe_ ABSL_GUARDED_BY(mu_);      // "" = none ran
  std::function<void()> health_listener_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  CallCounter calls_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SERVER_STATE_H_
