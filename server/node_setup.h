// Shared-node wiring for KernelServer (DESIGN §5, issue 6), kept apart from
// the services: the call gate and credentials from ServerOptions::security,
// and the Prometheus endpoint (--metrics_listen) with its collectors.
#ifndef KERNELSERVE_SERVER_NODE_SETUP_H_
#define KERNELSERVE_SERVER_NODE_SETUP_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/metrics/http_server.h"
#include "server/metrics/metrics.h"
#include "server/security/call_gate.h"

namespace grpc {
class ServerBuilder;
class ServerCredentials;
}  // namespace grpc

namespace kernelserve {

class Backend;
class ServerState;
struct ServerOptions;

struct NodeSecurity {
  std::shared_ptr<security::CallGate> gate;
  std::shared_ptr<grpc::ServerCredentials> credentials;
};
// The listen rule, tokens, limits and TLS credentials, or why not.
absl::StatusOr<NodeSecurity> SetUpNodeSecurity(const ServerOptions& options);

class NodeMetrics {
 public:
  // Declares the metric families and adds the call-counting interceptor to
  // `builder` (call before BuildAndStart).
  explicit NodeMetrics(grpc::ServerBuilder* builder);
  // Installs the collectors over `state` and starts the HTTP endpoint.
  absl::Status Start(const std::string& listen, ServerState* state, Backend* backend);
  void Stop();

  metrics::Registry& registry() { return registry_; }
  int port() const { return http_ ? http_->port() : 0; }

 private:
  metrics::Registry registry_;
  std::unique_ptr<metrics::HttpServer> http_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_NODE_SETUP_H_
