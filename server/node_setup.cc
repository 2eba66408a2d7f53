#include "server/node_setup.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "kernels/api/backend.h"
#include "server/metrics/grpc_metrics.h"
#include "server/security/tls.h"
#include "server/server.h"
#include "server/server_state.h"

namespace kernelserve {

absl::StatusOr<NodeSecurity> SetUpNodeSecurity(const ServerOptions& options) {
  NodeSecurity node;
  auto gate = security::CallGate::Create(options.security, options.listen);
  if (!gate.ok()) return gate.status();
  node.gate = *std::move(gate);
  auto creds = security::ServerCredentialsFromFiles(options.security.tls);
  if (!creds.ok()) return creds.status();
  node.credentials = *std::move(creds);
  return node;
}

NodeMetrics::NodeMetrics(grpc::ServerBuilder* builder) {
  metrics::DeclareServerMetrics(&registry_);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<metrics::GrpcMetricsInterceptorFactory>(&registry_));
  builder->experimental().SetInterceptorCreators(std::move(creators));
}

absl::Status NodeMetrics::Start(const std::string& listen, ServerState* state, Backend* backend) {
  registry_.Set(metrics::kBuildInfo, {{"version", kServerVersion}, {"backend", backend->Name()}}, 1);
  registry_.AddCollector([state](metrics::Registry* r) {
    for (int d = 0; d < state->device_count(); ++d) {
      const metrics::Labels dev = {{"device", absl::StrCat(d)}};
      DeviceWorker& worker = state->worker(d);
      r->Set(metrics::kQueueDepth, dev, worker.queue_depth());
      r->Set(metrics::kQueueCapacity, dev, worker.queue_capacity());
      r->Set(metrics::kDeviceHealthy, dev, state->healthy(d) ? 1 : 0);
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
  auto http = metrics::HttpServer::Start(listen, &registry_);
  if (!http.ok()) {
    return absl::Status(http.status().code(),
                        absl::StrCat("--metrics_listen: ", http.status().message()));
  }
  http_ = *std::move(http);
  return absl::OkStatus();
}

void NodeMetrics::Stop() {
  if (http_) http_->Stop();
}

}  // namespace kernelserve
