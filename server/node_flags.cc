#include "server/node_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"

ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate chain; with --tls_key turns TLS on");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle; when set, clients must present a certificate it signed (mTLS); tenants may be "
          "bound to certificate identities in --tokens_file");
ABSL_FLAG(absl::Duration, tls_watch_interval, absl::Seconds(1),
          "how often a new connection may look for changed TLS files and reload them; 0: only on SIGHUP");
ABSL_FLAG(std::string, tokens_file, "",
          "file of 'tenant sha256hex [admin|revoked]' lines; turns bearer-token auth on "
          "(re-read when it changes; make lines with token_tool)");
ABSL_FLAG(std::string, limits_file, "",
          "per-tenant limits, 'tenant key=value ...' lines ('*' for everyone); see "
          "server/security/limits.h");
ABSL_FLAG(bool, insecure, false,
          "allow listening on a non-loopback address without TLS and token auth");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT of the Prometheus endpoint (GET /metrics); empty: off");
ABSL_FLAG(std::string, health_listen, "",
          "HOST:PORT of a plaintext port serving only grpc.health.v1 (Kubernetes gRPC probes "
          "cannot use TLS); empty: off");
ABSL_FLAG(int, cpu_devices, 1,
          "devices the cpu backend shows, each with its own worker and job queue; those beyond the first "
          "are simulated on the same host (to run placement across devices without a GPU)");
ABSL_FLAG(int, cpu_dma_latency_us, -1,
          "while serving, keep every CPU out of idle states that take longer than this many µs to leave "
          "(a Linux PM QoS request through /dev/cpu_dma_latency; needs root): 0 makes a call's thread wake-ups "
          "microseconds instead of tens to hundreds on an idle host, for more idle power; -1: off");
ABSL_FLAG(int64_t, tenant_max_device_memory_mb, 0,
          "per-tenant buffer + pool memory, MiB, all devices; 0: unlimited");
ABSL_FLAG(int64_t, tenant_max_queued_jobs, 0, "per-tenant queued benchmark jobs; 0: unlimited");
ABSL_FLAG(int64_t, tenant_max_running_jobs, 0, "per-tenant running benchmark jobs; 0: unlimited");
ABSL_FLAG(double, tenant_requests_per_second, 0, "per-tenant request rate; 0: unlimited");
ABSL_FLAG(int64_t, tenant_request_burst, 0,
          "per-tenant request burst; 0: max(1, --tenant_requests_per_second)");
ABSL_FLAG(int64_t, tenant_max_concurrent_streams, 0,
          "per-tenant open streaming calls (uploads, downloads, pool reads/writes); 0: unlimited");

namespace kernelserve {

void ApplyNodeFlags(ServerOptions* options) {
  security::NodeSecurityOptions& s = options->security;
  s.tls.cert = absl::GetFlag(FLAGS_tls_cert);
  s.tls.key = absl::GetFlag(FLAGS_tls_key);
  s.tls.client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  s.tls.watch_interval = absl::GetFlag(FLAGS_tls_watch_interval);
  s.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  s.limits_file = absl::GetFlag(FLAGS_limits_file);
  s.insecure = absl::GetFlag(FLAGS_insecure);
  s.limits.max_device_memory = absl::GetFlag(FLAGS_tenant_max_device_memory_mb) << 20;
  s.limits.max_queued_jobs = absl::GetFlag(FLAGS_tenant_max_queued_jobs);
  s.limits.max_running_jobs = absl::GetFlag(FLAGS_tenant_max_running_jobs);
  s.limits.requests_per_second = absl::GetFlag(FLAGS_tenant_requests_per_second);
  s.limits.request_burst = absl::GetFlag(FLAGS_tenant_request_burst);
  s.limits.max_concurrent_streams = absl::GetFlag(FLAGS_tenant_max_concurrent_streams);
  options->metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options->health_listen = absl::GetFlag(FLAGS_health_listen);
  options->cpu_devices = absl::GetFlag(FLAGS_cpu_devices);
  options->cpu_dma_latency_us = absl::GetFlag(FLAGS_cpu_dma_latency_us);
}

}  // namespace kernelserve
