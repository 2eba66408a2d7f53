// Shared-node wiring for KernelServer (DESIGN §5, issue 6), kept apart from
// the services: the call gate and credentials from ServerOptions::security;
// the Prometheus endpoint (--metrics_listen) with its collectors; and a
// plaintext grpc.health.v1 port (--health_listen) for Kubernetes' native gRPC
// probes, which cannot speak TLS. That port serves health and nothing else.
#ifndef KERNELSERVE_SERVER_NODE_SETUP_H_
#define KERNELSERVE_SERVER_NODE_SETUP_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics/http_server.h"
#include "server/metrics/metrics.h"
#include "server/security/call_gate.h"
#include "server/security/tls.h"

namespace grpc {
class Server;
class ServerBuilder;
class ServerCredentials;
}  // namespace grpc

namespace kernelserve {

class Backend;
class ServerState;
namespace bench {
class BenchScheduler;
}  // namespace bench
struct ServerOptions;

struct NodeSecurity {
  std::shared_ptr<security::CallGate> gate;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::shared_ptr<security::ServerTls> tls;  // null without TLS
};
// The listen rule, tokens, limits and TLS credentials, or why not.
absl::StatusOr<NodeSecurity> SetUpNodeSecurity(const ServerOptions& options);

class NodeEndpoints {
 public:
  // Declares the metric families and adds the server's interceptors to
  // `builder` (call before BuildAndStart): one that answers undecodable
  // requests INVALID_ARGUMENT instead of gRPC's bare INTERNAL, and the
  // call-counting one. Cheap: threads and ports start only in Start().
  // The call-counting interceptor only `with_metrics` (it costs a few µs a call).
  NodeEndpoints(grpc::ServerBuilder* builder, bool with_metrics);
  ~NodeEndpoints();

  // Starts what is configured (empty listen: off): the metrics collectors
  // over `state` and their HTTP endpoint, and the health port, whose status
  // follows state->AnyHealthy() (polled every 250 ms) until SetShuttingDown().
  absl::Status Start(const std::string& metrics_listen, const std::string& health_listen,
                     ServerState* state, Backend* backend);
  // Jobs queued and running per tenant, read at each scrape.
  void WatchJobs(bench::BenchScheduler* scheduler);
  // Health port answers NOT_SERVING from now on (draining).
  void SetShuttingDown();
  void Stop();

  metrics::Registry& registry() { return registry_; }
  int metrics_port() const { return http_ ? http_->port() : 0; }
  int health_port() const { return health_port_; }

 private:
  void PollHealth(ServerState* state);

  metrics::Registry registry_;
  std::unique_ptr<metrics::HttpServer> http_;
  std::unique_ptr<grpc::Server> health_server_;
  int health_port_ = 0;
  absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_NODE_SETUP_H_
