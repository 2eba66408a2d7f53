#include "server/server_state.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/input_checks.h"
#include "server/tensor_proto.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace {

// Host window through which CheckBufferFinite reads a buffer.
constexpr int64_t kFiniteScanBytes = 4 << 20;

}  // namespace

ServerState::ServerState(Backend* backend, StateOptions options)
    : backend_(backend),
      options_(std::move(options)),
      gate_(options_.gate ? options_.gate : std::make_shared<security::CallGate>()),
      accountant_(options_.memory_limits) {
  accountant_.SetTenantCheck([gate = gate_.get()](const std::string& tenant, int64_t held, int64_t more) {
    return gate->limiter().CheckMemory(security::Tenant{tenant, false}, held, more);
  });
  const int n = backend_->DeviceCount();
  for (int d = 0; d < n; ++d) {
    workers_.push_back(std::make_unique<DeviceWorker>(d, options_.queue_capacity));
  }
  absl::MutexLock lock(&mu_);
  unhealthy_reason_.assign(n, "");
  draining_reason_.assign(n, "");
  health_probe_.assign(n, "");
  for (int d = 0; d < n; ++d) {
    DeviceInfo info = backend_->GetDeviceInfo(d);
    if (!info.healthy) {
      unhealthy_reason_[d] = info.health_reason.empty() ? "unhealthy at start" : info.health_reason;
    }
  }
}

ServerState::~ServerState() { StopWorkers(); }

void ServerState::StopWorkers() {
  for (auto& w : workers_) w->Stop();
}

int64_t ServerState::max_payload_bytes() const {
  return std::max<int64_t>(4096, options_.max_message_bytes - kMessageOverheadBytes);
}

absl::Status ServerState::CheckDevice(absl::string_view field, int device) const {
  if (device < 0 || device >= device_count()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": expected a device index in [0, ",
                                                   device_count(), "), got ", device));
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the server is shutting down; use another server");
  if (!unhealthy_reason_[device].empty()) {
    return absl::UnavailableError(
        absl::StrCat("device ", device, " is unhealthy: ", unhealthy_reason_[device]));
  }
  if (!draining_reason_[device].empty()) {
    return absl::UnavailableError(absl::StrCat("device ", device, " is draining (",
                                               draining_reason_[device], "); use another device"));
  }
  return absl::OkStatus();
}

void ServerState::BeginShutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
}

void ServerState::SetDraining(int device, const std::string& reason) {
  // The reason is an admin's free text that every refused call quotes.
  std::string kept = reason.size() <= kMaxKeptStringBytes
                         ? reason
                         : absl::StrCat(reason.substr(0, kMaxKeptStringBytes), "...");
  absl::MutexLock lock(&mu_);
  if (device >= 0 && device < static_cast<int>(draining_reason_.size())) draining_reason_[device] = std::move(kept);
}

std::string ServerState::draining_reason(int device) const {
  absl::MutexLock lock(&mu_);
  return device >= 0 && device < static_cast<int>(draining_reason_.size()) ? draining_reason_[device] : "";
}

absl::Status ServerState::RunOnDevice(int device, grpc::ServerContext* ctx,
                                      std::function<absl::Status()> fn, TaskTiming* timing,
                                      DeviceWorker::Placement placement) {
  absl::Status status = workers_[device]->Run(ctx, std::move(fn), timing, placement);
  if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument &&
      status.code() != absl::StatusCode::kNotFound &&
      status.code() != absl::StatusCode::kResourceExhausted &&
      status.code() != absl::StatusCode::kDeadlineExceeded &&
      status.code() != absl::StatusCode::kCancelled &&
      status.code() != absl::StatusCode::kUnimplemented) {
    const DeviceInfo info = backend_->GetDeviceInfo(device);
    if (!info.healthy) {
      MarkUnhealthy(device, info.health_reason.empty() ? std::string(status.message())
                                                       : info.health_reason);
    }
  }
  return status;
}

absl::Status ServerState::Allocate(int device, const std::string& tenant, int64_t bytes,
                                   absl::string_view what, Reservation* reservation,
                                   std::unique_ptr<DeviceMemory>* memory) {
  auto r = accountant_.Reserve(device, tenant, bytes, what);
  if (!r.ok()) return r.status();
  auto m = AllocateReserved(device, bytes, what);
  if (!m.ok()) return m.status();
  *reservation = std::move(*r);
  *memory = std::move(*m);
  return absl::OkStatus();
}

absl::Status ServerState::ChargeHost(int device, const std::string& tenant, int64_t bytes,
                                     absl::string_view what, Reservation* held) {
  auto r = accountant_.Reserve(device, tenant, bytes, what);
  if (!r.ok()) return r.status();
  held->Merge(std::move(*r));
  return absl::OkStatus();
}

absl::Status ServerState::CheckBufferFinite(const Buffer& buffer, const std::string& tenant,
                                            absl::string_view field) {
  const TensorDesc& desc = buffer.desc;
  if (!HasNonFinite(desc.dtype)) return absl::OkStatus();
  const int64_t elements = desc.num_elements();
  const int64_t element_bytes = NumBytes(desc.dtype, 1);
  const int64_t window = std::min(elements, kFiniteScanBytes / element_bytes);
  Reservation hold;
  KS_RETURN_IF_ERROR(ChargeHost(buffer.device, tenant, window * element_bytes,
                                absl::StrCat("non-finite scan of ", field), &hold));
  std::vector<uint8_t> host(static_cast<size_t>(window * element_bytes));
  const auto* src = static_cast<const uint8_t*>(buffer.memory->data());
  for (int64_t first = 0; first < elements; first += window) {
    const int64_t n = std::min(window, elements - first);
    KS_RETURN_IF_ERROR(backend_->CopyToHost(buffer.device, host.data(), src + first * element_bytes,
                                            static_cast<size_t>(n * element_bytes)));
    KS_RETURN_IF_ERROR(CheckFinite(field, desc, host.data(), first, n));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceMemory>> ServerState::AllocateReserved(int device, int64_t bytes,
                                                                            absl::string_view what) {
  // Backends may not like zero-byte allocations; every object has at least one byte.
  auto m = backend_->Allocate(device, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  if (!m.ok()) {
    return absl::Status(m.status().code(),
                        absl::StrCat("allocating ", bytes, " bytes for ", what, " on device ", device,
                                     ": ", m.status().message()));
  }
  return std::move(*m);
}

bool ServerState::healthy(int device) const {
  absl::MutexLock lock(&mu_);
  return unhealthy_reason_[device].empty();
}

std::string ServerState::health_reason(int device) const {
  absl::MutexLock lock(&mu_);
  return unhealthy_reason_[device];
}

bool ServerState::AnyHealthy() const {
  absl::MutexLock lock(&mu_);
  for (const auto& r : unhealthy_reason_) {
    if (r.empty()) return true;
  }
  return false;
}

void ServerState::MarkUnhealthy(int device, const std::string& reason) {
  std::function<void()> listener;
  {
    absl::MutexLock lock(&mu_);
    if (!unhealthy_reason_[device].empty()) return;
    unhealthy_reason_[device] = reason.empty() ? "device fault" : reason;
    listener = health_listener_;
  }
  spdlog::error("device {} marked unhealthy: {}", device, reason);
  if (listener) listener();
}

void ServerState::SetProbedHealth(int device, bool healthy, const std::string& reason) {
  std::function<void()> listener;
  {
    absl::MutexLock lock(&mu_);
    const std::string now = healthy ? "" : reason.empty() ? "failed its health probe" : reason;
    if (unhealthy_reason_[device] == now) return;
    const bool changed = unhealthy_reason_[device].empty() != now.empty();
    unhealthy_reason_[device] = now;
    if (changed) listener = health_listener_;
  }
  if (healthy) {
    spdlog::info("device {} passed its health probe: back in service", device);
  } else {
    spdlog::error("device {} unhealthy: {}", device, reason);
  }
  if (listener) listener();
}

void ServerState::SetHealthProbe(int device, std::string verdict) {
  absl::MutexLock lock(&mu_);
  health_probe_[device] = std::move(verdict);
}

std::string ServerState::health_probe(int device) const {
  absl::MutexLock lock(&mu_);
  return health_probe_[device];
}

void ServerState::SetHealthListener(std::function<void()> listener) {
  absl::MutexLock lock(&mu_);
  health_listener_ = std::move(listener);
}

}  // namespace kernelserve
