// The server's side of a kernel worker: one process per user kernel per job
// run (//server/user_kernels:kernel_worker, fork + exec through sandbox.h),
// which generates the job's inputs from the secret seed it is handed, loads
// the built kernel and runs it; this class sends it commands and turns
// whatever happens to it (an error it reports, a signal that killed it, a
// deadline it missed) into a status naming the kernel and the reason.
#ifndef KERNELSERVE_SERVER_USER_KERNELS_WORKER_CLIENT_H_
#define KERNELSERVE_SERVER_USER_KERNELS_WORKER_CLIENT_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernelserve/v1/bench.pb.h"
#include "server/user_kernels/builder.h"
#include "server/user_kernels/sandbox.h"

namespace kernelserve {
namespace user_kernels {

struct WorkerTimes {
  double total_ms = 0;
  int64_t launches = 0;           // timed launches (or graph replays)
  std::vector<double> sample_ms;  // per batch, ms per launch
  // Method graph only: not OK when the launch could not be captured (the
  // variant is reported untimed, as a built-in one is); the worker lives on.
  absl::Status not_captured;
};

// The worker binary for `backend`: the configured one, else beside the
// running binary (the server, or a test that carries it as data).
std::string WorkerBinary(const UserKernelOptions& options, const std::string& backend);

// The kind of abnormal worker death a status from KernelWorker reports:
// "signal", "deadline" or "device error" (a CUDA error after the kernel), or
// "" for an ordinary failure (the kernel returned non-zero, does not load,
// wrote outside its output and was caught by a canary, the job was
// cancelled). After an abnormal death the device is health-probed
// (device_probe.h).
std::string WorkerFault(const absl::Status& status);

class KernelWorker {
 public:
  // Starts the worker for `backend`'s kernel `built` (a shared object, or a
  // cubin / PTX with its launch geometry) and waits until it
  // has generated the inputs of `spec` from `seed` and loaded the kernel
  // (checking its ABI version and entry point). `label` names the kernel in
  // messages ("user:my_attn").
  static absl::StatusOr<std::unique_ptr<KernelWorker>> Start(const UserKernelOptions& options,
                                                            const std::string& backend, const BuiltKernel& built,
                                                            const pb::BenchJobSpec& spec, uint64_t seed,
                                                            std::string label, std::function<bool()> stop);
  ~KernelWorker();  // kQuit, then SIGKILL if it lingers
  KernelWorker(const KernelWorker&) = delete;
  KernelWorker& operator=(const KernelWorker&) = delete;

  // One launch on NaN-poisoned output; `out` receives the output bytes
  // (exactly out_bytes of them).
  absl::Status Gate(uint8_t* out, size_t out_bytes);
  // `warmup` launches, then `timed` launches in `batches` timed batches,
  // within `timeout_s`. `flush_bytes` > 0 (l2_flush): each launch follows a
  // copy of that many bytes between the worker's own flush buffers and is
  // timed alone (`batches` is then `timed`).
  absl::StatusOr<WorkerTimes> Time(int warmup, int timed, int batches, uint64_t flush_bytes, double timeout_s);
  // Method graph: `warmup` launches, then in `batches` batches one launch
  // captured into a device graph and replayed (`replays` in all).
  absl::StatusOr<WorkerTimes> Graph(int warmup, int replays, int batches, double timeout_s);
  // Method sustained: back-to-back launches for `warmin_s`, then timed
  // batches of about 20 ms for `window_s`, all in the worker.
  absl::StatusOr<WorkerTimes> Sustain(double warmin_s, double window_s, double timeout_s);

  const std::string& network() const { return network_; }
  const std::string& description() const { return description_; }

 private:
  KernelWorker(const UserKernelOptions& options, std::string label, std::function<bool()> stop);
  // Waits for the next frame within timeout_s; on EOF, a deadline or a stop
  // the worker is reaped and the status says why it is gone.
  absl::Status Await(double timeout_s, uint32_t* tag, std::string* payload);
  absl::Status Gone(const absl::Status& why, const Exit& exit);
  // Sends a timing command and reads its kTimes (or kNotCaptured) reply.
  absl::StatusOr<WorkerTimes> Timing(uint32_t tag, const std::string& command, double timeout_s);

  const UserKernelOptions options_;
  const std::string label_;
  const std::function<bool()> stop_;
  std::unique_ptr<TempDir> dir_;
  pid_t pid_ = -1;
  int to_worker_ = -1, from_worker_ = -1;
  std::string log_path_;  // the worker's stderr (and the kernel's stdout)
  std::string fault_;     // a kError frame sent from its signal handler
  std::string network_, description_;
};

}  // namespace user_kernels
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_USER_KERNELS_WORKER_CLIENT_H_
