// The server's metric families (deploy/METRICS.md lists every one) and a gRPC
// server interceptor that counts every call by service, method and status
// code and times it, without touching the service handlers.
#ifndef KERNELSERVE_SERVER_METRICS_GRPC_METRICS_H_
#define KERNELSERVE_SERVER_METRICS_GRPC_METRICS_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/metrics/metrics.h"

namespace kernelserve {
namespace metrics {

inline constexpr char kCallsTotal[] = "kernelserve_grpc_calls_total";
inline constexpr char kCallSeconds[] = "kernelserve_grpc_call_duration_seconds";
inline constexpr char kCallsInFlight[] = "kernelserve_grpc_calls_in_flight";
inline constexpr char kQueueDepth[] = "kernelserve_device_queue_depth";
inline constexpr char kQueueCapacity[] = "kernelserve_device_queue_capacity";
inline constexpr char kDeviceHealthy[] = "kernelserve_device_healthy";
inline constexpr char kDeviceDraining[] = "kernelserve_device_draining";
inline constexpr char kDeviceMemoryUsed[] = "kernelserve_device_memory_used_bytes";
inline constexpr char kDeviceMemoryLimit[] = "kernelserve_device_memory_limit_bytes";
inline constexpr char kWorkerTasks[] = "kernelserve_device_worker_tasks_total";
inline constexpr char kTenantMemory[] = "kernelserve_tenant_device_memory_bytes";
inline constexpr char kJobsQueued[] = "kernelserve_jobs_queued";
inline constexpr char kJobsRunning[] = "kernelserve_jobs_running";
inline constexpr char kLimitRejections[] = "kernelserve_limit_rejections_total";
inline constexpr char kBuildInfo[] = "kernelserve_build_info";

// Declares every family above (and the process_* ones) in `registry`.
void DeclareServerMetrics(Registry* registry);

// "OK", "NOT_FOUND", ... for a grpc::StatusCode value.
const char* GrpcCodeName(int code);

// Counts and times one call as the interceptor does: `service` is the full
// name, `method` the method. For calls the interceptor does not see alone
// (each request of a KernelService.Session).
void RecordCall(Registry* registry, absl::string_view service, absl::string_view method, int code,
                absl::Duration elapsed);

class GrpcMetricsInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit GrpcMetricsInterceptorFactory(Registry* registry) : registry_(registry) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  Registry* registry_;
};

}  // namespace metrics
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_METRICS_GRPC_METRICS_H_
