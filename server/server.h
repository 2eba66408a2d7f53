// The kernelserve gRPC server: services over one backend, started in-process
// (tests listen on 127.0.0.1:0 and read port()) or from main.cc.
#ifndef KERNELSERVE_SERVER_SERVER_H_
#define KERNELSERVE_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/api/backend.h"
#include "server/cpu_latency.h"
#include "server/bench/scheduler.h"
#include "server/device_worker.h"
#include "server/security/call_gate.h"
#include "server/security/tls.h"

namespace grpc {
class Server;
class ServerCredentials;
}  // namespace grpc

namespace kernelserve {

class ServerState;
class BufferServiceImpl;
class PoolServiceImpl;
class KernelServiceImpl;
class DeviceServiceImpl;
namespace bench {
class BenchServiceImpl;
}  // namespace bench
class NodeEndpoints;
class DeviceHealthMonitor;

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";  // HOST:PORT; port 0 picks a free one
  std::string backend = "auto";            // auto | cpu | cuda | hip
  int max_message_mb = 64;                 // receive and send limit per gRPC message
  int queue_capacity = 64;                 // waiting calls per device worker
  int cpu_threads = 0;                     // CPU backend threads; 0: all hardware threads
  int cpu_devices = 1;                     // CPU backend devices (--cpu_devices; simulated beyond 1)
  int64_t memory_limit_mb = 0;             // per device; 0: 90% of device memory
  std::string data_dir;                    // holds bench.db, the benchmark jobs database
  // NaN/Inf in an op's float inputs or a pool write's rows: INVALID_ARGUMENT
  // naming the tensor and the first such element.
  bool reject_nonfinite = false;
  bench::BenchOptions bench;               // benchmark jobs (flags: server/bench/bench_flags.cc)
  // Shared nodes: TLS, tokens, per-tenant limits (server/node_flags.cc has the flags).
  security::NodeSecurityOptions security;
  std::string metrics_listen;  // HOST:PORT of the Prometheus /metrics endpoint; empty: off
  std::string health_listen;   // HOST:PORT of a plaintext grpc.health.v1-only port (k8s probes)
  // >= 0: hold a CPU wake-up latency request of this many µs while serving
  // (server/cpu_latency.h); -1: leave the host's idle states alone.
  int cpu_dma_latency_us = -1;
};

// Process-wide malloc settings for a process that serves (kernelserve's main
// and the loopback benchmark): messages of up to 32 MiB come from the heap,
// freed heap memory is kept (up to 128 MiB at the top) instead of being
// returned to the kernel after every chunk and faulted in again by the next,
// and every thread allocates from one arena, so the buffers one thread frees
// (gRPC's read slices, a message's bytes) are the next thread's: with an
// arena per thread each heap grew into fresh pages of its own. Page faults
// were most of a transfer's time (bench/NOTES.md).
void TuneHostAllocator();

class KernelServer {
 public:
  // Creates the backend named in options.backend and starts serving.
  static absl::StatusOr<std::unique_ptr<KernelServer>> Start(const ServerOptions& options);
  // Serves an existing backend (the server owns it); `backend_note` says how
  // it was chosen (DeviceService.List and the start-up log show it).
  static absl::StatusOr<std::unique_ptr<KernelServer>> Start(const ServerOptions& options,
                                                             std::unique_ptr<Backend> backend,
                                                             std::string backend_note = "");
  ~KernelServer();  // Shutdown(zero grace) if still running

  int port() const { return port_; }  // the bound port
  int metrics_port() const;            // 0 when --metrics_listen is off
  int health_port() const;             // 0 when --health_listen is off
  // Stops accepting calls, lets running calls finish for up to `grace` (then
  // cancels them), and stops the device workers.
  void Shutdown(absl::Duration grace);
  void Wait();  // until Shutdown completes
  Backend& backend() { return *backend_; }
  // Device worker counters (tests: dropped and rejected calls).
  WorkerStats worker_stats(int device) const;
  // SIGHUP: reads the TLS certificate, key and client CA, and the tokens
  // file, now (both also reload by themselves when their files change). Not
  // OK names what did not load; what was in use stays.
  absl::Status ReloadCredentials();

 private:
  KernelServer() = default;
  void UpdateHealth();
  absl::Status StartBench(const ServerOptions& options);
  absl::Status SetUpFleet(bench::BenchOptions* bench_options);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ServerState> state_;
  std::unique_ptr<BufferServiceImpl> buffer_service_;
  std::unique_ptr<PoolServiceImpl> pool_service_;
  std::unique_ptr<KernelServiceImpl> kernel_service_;
  std::unique_ptr<DeviceServiceImpl> device_service_;
  // Health probes and their verdicts; before bench_, whose runners call it.
  std::unique_ptr<DeviceHealthMonitor> health_;
  std::unique_ptr<bench::BenchScheduler> bench_;  // uses state_'s workers
  std::unique_ptr<bench::BenchServiceImpl> bench_service_;
  // Before server_: its listener uses them until it is gone.
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  std::shared_ptr<security::ServerTls> tls_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
  std::unique_ptr<NodeEndpoints> endpoints_;  // interceptors + ports; see ~KernelServer for order
  std::unique_ptr<CpuLatencyRequest> cpu_latency_;  // --cpu_dma_latency_us, while the server lives
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SERVER_H_
