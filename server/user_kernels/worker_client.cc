#include "server/user_kernels/worker_client.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/user_kernels/worker_protocol.h"

namespace kernelserve {
namespace user_kernels {
namespace {

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr char kFaultPayload[] = "kernelserve.dev/user_kernels/worker_fault";

absl::Status WithFault(absl::Status st, absl::string_view kind) {
  st.SetPayload(kFaultPayload, absl::Cord(kind));
  return st;
}

}  // namespace

std::string WorkerBinary(const UserKernelOptions& o, const std::string& backend) {
  const std::string& configured = backend == "cuda" ? o.worker_cuda : backend == "hip" ? o.worker_hip : o.worker;
  if (!configured.empty()) return configured;
  const std::string name = backend == "cuda" ? "kernel_worker_cuda" : backend == "hip" ? "kernel_worker_hip" : "kernel_worker";
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  const std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)).substr(0, std::string(self, n).rfind('/')) : ".";
  for (const std::string& p : {absl::StrCat(dir, "/user_kernels/", name), absl::StrCat(dir, "/", name),
                               absl::StrCat(dir, "/../user_kernels/", name)}) {
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return absl::StrCat(dir, "/user_kernels/", name);
}

std::string WorkerFault(const absl::Status& status) {
  auto kind = status.GetPayload(kFaultPayload);
  return kind.has_value() ? std::string(*kind) : "";
}

KernelWorker::KernelWorker(const UserKernelOptions& options, std::string label, std::function<bool()> stop)
    : options_(options), label_(std::move(label)), stop_(std::move(stop)) {}

KernelWorker::~KernelWorker() {
  if (pid_ > 0) {
    WriteFrame(to_worker_, kQuit, "").IgnoreError();
    close(to_worker_);
    Reap(pid_, 1.0);
  } else if (to_worker_ >= 0) {
    close(to_worker_);
  }
  if (from_worker_ >= 0) close(from_worker_);
}

absl::StatusOr<std::unique_ptr<KernelWorker>> KernelWorker::Start(const UserKernelOptions& options,
                                                                 const std::string& backend,
                                                                 const BuiltKernel& built,
                                                                 const pb::BenchJobSpec& spec, uint64_t seed,
                                                                 std::string label, std::function<bool()> stop) {
  auto w = std::unique_ptr<KernelWorker>(new KernelWorker(options, std::move(label), std::move(stop)));
  KS_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create(options.work_dir, "ks-uk-run-"));
  w->dir_ = std::make_unique<TempDir>(std::move(dir));
  w->log_path_ = w->dir_->path() + "/worker.log";
  std::string worker = WorkerBinary(options, backend);
  // The worker starts in its private dir: a relative path must not change meaning.
  char resolved[PATH_MAX];
  if (realpath(worker.c_str(), resolved) != nullptr) worker = resolved;
  if (access(worker.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("the kernel worker ", worker,
                                                      " is missing (set --user_kernel_worker",
                                                      backend == "cpu" ? "" : absl::StrCat("_", backend), ")"));
  }
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  const int log_fd = open(w->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  SpawnSpec s;
  // The protocol pipe arrives as stdout; the worker moves it to fd 3 and
  // points its stdout at stderr.
  s.argv = {worker, absl::StrCat("--", built.format, "=", built.object_path)};
  if (built.format != "so") {
    const pb::CudaLaunch& l = built.launch;
    auto one = [](uint32_t v) { return v == 0 ? 1u : v; };
    s.argv.push_back(absl::StrCat("--grid=", l.grid_x(), ",", one(l.grid_y()), ",", one(l.grid_z())));
    s.argv.push_back(absl::StrCat("--block=", l.block_x(), ",", one(l.block_y()), ",", one(l.block_z())));
    s.argv.push_back(absl::StrCat("--shared_bytes=", l.dynamic_shared_bytes()));
  }
  s.env = {"PATH=/usr/bin:/bin", "LANG=C", absl::StrCat("HOME=", w->dir_->path()),
           absl::StrCat("TMPDIR=", w->dir_->path())};
  if (const char* cvd = getenv("CUDA_VISIBLE_DEVICES")) s.env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", cvd));
  // The worker is the server's own binary: it finds its shared libraries
  // where the server found them (a bundle carried to a GPU node).
  if (const char* lib = getenv("LD_LIBRARY_PATH")) s.env.push_back(absl::StrCat("LD_LIBRARY_PATH=", lib));
  s.cwd = w->dir_->path();
  s.limits.cpu_s = 0;  // the wall-clock deadlines bound it
  // A GPU process maps far more address space than it uses.
  s.limits.memory_bytes = backend == "cpu" ? options.worker_memory_bytes : 0;
  s.limits.file_bytes = 16 << 20;
  s.limits.max_processes = options.worker_max_processes;
  s.limits.isolate_network = options.isolate_network;
  s.stdin_fd = in[0];
  s.stdout_fd = out[1];
  s.stderr_fd = log_fd;
  absl::StatusOr<Spawned> p = Spawn(s);
  close(in[0]);
  close(out[1]);
  if (log_fd >= 0) close(log_fd);
  w->to_worker_ = in[1];
  w->from_worker_ = out[0];
  if (!p.ok()) return p.status();
  w->pid_ = p->pid;
  w->network_ = p->network;
  // A worker that died must not kill the server with SIGPIPE on the next write.
  signal(SIGPIPE, SIG_IGN);
  std::string setup;
  AppendPod(&setup, seed);
  setup += spec.SerializeAsString();
  // A worker that cannot start (a missing shared library) is gone before it reads.
  if (absl::Status st = WriteFrame(w->to_worker_, kSetup, setup); !st.ok()) return w->Gone(st, Reap(w->pid_, 2.0));
  uint32_t tag = 0;
  std::string payload;
  // Generating a large job's inputs takes a while: the launch deadline plus a minute.
  KS_RETURN_IF_ERROR(w->Await(options.launch_deadline_s + 60, &tag, &payload));
  if (tag != kReady) return absl::InternalError(absl::StrCat(w->label_, ": unexpected frame ", tag));
  w->description_ = payload;
  return w;
}

absl::Status KernelWorker::Await(double timeout_s, uint32_t* tag, std::string* payload) {
  const double deadline = NowS() + timeout_s;
  while (true) {
    struct pollfd p = {from_worker_, POLLIN, 0};
    const int r = poll(&p, 1, 20);
    if (r > 0) {
      absl::Status st = ReadFrame(from_worker_, tag, payload);
      if (!st.ok()) return Gone(st, Reap(pid_, 2.0));
      if (*tag == kError) {
        const absl::Status err = StatusFromErrorPayload(*payload);
        // A fault report comes from the signal handler: the worker dies next.
        Exit e = Reap(pid_, 2.0);
        pid_ = -1;
        if (e.signal != 0) return Gone(err, e);
        absl::Status reported(err.code(), absl::StrCat(label_, ": ", err.message()));
        // A device error after the kernel (CUDA's or HIP's, hip_memory.cc) may
        // have left the device itself broken.
        return absl::StrContains(err.message(), "cudaError") ||
                       absl::StrContains(err.message(), "faulted on the device or left an error")
                   ? WithFault(reported, "device error")
                   : reported;
      }
      return absl::OkStatus();
    }
    if (r < 0 && errno != EINTR) return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    if (NowS() > deadline) {
      Exit e = KillAndReap(pid_);
      e.timed_out = true;
      return Gone(absl::DeadlineExceededError(absl::StrFormat(
                      "did not finish within %.3g s (--user_kernel_deadline_s; a hang?)", timeout_s)),
                  e);
    }
    if (stop_ && stop_()) {
      Exit e = KillAndReap(pid_);
      e.stopped = true;
      return Gone(absl::CancelledError("stopped"), e);
    }
  }
}

// The worker is gone (or killed now): why, in one status.
absl::Status KernelWorker::Gone(const absl::Status& why, const Exit& exit) {
  pid_ = -1;
  std::string log = ReadTail(log_path_, 2048);
  const std::string tail = log.empty() ? "" : absl::StrCat("; the worker's output ends: ", log);
  if (exit.timed_out) {
    return WithFault(absl::DeadlineExceededError(absl::StrCat(label_, ": the kernel ", why.message(),
                                                              "; its worker was killed with SIGKILL", tail)),
                     "deadline");
  }
  if (exit.stopped) return absl::CancelledError(absl::StrCat(label_, ": stopped; its worker was killed"));
  if (exit.signal != 0) {
    const bool fault = why.code() != absl::StatusCode::kUnavailable && why.code() != absl::StatusCode::kInternal;
    return WithFault(absl::AbortedError(absl::StrCat(label_, ": the kernel's worker process was killed by ",
                                                     SignalName(exit.signal),
                                                     fault ? absl::StrCat(": ", why.message()) : "", tail)),
                     "signal");
  }
  return absl::AbortedError(
      absl::StrCat(label_, ": the kernel's worker process ended (", exit.Describe(), ") ", why.message(), tail));
}

absl::Status KernelWorker::Gate(uint8_t* out, size_t out_bytes) {
  if (pid_ < 0) return absl::FailedPreconditionError(absl::StrCat(label_, ": the worker is gone"));
  if (absl::Status st = WriteFrame(to_worker_, kGate, ""); !st.ok()) return Gone(st, Reap(pid_, 2.0));
  uint32_t tag = 0;
  std::string payload;
  KS_RETURN_IF_ERROR(Await(options_.launch_deadline_s, &tag, &payload));
  if (tag != kOutput || payload.size() != out_bytes) {
    return absl::InternalError(absl::StrCat(label_, ": the worker sent ", payload.size(), " output bytes, expected ",
                                            out_bytes));
  }
  std::memcpy(out, payload.data(), out_bytes);
  return absl::OkStatus();
}

absl::StatusOr<WorkerTimes> KernelWorker::Timing(uint32_t tag, const std::string& command, double timeout_s) {
  if (pid_ < 0) return absl::FailedPreconditionError(absl::StrCat(label_, ": the worker is gone"));
  if (absl::Status st = WriteFrame(to_worker_, tag, command); !st.ok()) return Gone(st, Reap(pid_, 2.0));
  uint32_t reply = 0;
  std::string payload;
  KS_RETURN_IF_ERROR(Await(timeout_s, &reply, &payload));
  WorkerTimes t;
  if (reply == kNotCaptured) {
    t.not_captured = StatusFromErrorPayload(payload);
    if (t.not_captured.ok()) t.not_captured = absl::UnknownError("the worker could not capture the launch");
    return t;
  }
  size_t pos = 0;
  if (reply != kTimes || !ReadPod(payload, &pos, &t.total_ms) || !ReadPod(payload, &pos, &t.launches)) {
    return absl::InternalError(absl::StrCat(label_, ": a malformed timing frame"));
  }
  double x = 0;
  while (ReadPod(payload, &pos, &x)) t.sample_ms.push_back(x);
  return t;
}

absl::StatusOr<WorkerTimes> KernelWorker::Time(int warmup, int timed, int batches, uint64_t flush_bytes,
                                               double timeout_s) {
  std::string cmd;
  AppendPod(&cmd, static_cast<int32_t>(warmup));
  AppendPod(&cmd, static_cast<int32_t>(timed));
  AppendPod(&cmd, static_cast<int32_t>(batches));
  AppendPod(&cmd, flush_bytes);
  return Timing(kTime, cmd, timeout_s);
}

absl::StatusOr<WorkerTimes> KernelWorker::Graph(int warmup, int replays, int batches, double timeout_s) {
  std::string cmd;
  AppendPod(&cmd, static_cast<int32_t>(warmup));
  AppendPod(&cmd, static_cast<int32_t>(replays));
  AppendPod(&cmd, static_cast<int32_t>(batches));
  return Timing(kGraph, cmd, timeout_s);
}

absl::StatusOr<WorkerTimes> KernelWorker::Sustain(double warmin_s, double window_s, double timeout_s) {
  std::string cmd;
  AppendPod(&cmd, warmin_s);
  AppendPod(&cmd, window_s);
  return Timing(kSustain, cmd, timeout_s);
}

}  // namespace user_kernels
}  // namespace kernelserve
