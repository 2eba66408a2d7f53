#include "server/metrics/grpc_metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "grpcpp/support/interceptor.h"
#include "grpcpp/support/status.h"

namespace kernelserve {
namespace metrics {
namespace {

using grpc::experimental::InterceptionHookPoints;

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(Registry* registry, const char* full_method)
      : registry_(registry), start_(absl::Now()) {
    // "/kernelserve.v1.KernelService/Attention" -> service, method; the label
    // set is rendered once per call (the hot path takes rendered keys).
    absl::string_view m = full_method != nullptr ? full_method : "";
    if (!m.empty() && m[0] == '/') m.remove_prefix(1);
    const size_t slash = m.find('/');
    const std::string service(m.substr(0, slash));
    const std::string method = slash == absl::string_view::npos ? "" : std::string(m.substr(slash + 1));
    key_ = RenderLabels({{"service", service}, {"method", method}});
    registry_->AddRendered(kCallsInFlight, key_, +1);
  }
  ~MetricsInterceptor() override {
    // A call cancelled before it sent a status never reaches PRE_SEND_STATUS.
    if (!recorded_) Record(grpc::StatusCode::CANCELLED);
    registry_->AddRendered(kCallsInFlight, key_, -1);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  void Record(grpc::StatusCode code) {
    recorded_ = true;
    // key_ is {service="...",method="..."}: add the code inside the braces.
    registry_->IncRendered(kCallsTotal, absl::StrCat(absl::string_view(key_).substr(0, key_.size() - 1),
                                                     ",code=\"", GrpcCodeName(code), "\"}"));
    registry_->ObserveRendered(kCallSeconds, key_, absl::ToDoubleSeconds(absl::Now() - start_));
  }

  Registry* registry_;
  absl::Time start_;
  std::string key_;
  bool recorded_ = false;
};

}  // namespace

void RecordCall(Registry* registry, absl::string_view service, absl::string_view method, int code,
                absl::Duration elapsed) {
  const std::string key = RenderLabels({{"service", std::string(service)}, {"method", std::string(method)}});
  registry->IncRendered(kCallsTotal, absl::StrCat(absl::string_view(key).substr(0, key.size() - 1), ",code=\"",
                                                  GrpcCodeName(code), "\"}"));
  registry->ObserveRendered(kCallSeconds, key, absl::ToDoubleSeconds(elapsed));
}

const char* GrpcCodeName(int code) {
  static const char* const kNames[] = {
      "OK",           "CANCELLED",        "UNKNOWN",           "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",   "ALREADY_EXISTS",    "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",  "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",        "UNAVAILABLE",       "DATA_LOSS",
      "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return "UNKNOWN";
  return kNames[code];
}

void DeclareServerMetrics(Registry* r) {
  r->DeclareCounter(kCallsTotal, "gRPC calls finished, by service, method and status code.");
  r->DeclareHistogram(kCallSeconds, "gRPC call latency in seconds (server side, whole call).",
                      LatencyBuckets());
  r->DeclareGauge(kCallsInFlight, "gRPC calls in progress, by service and method.");
  r->DeclareGauge(kQueueDepth, "Calls waiting in a device worker's queue.");
  r->DeclareGauge(kQueueCapacity, "Capacity of a device worker's queue.");
  r->DeclareGauge(kDeviceHealthy, "1 when the device serves calls, 0 when marked unhealthy.");
  r->DeclareGauge(kDeviceDraining, "1 while an admin drains the device (new work refused).");
  r->DeclareGauge(kDeviceMemoryUsed, "Accounted device memory held by buffers and pools, bytes.");
  r->DeclareGauge(kDeviceMemoryLimit, "Device memory accounting limit, bytes.");
  r->DeclareCounter(kWorkerTasks,
                    "Device worker tasks by outcome: run, rejected (queue full), dropped "
                    "(deadline passed or cancelled while queued).");
  r->DeclareGauge(kTenantMemory, "Accounted device memory held by a tenant's buffers and pools, bytes.");
  r->DeclareGauge(kJobsQueued, "Benchmark jobs waiting, by tenant.");
  r->DeclareGauge(kJobsRunning, "Benchmark jobs running, by tenant.");
  r->DeclareCounter(kLimitRejections, "Requests refused with RESOURCE_EXHAUSTED by a per-tenant limit, by limit.");
  r->DeclareGauge(kBuildInfo, "Always 1; labels carry the server version and backend.");
  AddProcessCollector(r);
}

grpc::experimental::Interceptor* GrpcMetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new MetricsInterceptor(registry_, info->method());
}

}  // namespace metrics
}  // namespace kernelserve
