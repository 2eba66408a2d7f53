#include "server/node_setup.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/interceptor.h"
#include "grpcpp/support/server_interceptor.h"
#include "kernels/api/backend.h"
#include "kernelserve/v1/bench.pb.h"
#include "server/bench/scheduler.h"
#include "server/metrics/grpc_metrics.h"
#include "server/security/tls.h"
#include "server/server.h"
#include "server/server_state.h"

namespace kernelserve {

namespace pb = ::kernelserve::v1;

absl::StatusOr<NodeSecurity> SetUpNodeSecurity(const ServerOptions& options) {
  NodeSecurity node;
  auto gate = security::CallGate::Create(options.security, options.listen);
  if (!gate.ok()) return gate.status();
  node.gate = *std::move(gate);
  if (security::TlsEnabled(options.security.tls)) {
    auto tls = security::ServerTls::Load(options.security.tls);
    if (!tls.ok()) return tls.status();
    node.tls = *std::move(tls);
    node.credentials = node.tls->credentials();
    return node;
  }
  auto creds = security::ServerCredentialsFromFiles(options.security.tls);
  if (!creds.ok()) return creds.status();
  node.credentials = *std::move(creds);
  return node;
}

namespace {

// The names the main server reports health for (server.cc), mirrored here.
const char* const kHealthNames[] = {"", "kernelserve.v1.BufferService", "kernelserve.v1.PoolService",
                                    "kernelserve.v1.KernelService", "kernelserve.v1.DeviceService",
                                    "kernelserve.v1.BenchService"};

// gRPC answers a request it cannot decode with INTERNAL and no message (its
// protobuf deserializer's status). That is the client's fault, not the
// server's: answer INVALID_ARGUMENT saying so, so INTERNAL keeps meaning a
// server bug (and the fuzz target can treat it as one).
class DecodeErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      undecodable_ = true;
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (status.error_code() == grpc::StatusCode::INTERNAL && status.error_message().empty()) {
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            undecodable_ ? "request: not a valid protobuf message of the method's request type"
                         : "request: could not be decoded"));
      }
    }
    methods->Proceed();
  }

 private:
  bool undecodable_ = false;
};

class DecodeErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo*) override {
    return new DecodeErrorInterceptor;
  }
};

}  // namespace

NodeEndpoints::NodeEndpoints(grpc::ServerBuilder* builder, bool with_metrics) {
  metrics::DeclareServerMetrics(&registry_);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<DecodeErrorInterceptorFactory>());
  if (with_metrics) {
    creators.push_back(std::make_unique<metrics::GrpcMetricsInterceptorFactory>(&registry_));
  }
  builder->experimental().SetInterceptorCreators(std::move(creators));
}

NodeEndpoints::~NodeEndpoints() { Stop(); }

absl::Status NodeEndpoints::Start(const std::string& metrics_listen, const std::string& health_listen,
                                  ServerState* state, Backend* backend) {
  if (!health_listen.empty()) {
    // A server with no services of its own: only gRPC's default health
    // service (enabled process-wide by server.cc), over plaintext.
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(health_listen, grpc::InsecureServerCredentials(), &health_port_);
    health_server_ = builder.BuildAndStart();
    if (health_server_ == nullptr || health_port_ == 0 ||
        health_server_->GetHealthCheckService() == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("--health_listen=", health_listen, ": could not listen there"));
    }
    PollHealth(state);  // the first status before anyone can ask
    poller_ = std::thread([this, state] {
      absl::MutexLock lock(&mu_);
      while (!stop_) {
        mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(250));
        if (stop_) break;
        mu_.Unlock();
        PollHealth(state);
        mu_.Lock();
      }
    });
  }
  if (metrics_listen.empty()) return absl::OkStatus();
  registry_.Set(metrics::kBuildInfo, {{"version", kServerVersion}, {"backend", backend->Name()}}, 1);
  registry_.AddCollector([state](metrics::Registry* r) {
    for (int d = 0; d < state->device_count(); ++d) {
      const metrics::Labels dev = {{"device", absl::StrCat(d)}};
      DeviceWorker& worker = state->worker(d);
      r->Set(metrics::kQueueDepth, dev, worker.queue_depth());
      r->Set(metrics::kQueueCapacity, dev, worker.queue_capacity());
      r->Set(metrics::kDeviceHealthy, dev, state->healthy(d) ? 1 : 0);
      r->Set(metrics::kDeviceDraining, dev, state->draining_reason(d).empty() ? 0 : 1);
      r->Set(metrics::kDeviceMemoryUsed, dev, static_cast<double>(state->accountant().used(d)));
      r->Set(metrics::kDeviceMemoryLimit, dev, static_cast<double>(state->accountant().limit(d)));
      const WorkerStats s = worker.stats();
      const std::pair<const char*, int64_t> outcomes[] = {
          {"run", s.completed},
          {"rejected_queue_full", s.rejected_full},
          {"dropped_deadline", s.dropped_deadline},
          {"dropped_cancelled", s.dropped_cancelled}};
      for (const auto& [outcome, n] : outcomes) {
        r->SetCounter(metrics::kWorkerTasks, {{"device", absl::StrCat(d)}, {"outcome", outcome}},
                      static_cast<double>(n));
      }
    }
    r->Clear(metrics::kTenantMemory);
    for (const auto& [tenant, bytes] : state->accountant().tenant_usage()) {
      r->Set(metrics::kTenantMemory, {{"tenant", tenant}}, static_cast<double>(bytes));
    }
    for (const auto& [limit, n] : state->gate().limiter().rejections()) {
      r->SetCounter(metrics::kLimitRejections, {{"limit", limit}}, static_cast<double>(n));
    }
  });
  auto http = metrics::HttpServer::Start(metrics_listen, &registry_);
  if (!http.ok()) {
    return absl::Status(http.status().code(),
                        absl::StrCat("--metrics_listen: ", http.status().message()));
  }
  http_ = *std::move(http);
  return absl::OkStatus();
}

void NodeEndpoints::WatchJobs(bench::BenchScheduler* scheduler) {
  if (scheduler == nullptr) return;
  registry_.AddCollector([scheduler](metrics::Registry* r) {
    pb::ListBenchRequest request;
    request.add_states(pb::JOB_QUEUED);
    request.add_states(pb::JOB_RUNNING);
    request.set_limit(1 << 20);
    request.set_summary(true);
    std::map<std::string, std::pair<int64_t, int64_t>> counts;  // tenant -> queued, running
    for (const pb::BenchJob& job : scheduler->List(request)) {
      auto& c = counts[job.tenant()];
      (job.state() == pb::JOB_QUEUED ? c.first : c.second) += 1;
    }
    r->Clear(metrics::kJobsQueued);
    r->Clear(metrics::kJobsRunning);
    for (const auto& [tenant, c] : counts) {
      r->Set(metrics::kJobsQueued, {{"tenant", tenant}}, static_cast<double>(c.first));
      r->Set(metrics::kJobsRunning, {{"tenant", tenant}}, static_cast<double>(c.second));
    }
  });
}

void NodeEndpoints::PollHealth(ServerState* state) {
  bool serving;
  {
    absl::MutexLock lock(&mu_);
    serving = !shutting_down_;
  }
  serving = serving && state->AnyHealthy();
  grpc::HealthCheckServiceInterface* health = health_server_->GetHealthCheckService();
  for (const char* name : kHealthNames) health->SetServingStatus(name, serving);
}

void NodeEndpoints::SetShuttingDown() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  if (health_server_ != nullptr) health_server_->GetHealthCheckService()->SetServingStatus(false);
}

void NodeEndpoints::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (poller_.joinable()) poller_.join();
  if (health_server_ != nullptr) {
    health_server_->Shutdown(std::chrono::system_clock::now());
    health_server_.reset();
  }
  if (http_) http_->Stop();
}

}  // namespace kernelserve
