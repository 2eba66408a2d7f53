#include "server/server.h"

#include <malloc.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "kernels/backends.h"
#include "server/bench/bench_service.h"
#include "server/bench/pg_job_store.h"
#include "server/device_health.h"
#include "server/metrics/grpc_metrics.h"
#include "server/node_setup.h"
#include "server/server_state.h"
#include "server/services.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace {

// After SIGTERM, how long no call may have run before gRPC stops: a buffer
// result's download follows its kernel call within this on any sane network.
constexpr absl::Duration kShutdownQuiet = absl::Milliseconds(250);

const char* const kServiceNames[] = {
    "kernelserve.v1.BufferService",
    "kernelserve.v1.PoolService",
    "kernelserve.v1.KernelService",
    "kernelserve.v1.DeviceService",
    "kernelserve.v1.BenchService",
};

constexpr int kMaxCpuDevices = 64;

std::string HostName() {
  char host[256] = {};
  return gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0' ? std::string(host) : std::string("localhost");
}

// host:port other nodes and users can reach this one at: the --listen host,
// or the host name where it listens on every address.
std::string AdvertisedAddress(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") host = HostName();
  return absl::StrCat(host, ":", port);
}

}  // namespace

void TuneHostAllocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's ceiling for this setting
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  // Small allocations mostly stay in each thread's tcache, without the lock.
  mallopt(M_ARENA_MAX, 1);
}

absl::StatusOr<std::unique_ptr<KernelServer>> KernelServer::Start(const ServerOptions& options) {
  BackendOptions backend_options;
  backend_options.cpu_threads = options.cpu_threads;
  if (options.cpu_devices < 1 || options.cpu_devices > kMaxCpuDevices) {
    return absl::InvalidArgumentError(absl::StrCat("--cpu_devices: expected 1..", kMaxCpuDevices,
                                                   " simulated cpu devices, got ", options.cpu_devices));
  }
  backend_options.cpu_devices = options.cpu_devices;
  std::string note;
  auto backend = CreateBackend(options.backend, backend_options, &note);
  if (!backend.ok()) {
    return absl::Status(backend.status().code(),
                        absl::StrCat("--backend=", options.backend, ": ", backend.status().message()));
  }
  if (!note.empty()) spdlog::info("{}", note);
  return Start(options, std::move(*backend), note);
}

absl::StatusOr<std::unique_ptr<KernelServer>> KernelServer::Start(const ServerOptions& options,
                                                                  std::unique_ptr<Backend> backend,
                                                                  std::string backend_note) {
  if (backend == nullptr) return absl::InvalidArgumentError("backend: null");
  if (options.max_message_mb < 1 || options.max_message_mb > 2047) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_mb: expected 1..2047 (gRPC's ceiling is 2 GB), got ", options.max_message_mb));
  }
  if (options.queue_capacity < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--queue_capacity: expected >= 1, got ", options.queue_capacity));
  }
  if (options.memory_limit_mb < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory_limit_mb: expected >= 0 (0: 90% of device memory), got ",
                     options.memory_limit_mb));
  }
  const double reprobe_s = options.bench.user_kernels.reprobe_interval_s;
  if (reprobe_s < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--user_kernel_reprobe_interval_s: expected >= 0 (0: off), got ", reprobe_s));
  }
  const int devices = backend->DeviceCount();
  if (devices < 1) {
    return absl::UnavailableError(absl::StrCat("backend ", backend->Name(), " has no devices"));
  }

  if (options.cpu_dma_latency_us < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cpu_dma_latency_us: expected -1 (off) or a latency of 0 µs or more, got ", options.cpu_dma_latency_us));
  }
  std::unique_ptr<CpuLatencyRequest> cpu_latency;
  if (options.cpu_dma_latency_us >= 0) {
    auto held = CpuLatencyRequest::Hold(options.cpu_dma_latency_us);
    if (!held.ok()) {
      return absl::Status(held.status().code(), absl::StrCat("--cpu_dma_latency_us=", options.cpu_dma_latency_us,
                                                             ": ", held.status().message()));
    }
    cpu_latency = std::make_unique<CpuLatencyRequest>(std::move(*held));
    spdlog::info("holding a CPU wake-up latency request of {} µs (--cpu_dma_latency_us)",
                 options.cpu_dma_latency_us);
  }

  auto node = SetUpNodeSecurity(options);
  if (!node.ok()) return node.status();

  std::unique_ptr<KernelServer> server(new KernelServer());
  server->cpu_latency_ = std::move(cpu_latency);
  server->backend_ = std::move(backend);
  StateOptions state_options;
  state_options.queue_capacity = options.queue_capacity;
  state_options.max_message_bytes = static_cast<int64_t>(options.max_message_mb) << 20;
  state_options.gate = node->gate;
  state_options.backend_builds = BuiltBackends();
  state_options.backend_selection =
      backend_note.empty() ? absl::StrCat("backend ", server->backend_->Name(), " (given to the server)")
                           : std::move(backend_note);
  state_options.reject_nonfinite = options.reject_nonfinite;
  for (int d = 0; d < devices; ++d) {
    int64_t limit = options.memory_limit_mb << 20;
    if (options.memory_limit_mb == 0) {
      const int64_t total = server->backend_->GetDeviceInfo(d).memory_total_bytes;
      limit = total > 0 ? total / 10 * 9 : INT64_MAX;
    }
    state_options.memory_limits.push_back(limit);
  }
  server->state_ = std::make_unique<ServerState>(server->backend_.get(), state_options);
  server->buffer_service_ = std::make_unique<BufferServiceImpl>(server->state_.get());
  server->pool_service_ = std::make_unique<PoolServiceImpl>(server->state_.get());
  server->kernel_service_ = std::make_unique<KernelServiceImpl>(server->state_.get());
  server->device_service_ = std::make_unique<DeviceServiceImpl>(server->state_.get());
  server->health_ = std::make_unique<DeviceHealthMonitor>(server->state_.get(), options.bench.user_kernels,
                                                          server->backend_->Name());
  server->device_service_->set_health_monitor(server->health_.get());
  absl::Status bench = server->StartBench(options);
  if (!bench.ok()) {
    server->state_->StopWorkers();
    server->shut_down_ = true;
    return bench;
  }

  // Keep gRPC initialized for the life of the process: otherwise the last
  // ~Server runs grpc_shutdown, which can wait ~10 s for the executor (seen
  // between tests and on SIGTERM exit).
  static const bool kGrpcKeptAlive = [] {
    grpc_init();
    return true;
  }();
  (void)kGrpcKeptAlive;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  server->credentials_ = node->credentials;
  server->tls_ = node->tls;
  builder.AddListeningPort(options.listen, node->credentials, &server->port_);
  // No SO_REUSEPORT: a second server on a port in use must fail to start, not share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Interceptors (metrics, undecodable requests); ports only where configured.
  server->endpoints_ = std::make_unique<NodeEndpoints>(&builder, !options.metrics_listen.empty());
  if (!options.metrics_listen.empty()) {
    metrics::Registry* registry = &server->endpoints_->registry();
    server->state_->SetCallObserver([registry](absl::string_view method, int code, absl::Duration elapsed) {
      metrics::RecordCall(registry, "kernelserve.v1.KernelService", method, code, elapsed);
    });
  }
  server->endpoints_->WatchJobs(server->bench_.get());
  // A message over the limit gets RESOURCE_EXHAUSTED from gRPC itself.
  builder.SetMaxReceiveMessageSize(options.max_message_mb << 20);
  builder.SetMaxSendMessageSize(options.max_message_mb << 20);
  builder.RegisterService(server->buffer_service_.get());
  builder.RegisterService(server->pool_service_.get());
  builder.RegisterService(server->kernel_service_.get());
  builder.RegisterService(server->device_service_.get());
  builder.RegisterService(server->bench_service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    server->state_->StopWorkers();
    server->shut_down_ = true;
    return absl::UnavailableError(absl::StrCat("--listen=", options.listen,
                                               ": could not listen there (address in use or invalid)"));
  }
  if (server->endpoints_ != nullptr) {
    absl::Status endpoints = server->endpoints_->Start(options.metrics_listen, options.health_listen,
                                                       server->state_.get(), server->backend_.get());
    if (!endpoints.ok()) return endpoints;  // the destructor shuts the server down
  }
  if (!server->bench_->node_id().empty()) {
    server->bench_->SetNodeAddress(AdvertisedAddress(options.listen, server->port_));
  }
  KernelServer* raw = server.get();
  server->state_->SetHealthListener([raw] {
    raw->UpdateHealth();
    raw->bench_->DeviceHealthChanged();  // a device back in service takes queued jobs
  });
  server->UpdateHealth();
  server->health_->StartPeriodic(reprobe_s);

  std::vector<std::string> names;
  for (int d = 0; d < devices; ++d) {
    const DeviceInfo info = server->backend_->GetDeviceInfo(d);
    names.push_back(absl::StrCat(d, ": ", info.name, " (", info.compute_units, " units, ",
                                 info.memory_total_bytes >> 20, " MiB, limit ",
                                 state_options.memory_limits[d] >> 20, " MiB)"));
  }
  spdlog::info("kernelserve {} listening on port {} ({}), backend {}, {} device(s): {}",
               kServerVersion, server->port_, options.listen, server->backend_->Name(), devices,
               absl::StrJoin(names, "; "));
  return server;
}

// Benchmark jobs (server/bench): a job's timing window is one task on the
// device's worker, so kernel calls wait while it runs.
absl::Status KernelServer::StartBench(const ServerOptions& options) {
  bench::BenchOptions bench_options = options.bench;
  bench_options.data_dir = options.data_dir;
  bench_options.server_version = kServerVersion;
  security::TenantLimiter* limiter = &state_->gate().limiter();
  bench_options.submit_check = [limiter](const std::string& tenant, int64_t queued) {
    return limiter->CheckSubmitJob(security::Tenant{tenant, false}, queued);
  };
  bench_options.start_check = [limiter](const std::string& tenant, int64_t running) {
    return limiter->CheckStartJob(security::Tenant{tenant, false}, running);
  };
  ServerState* state = state_.get();
  // A job's device memory counts like a buffer's: against the device's limit
  // and its tenant's max_device_memory, for as long as the job runs.
  bench_options.reserve_memory = [state](int device, const std::string& tenant, int64_t bytes,
                                         const std::string& what) -> absl::StatusOr<std::shared_ptr<void>> {
    absl::StatusOr<Reservation> r = state->accountant().Reserve(device, tenant, bytes, what);
    if (!r.ok()) return r.status();
    return std::shared_ptr<void>(std::make_shared<Reservation>(std::move(*r)));
  };
  bench_options.describe_buffer = [state](const std::string& id,
                                          const std::string& tenant) -> absl::StatusOr<TensorDesc> {
    auto buffer = state->registry().GetBuffer("buffer_id", id, tenant);
    if (!buffer.ok()) return buffer.status();
    return (*buffer)->desc;
  };
  if (options.reject_nonfinite) {
    bench_options.check_buffer = [state](const std::string& id, const std::string& tenant,
                                         const std::string& field) -> absl::Status {
      auto buffer = state->registry().GetBuffer("buffer_id", id, tenant);
      if (!buffer.ok()) return buffer.status();
      return state->RunOnDevice((*buffer)->device, nullptr,
                                [&] { return state->CheckBufferFinite(**buffer, tenant, field); });
    };
  }
  // Device health: jobs refuse an unhealthy device; a user kernel's worker
  // that died abnormally has its device probed (device_probe.h).
  bench_options.device_check = [state](int device) -> absl::Status {
    if (state->healthy(device)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("device ", device, " is unhealthy: ",
                                                      state->health_reason(device),
                                                      "; other devices still take jobs (leave spec.device unset)"));
  };
  DeviceHealthMonitor* health = health_.get();
  bench_options.probe_after_fault = [health](int device, const absl::Status& fault) {
    return health->AfterFault(device, fault);
  };
  auto runner = [state](int device, std::function<absl::Status()> fn) {
    return state->RunOnDevice(device, nullptr, std::move(fn));
  };
  auto reader = [state](const std::string& id, const std::string& tenant) -> absl::StatusOr<HostTensor> {
    auto buffer = state->registry().GetBuffer("buffer_id", id, tenant);
    if (!buffer.ok()) return buffer.status();
    HostTensor host((*buffer)->desc.dtype, (*buffer)->desc.shape);
    absl::Status st = state->RunOnDevice((*buffer)->device, nullptr, [&] {
      return state->backend().CopyToHost((*buffer)->device, host.bytes(), (*buffer)->memory->data(),
                                         static_cast<size_t>(host.num_bytes()));
    });
    if (!st.ok()) return st;
    return host;
  };
  KS_RETURN_IF_ERROR(SetUpFleet(&bench_options));
  auto scheduler = bench::BenchScheduler::Create(backend_.get(), bench_options, runner, reader);
  if (!scheduler.ok()) {
    return absl::Status(scheduler.status().code(),
                        absl::StrCat("benchmark jobs (--data_dir=", options.data_dir,
                                     "): ", scheduler.status().message()));
  }
  bench_ = std::move(*scheduler);
  auto admit = [state](grpc::ServerContext* ctx, bool stream, std::shared_ptr<void>* hold,
                       bench::BenchCaller* caller) -> absl::Status {
    auto admission = state->Admit(ctx, stream);
    if (!admission.ok()) return admission.status();
    // Admins act on every tenant's jobs (list, get, watch, cancel), but what
    // they submit is their own tenant's, like their buffers: a job must read
    // the buffers its submitter uploaded.
    caller->tenant = admission->tenant.name;
    caller->admin = admission->tenant.admin;
    *hold = std::make_shared<security::CallGate::Admission>(std::move(*admission));
    return absl::OkStatus();
  };
  bench_service_ = std::make_unique<bench::BenchServiceImpl>(bench_.get(), admit, state->max_payload_bytes());
  if (!bench_->node_id().empty()) {
    bench::BenchScheduler* scheduler_raw = bench_.get();
    device_service_->set_fleet_view([scheduler_raw](pb::ListDevicesResponse* resp) {
      resp->set_node_id(scheduler_raw->node_id());
      absl::StatusOr<std::vector<pb::FleetNode>> nodes = scheduler_raw->FleetNodes();
      if (!nodes.ok()) {
        spdlog::warn("DeviceService.List: the fleet's nodes: {}", nodes.status().ToString());
        return;
      }
      for (pb::FleetNode& n : *nodes) {
        if (n.node_id() != resp->node_id()) *resp->add_fleet() = std::move(n);
      }
    });
  }
  return absl::OkStatus();
}

// --job_store=postgres://...: the shared store, this node's id and how it
// describes its devices to the fleet.
absl::Status KernelServer::SetUpFleet(bench::BenchOptions* bench_options) {
  bench::FleetOptions& fleet = bench_options->fleet;
  if (fleet.job_store.empty()) return absl::OkStatus();
  if (fleet.heartbeat_ms < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fleet_heartbeat_ms: expected >= 1, got ", fleet.heartbeat_ms));
  }
  if (fleet.stale_ms < 2 * fleet.heartbeat_ms) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--fleet_stale_ms: expected at least two heartbeats (2 x --fleet_heartbeat_ms = ", 2 * fleet.heartbeat_ms,
        "), got ", fleet.stale_ms));
  }
  if (fleet.node_id.empty()) fleet.node_id = absl::StrCat(HostName(), ":", getpid());
  if (fleet.node_id.size() > 200) {
    return absl::InvalidArgumentError(absl::StrCat("--node_id: at most 200 bytes, got ", fleet.node_id.size()));
  }
  auto store = bench::OpenPgJobStore(fleet.job_store, "--job_store");
  if (!store.ok()) return store.status();
  fleet.store = std::move(*store);
  ServerState* state = state_.get();
  fleet.describe = [state](pb::FleetNode* node) {
    for (int d = 0; d < state->device_count(); ++d) FillDevice(state, d, node->add_devices());
  };
  spdlog::info("benchmark jobs: shared job store (postgresql), node {}", fleet.node_id);
  return absl::OkStatus();
}

void KernelServer::UpdateHealth() {
  if (server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  // One device is enough to serve; per-device state is in DeviceService.List.
  const bool serving = state_->AnyHealthy();
  health->SetServingStatus("", serving);
  for (const char* name : kServiceNames) health->SetServingStatus(name, serving);
}

absl::Status KernelServer::ReloadCredentials() {
  absl::Status tls = tls_ != nullptr ? tls_->Reload() : absl::OkStatus();
  absl::Status tokens = state_->gate().ReloadTokens();
  if (!tokens.ok()) spdlog::error("tokens reload failed; keeping the previous tokens: {}", tokens.ToString());
  if (!tls.ok()) return tls;
  return tokens;
}

int KernelServer::metrics_port() const { return endpoints_ ? endpoints_->metrics_port() : 0; }
int KernelServer::health_port() const { return endpoints_ ? endpoints_->health_port() : 0; }

WorkerStats KernelServer::worker_stats(int device) const { return state_->worker(device).stats(); }

void KernelServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  spdlog::info("shutting down: draining running calls (grace {})", absl::FormatDuration(grace));
  const absl::Time deadline = absl::Now() + grace;
  // New work is refused from here, before health says NOT_SERVING, so a client
  // that saw NOT_SERVING never gets new work accepted. Calls already running
  // finish, and the downloads of their buffer results (a second call right
  // after each) are still served until no call has run for a moment. Then
  // gRPC stops.
  state_->BeginShutdown();
  // Running benchmark jobs go back to the queue (persisted) instead of holding the drain.
  if (bench_ != nullptr) bench_->Shutdown();
  if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
  if (endpoints_ != nullptr) endpoints_->SetShuttingDown();
  if (!state_->calls().WaitQuiet(kShutdownQuiet, deadline)) {
    spdlog::warn("shutdown grace ran out with calls still in flight: cancelling them");
  }
  if (kernel_service_ != nullptr) kernel_service_->CancelSessions();
  server_->Shutdown(absl::ToChronoTime(deadline));
  state_->StopWorkers();
  spdlog::info("shut down");
}

void KernelServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

KernelServer::~KernelServer() {
  // The metrics and health ports stop first (their collectors read state_);
  // the interceptors' registry goes last: calls may finish, and their
  // interceptors be destroyed, until the gRPC server is gone.
  if (endpoints_ != nullptr) endpoints_->Stop();
  Shutdown(absl::ZeroDuration());
  server_.reset();
  bench_service_.reset();
  bench_.reset();
  health_.reset();
  state_.reset();
  endpoints_.reset();
}

}  // namespace kernelserve
