// What the benchmark scheduler and each job run are configured with.
#ifndef KERNELSERVE_SERVER_BENCH_BENCH_OPTIONS_H_
#define KERNELSERVE_SERVER_BENCH_BENCH_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernelserve/v1/device.pb.h"
#include "server/bench/bench_inputs.h"
#include "server/bench/job_store.h"
#include "server/user_kernels/builder.h"

namespace kernelserve {
namespace bench {

// Several servers sharing one job store (--job_store=postgres://...). Each
// device's runner claims queued jobs from the store; the node heartbeats
// every heartbeat_ms (its row in ks_nodes and its running jobs) and requeues
// the jobs of nodes silent for stale_ms.
struct FleetOptions {
  std::string job_store;                 // --job_store: postgres://...; "" for one node
  std::shared_ptr<FleetJobStore> store;  // opened from job_store by the server; null: the embedded store
  std::string node_id;                   // unique in the fleet
  int64_t heartbeat_ms = 2000;
  int64_t stale_ms = 15000;  // several heartbeats: a slow one is not a dead node
  int64_t poll_ms = 250;     // how often an idle device looks for queued jobs
  // This node's devices as DeviceService.List shows them; null: none listed.
  std::function<void(pb::FleetNode*)> describe;
};

struct BenchOptions {
  std::string data_dir;  // holds bench.db; "" keeps jobs in memory only
  std::string server_version = "dev";
  int max_jobs_per_submitter = 8;     // queued + running
  // Per-tenant job limits (server/security/limits.h), set by the server; null: none.
  // submit_check(tenant, its queued jobs): OK or RESOURCE_EXHAUSTED naming the limit.
  std::function<absl::Status(const std::string&, int64_t)> submit_check;
  // start_check(tenant, its running jobs, all devices): not OK keeps the job
  // queued for now (other tenants' and later jobs may start first); the
  // status's message is what the job's watchers are told it waits for.
  std::function<absl::Status(const std::string&, int64_t)> start_check;
  // Device memory accounting (the server's MemoryAccountant), null: none.
  // reserve_memory(device, tenant, bytes, what) holds `bytes` against the
  // device's limit and the tenant's max_device_memory until the returned
  // handle is destroyed, or fails with RESOURCE_EXHAUSTED naming the limit.
  // A job reserves its device memory (inputs, output, flush buffers) before
  // allocating it and releases it when the run ends (done, failed or
  // cancelled); a job that does not fit fails with that message.
  std::function<absl::StatusOr<std::shared_ptr<void>>(int, const std::string&, int64_t, const std::string&)>
      reserve_memory;
  // The dtype and shape of a tenant's buffer, so that Submit refuses a job
  // naming a buffer that does not exist; null: checked only when the job starts.
  BufferDescriber describe_buffer;
  // --reject_nonfinite: Submit refuses a job whose named buffers hold NaN or
  // Inf (INVALID_ARGUMENT naming the input and the element); null: no check.
  BufferContentCheck check_buffer;
  double default_time_limit_s = 900;  // when a job gives none
  double max_time_limit_s = 3600;
  double min_warmin_s = 1.0;   // sustained: at least this warm-in (tests lower it)
  double min_window_s = 3.0;   // sustained: at least this window (tests lower it)
  bool test_variants = false;  // register test.wrong / test.nan
  int max_attempts = 2;        // starts before a job found running at start-up is marked interrupted
  double gemm_tflops = 0;      // GEMM ceiling measured elsewhere; replaces the backend's (0: measure)
  double gemm_fp8_tflops = 0;  // FP8 GEMM ceiling measured elsewhere (0: none)
  int max_host_launches = 3;   // timed launches of host variants (the oracle is slow)
  // Above this many FLOPs the gate checks a sample of the output (exact
  // smaller problems, kernels/api/variants.h OracleReferenceSample).
  double max_gate_flops = 4e9;
  // Largest job (inputs, output, oracle reference) in bytes; 0: a quarter of
  // the host's memory or half of the smallest device's, whichever is less.
  double max_job_bytes = 0;
  // Users' kernels (server/user_kernels): toolchains, limits, the worker.
  user_kernels::UserKernelOptions user_kernels;
  int max_user_kernels_per_job = 8;
  // Device health, set by the server; null: every device is healthy.
  // device_check(device): OK, or FAILED_PRECONDITION naming the device and
  // why it is unhealthy. Submit refuses a job pinned to such a device, its
  // runner fails the jobs pinned to it and leaves `any` jobs to the others.
  std::function<absl::Status(int)> device_check;
  // Called when a user kernel's worker died abnormally on `device`
  // (user_kernels::WorkerFault, the fault's status as argument): probes the
  // device and marks it unhealthy when the probe fails; returns the probe's
  // status for the job's notes. Null: no probe.
  std::function<absl::Status(int, const absl::Status&)> probe_after_fault;
  FleetOptions fleet;
};

// Runs `fn` on the device's worker and returns its status (or the worker's
// refusal). The server passes its DeviceWorker; tests may run fn inline.
using DeviceRunner = std::function<absl::Status(int device, std::function<absl::Status()> fn)>;

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_BENCH_OPTIONS_H_
