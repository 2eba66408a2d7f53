#include "server/bench/scheduler.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "kernels/api/status_macros.h"
#include "kernels/numerics/numerics.h"
#include "server/bench/timing.h"
#include "server/input_checks.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace bench {
namespace {

bool IsTerminal(pb::BenchJobState s) {
  return s == pb::JOB_DONE || s == pb::JOB_FAILED || s == pb::JOB_CANCELLED || s == pb::JOB_INTERRUPTED;
}

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string NewJobId() {
  static std::mt19937_64 rng(std::random_device{}() ^
                             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  static absl::Mutex mu;
  absl::MutexLock l(&mu);
  return absl::StrFormat("job-%012x", rng() & 0xffffffffffffull);
}

// Marker put into cancellation statuses caused by a graceful shutdown.
constexpr char kShutdownReason[] = "server shutting down";

}  // namespace

struct BenchScheduler::Job {
  pb::BenchJob job;
  int64_t order = 0;
  std::vector<pb::BenchEvent> events;
  bool events_loaded = true;
  int64_t next_seq = 1;
  int last_position = 0;
  double progress = 0;  // of the last event that carried one
  std::atomic<bool> cancel{false};
  std::string cancel_reason;  // guarded by the scheduler's mu_
  std::string held;  // why start_check keeps it queued ("" when it may start); mu_
};

// What one run of a job holds on the host. Shared with host computations
// (RunStoppable), which may outlive a cancelled run.
struct BenchScheduler::RunState {
  std::shared_ptr<PreparedJob> prepared;
  HostTensor host_out;
};

namespace {

// What one run of a job holds on the device, with its accounting. Owned by
// Execute alone, so it is freed (and the reservation released) when the run
// ends, however it ends.
struct DeviceState {
  std::shared_ptr<void> reservation;  // declared first: released after the memory below is freed
  std::vector<std::unique_ptr<DeviceMemory>> inputs;
  OpCall call;  // the job's call with views into `inputs`
  std::unique_ptr<DeviceMemory> out;
  std::unique_ptr<DeviceMemory> flush_src, flush_dst;
  size_t flush_bytes = 0;
};

}  // namespace

// ------------------------------------------------------------------ set-up

absl::StatusOr<std::unique_ptr<BenchScheduler>> BenchScheduler::Create(Backend* backend,
                                                                       BenchOptions options,
                                                                       DeviceRunner runner,
                                                                       BufferReader reader) {
  if (!options.data_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.data_dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create the data directory ", options.data_dir, ": ", ec.message()));
    }
  }
  // One server per data dir: a second one (SO_REUSEPORT lets it share the
  // port) would serve stale in-memory state over the same database.
  int lock_fd = -1;
  if (!options.data_dir.empty()) {
    const std::string lock_path = options.data_dir + "/bench.lock";
    lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      if (lock_fd >= 0) close(lock_fd);
      return absl::FailedPreconditionError(absl::StrCat(
          "the data directory ", options.data_dir, " is in use by another kernelserve (", lock_path, " is locked)"));
    }
  }
  if (options.max_job_bytes <= 0) {
    double limit = 0.25 * static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    for (int d = 0; d < backend->DeviceCount(); ++d) {
      const double mem = static_cast<double>(backend->GetDeviceInfo(d).memory_total_bytes);
      if (mem > 0) limit = std::min(limit, 0.5 * mem);
    }
    options.max_job_bytes = limit;
  }
  const std::string path = options.data_dir.empty() ? ":memory:" : options.data_dir + "/bench.db";
  absl::StatusOr<std::unique_ptr<JobStore>> opened = JobStore::Open(path);
  if (!opened.ok()) {
    if (lock_fd >= 0) close(lock_fd);
    return opened.status();
  }
  std::unique_ptr<JobStore> store = std::move(*opened);
  std::unique_ptr<BenchScheduler> s(
      new BenchScheduler(backend, std::move(options), std::move(runner), std::move(reader), std::move(store)));
  s->lock_fd_ = lock_fd;
  VariantOptions vo;
  vo.test_variants = s->options_.test_variants;
  KS_RETURN_IF_ERROR(RegisterBackendVariants(*backend, vo, &s->registry_));
  KS_RETURN_IF_ERROR(RegisterOracleVariants(&s->registry_));
  KS_RETURN_IF_ERROR(s->Recover());
  for (int d = 0; d < backend->DeviceCount(); ++d) {
    s->threads_.emplace_back([p = s.get(), d] { p->RunnerLoop(d); });
  }
  return s;
}

BenchScheduler::BenchScheduler(Backend* backend, BenchOptions options, DeviceRunner runner,
                               BufferReader reader, std::unique_ptr<JobStore> store)
    : backend_(backend),
      options_(std::move(options)),
      runner_(std::move(runner)),
      reader_(std::move(reader)),
      store_(std::move(store)) {
  ceilings_.resize(static_cast<size_t>(std::max(0, backend_->DeviceCount())));
}

BenchScheduler::~BenchScheduler() {
  Shutdown();
  if (lock_fd_ >= 0) close(lock_fd_);
}

void BenchScheduler::Shutdown() {
  {
    absl::MutexLock l(&mu_);
    if (shutdown_ && threads_.empty()) return;
    shutdown_ = true;
    for (auto& [id, j] : jobs_) {
      if (j->job.state() == pb::JOB_RUNNING) {
        j->cancel_reason = kShutdownReason;
        j->cancel = true;
      }
    }
    work_cv_.SignalAll();
    event_cv_.SignalAll();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
}

absl::Status BenchScheduler::Recover() {
  KS_ASSIGN_OR_RETURN(std::vector<pb::BenchJob> loaded, store_->LoadJobs());
  absl::MutexLock l(&mu_);
  for (pb::BenchJob& pj : loaded) {
    auto j = std::make_shared<Job>();
    j->job = std::move(pj);
    j->order = next_order_++;
    const std::string id = j->job.id();
    KS_ASSIGN_OR_RETURN(int64_t max_seq, store_->MaxEventSeq(id));
    j->next_seq = max_seq + 1;
    j->events_loaded = false;
    jobs_[id] = j;
    if (j->job.state() == pb::JOB_RUNNING) {
      j->job.clear_results();
      j->job.set_started_unix_ms(0);
      pb::BenchEvent e;
      if (j->job.attempts() < options_.max_attempts) {
        j->job.set_state(pb::JOB_QUEUED);
        e.set_phase(pb::PHASE_REQUEUED);
        e.set_message(absl::StrCat("the server stopped while this job ran (attempt ", j->job.attempts(),
                                   " of ", options_.max_attempts, "); re-queued"));
        j->job.add_notes(e.message());
      } else {
        j->job.set_state(pb::JOB_INTERRUPTED);
        j->job.set_finished_unix_ms(NowMs());
        j->job.set_error(absl::StrCat("the server stopped while this job ran, ", j->job.attempts(),
                                      " times; not re-queued again"));
        j->job.set_error_code(static_cast<int>(absl::StatusCode::kAborted));
        e.set_phase(pb::PHASE_INTERRUPTED);
        e.set_message(j->job.error());
      }
      KS_RETURN_IF_ERROR(EnsureEventsLocked(*j));
      EmitLocked(*j, std::move(e), /*with_job=*/true);
    } else if (!IsTerminal(j->job.state())) {
      KS_RETURN_IF_ERROR(EnsureEventsLocked(*j));
    }
  }
  for (int d = 0; d < static_cast<int>(ceilings_.size()); ++d) RefreshPositionsLocked(d);
  return absl::OkStatus();
}

// ------------------------------------------------------------ events, state

absl::Status BenchScheduler::EnsureEventsLocked(Job& job) {
  if (job.events_loaded) return absl::OkStatus();
  KS_ASSIGN_OR_RETURN(job.events, store_->LoadEvents(job.job.id(), 0));
  job.events_loaded = true;
  return absl::OkStatus();
}

void BenchScheduler::PersistLocked(const Job& job) {
  absl::Status st = store_->PutJob(job.job);
  // Keep going on a store error (a full disk): the in-memory state is still served.
  if (!st.ok()) spdlog::error("bench: persisting job {}: {}", job.job.id(), st.ToString());
}

void BenchScheduler::EmitLocked(Job& job, pb::BenchEvent e, bool with_job) {
  e.set_job_id(job.job.id());
  e.set_seq(job.next_seq++);
  e.set_time_unix_ms(NowMs());
  e.set_state(job.job.state());
  if (e.progress() > 0) job.progress = e.progress();
  if (job.job.state() == pb::JOB_QUEUED) job.progress = 0;
  if (e.progress() == 0 && job.job.state() != pb::JOB_QUEUED) e.set_progress(job.progress);
  if (IsTerminal(job.job.state())) *e.mutable_job() = job.job;
  absl::Status st = with_job ? store_->PutJobAndEvent(job.job, e) : store_->AppendEvent(e);
  if (!st.ok()) spdlog::error("bench: persisting job {}: {}", job.job.id(), st.ToString());
  if (job.events_loaded) job.events.push_back(std::move(e));
  event_cv_.SignalAll();
}

void BenchScheduler::Emit(Job& job, pb::BenchEvent e, bool with_job) {
  absl::MutexLock l(&mu_);
  EmitLocked(job, std::move(e), with_job);
}

void BenchScheduler::RefreshPositionsLocked(int device) {
  std::vector<Job*> queued;
  for (auto& [id, j] : jobs_) {
    if (j->job.state() == pb::JOB_QUEUED && j->job.spec().device() == device) queued.push_back(j.get());
  }
  std::sort(queued.begin(), queued.end(), [](const Job* a, const Job* b) {
    if (a->job.spec().priority() != b->job.spec().priority()) {
      return a->job.spec().priority() > b->job.spec().priority();
    }
    return a->order < b->order;
  });
  for (size_t i = 0; i < queued.size(); ++i) {
    Job& j = *queued[i];
    const int pos = static_cast<int>(i) + 1;
    j.job.set_queue_position(pos);
    if (pos != j.last_position) {
      j.last_position = pos;
      pb::BenchEvent e;
      e.set_phase(pb::PHASE_QUEUED);
      e.set_queue_position(pos);
      e.set_message(absl::StrCat("queued at position ", pos, " on device ", device));
      EmitLocked(j, std::move(e), false);
    }
  }
}

std::shared_ptr<BenchScheduler::Job> BenchScheduler::NextLocked(int device) {
  std::shared_ptr<Job> best;
  std::map<std::string, int64_t> running;  // per tenant over all devices, for options_.start_check
  if (options_.start_check) {
    for (const auto& [id, j] : jobs_) running[j->job.tenant()] += j->job.state() == pb::JOB_RUNNING;
  }
  for (auto& [id, j] : jobs_) {
    if (j->job.state() != pb::JOB_QUEUED || j->job.spec().device() != device) continue;
    if (options_.start_check) {
      const absl::Status may = options_.start_check(j->job.tenant(), running[j->job.tenant()]);
      if (!may.ok()) {
        // Held, not failed: tell the watchers once per reason, then skip it.
        const std::string why = absl::StrCat("waiting in the queue: ", may.message(),
                                             "; other jobs on device ", device, " may start first");
        if (j->held != why) {
          j->held = why;
          pb::BenchEvent e;
          e.set_phase(pb::PHASE_QUEUED);
          e.set_queue_position(j->job.queue_position());
          e.set_message(why);
          EmitLocked(*j, std::move(e), false);
        }
        continue;
      }
      j->held.clear();
    }
    if (!best || j->job.spec().priority() > best->job.spec().priority() ||
        (j->job.spec().priority() == best->job.spec().priority() && j->order < best->order)) {
      best = j;
    }
  }
  return best;
}

std::shared_ptr<BenchScheduler::Job> BenchScheduler::FindLocked(const std::string& id,
                                                                const std::string& tenant) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return nullptr;
  if (!tenant.empty() && it->second->job.tenant() != tenant) return nullptr;
  return it->second;
}

// -------------------------------------------------------------------- API

absl::Status BenchScheduler::ValidateSubmit(const pb::BenchJobSpec& spec, const std::string& tenant) const {
  if (spec.op() == pb::BENCH_OP_UNSPECIFIED || !pb::BenchOp_IsValid(spec.op())) {
    return absl::InvalidArgumentError(
        "spec.op: expected attention, fp8_attention, mla_decode, moe_gateup, moe_down or moe_layer");
  }
  KS_RETURN_IF_ERROR(CheckEnumFields(spec, "spec"));
  // The spec is kept with the job for good (and persisted): its strings are bounded.
  KS_RETURN_IF_ERROR(CheckLength("spec.name", spec.name()));
  KS_RETURN_IF_ERROR(CheckLength("spec.submitter", spec.submitter()));
  for (int i = 0; i < spec.variants_size(); ++i) {
    KS_RETURN_IF_ERROR(CheckLength(absl::StrCat("spec.variants[", i, "]"), spec.variants(i)));
  }
  for (const auto& [name, id] : spec.inputs().buffers()) {
    KS_RETURN_IF_ERROR(CheckLength("spec.inputs.buffers (a name)", name));
    KS_RETURN_IF_ERROR(CheckLength(absl::StrCat("spec.inputs.buffers[", QuoteClientText(name), "]"), id));
  }
  double flops = 0;
  KS_RETURN_IF_ERROR(ValidateSpec(spec, &flops, options_.max_job_bytes));
  const BenchOp op = static_cast<BenchOp>(spec.op());
  std::set<std::string> seen;
  for (const std::string& name : spec.variants()) {
    absl::StatusOr<const Variant*> v = registry_.Find(op, name);
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat("spec.variants: ", v.status().message()));
    // Host variants run the whole fp64 oracle; at this size that takes hours
    // and the gate compares every variant with the oracle anyway.
    if ((*v)->on_host && flops > 25 * options_.max_gate_flops) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "spec.variants: \"%s\" runs the fp64 oracle on the host, %.3g FLOPs per launch here; it is "
          "allowed up to %.3g (25x --bench_max_gate_gflops). The correctness gate already compares every "
          "variant with the oracle",
          name, flops, 25 * options_.max_gate_flops));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("spec.variants: ", QuoteClientText(name), " is listed twice"));
    }
  }
  if (spec.variants().empty() && registry_.Default(op) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("spec.variants: no default variant for ", BenchOpName(op)));
  }
  const pb::MethodOptions& m = spec.method();
  if (m.warmup() < 0 || m.iters() < 0 || m.passes() < 0 || !(m.warmin_s() >= 0) || !(m.window_s() >= 0)) {
    return absl::InvalidArgumentError("spec.method: counts and durations must be >= 0");  // NaN too
  }
  if (m.warmin_s() > options_.max_time_limit_s || m.window_s() > options_.max_time_limit_s) {
    return absl::InvalidArgumentError(absl::StrCat("spec.method: warmin_s and window_s must be at most ",
                                                   options_.max_time_limit_s, " s (the longest time limit)"));
  }
  if (m.graph_replays() < 0) return absl::InvalidArgumentError("spec.method: counts and durations must be >= 0");
  if (m.iters() > 1000000 || m.warmup() > 1000000 || m.graph_replays() > 1000000 || m.passes() > 1000) {
    return absl::InvalidArgumentError(
        "spec.method: at most 1000000 warm-up or timed launches or graph replays and 1000 passes");
  }
  // Graph capture goes through Backend::TimeGraphReplays, which the cuda backend implements.
  if (m.method() == pb::METHOD_GRAPH && backend_->Name() != "cuda") {
    return absl::FailedPreconditionError(absl::StrCat(
        "spec.method: method graph replays CUDA graphs and needs the cuda backend; this server runs ",
        backend_->Name()));
  }
  if (!pb::BenchMethod_IsValid(m.method())) return absl::InvalidArgumentError("spec.method.method: unknown method");
  if (!(spec.time_limit_s() >= 0) || spec.time_limit_s() > options_.max_time_limit_s) {  // NaN too
    return absl::InvalidArgumentError(absl::StrCat("spec.time_limit_s: expected 0 (default ",
                                                   options_.default_time_limit_s, " s) up to ",
                                                   options_.max_time_limit_s, " s, got ", spec.time_limit_s()));
  }
  if (spec.device() < 0 || spec.device() >= backend_->DeviceCount()) {
    return absl::InvalidArgumentError(absl::StrCat("spec.device: this server has devices 0..",
                                                   backend_->DeviceCount() - 1, ", got ", spec.device()));
  }
  if (spec.tolerance() < 0 || !std::isfinite(spec.tolerance())) {
    return absl::InvalidArgumentError("spec.tolerance: expected >= 0 (0: the op's default)");
  }
  if (spec.inputs().kind() == pb::INPUT_BUFFERS && spec.inputs().buffers().empty()) {
    return absl::InvalidArgumentError("spec.inputs.buffers: INPUT_BUFFERS needs at least one buffer id");
  }
  if (options_.describe_buffer) {
    KS_RETURN_IF_ERROR(CheckSpecBuffers(spec, options_.describe_buffer, tenant, options_.check_buffer));
  }
  return absl::OkStatus();
}

absl::StatusOr<pb::BenchJob> BenchScheduler::Submit(pb::BenchJobSpec spec, const std::string& tenant) {
  if (!tenant.empty()) spec.set_submitter(tenant);
  if (spec.submitter().empty()) spec.set_submitter("anonymous");
  KS_RETURN_IF_ERROR(ValidateSubmit(spec, tenant));
  if (spec.variants().empty()) {
    spec.add_variants(registry_.Default(static_cast<BenchOp>(spec.op()))->name);
  }
  absl::MutexLock l(&mu_);
  if (shutdown_) return absl::UnavailableError("the benchmark scheduler is shutting down");
  int active = 0;
  for (const auto& [id, j] : jobs_) {
    if (j->job.spec().submitter() == spec.submitter() &&
        (j->job.state() == pb::JOB_QUEUED || j->job.state() == pb::JOB_RUNNING)) {
      ++active;
    }
  }
  if (options_.submit_check) {
    int64_t queued = 0;
    for (const auto& [id, j] : jobs_) queued += j->job.tenant() == tenant && j->job.state() == pb::JOB_QUEUED;
    KS_RETURN_IF_ERROR(options_.submit_check(tenant, queued));
  }
  if (active >= options_.max_jobs_per_submitter) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "submitter \"", spec.submitter(), "\" already has ", active,
        " queued or running benchmark jobs; the limit is ", options_.max_jobs_per_submitter,
        " (--bench_max_jobs_per_submitter)"));
  }
  auto j = std::make_shared<Job>();
  j->order = next_order_++;
  pb::BenchJob& job = j->job;
  job.set_id(NewJobId());
  *job.mutable_spec() = std::move(spec);
  job.set_state(pb::JOB_QUEUED);
  job.set_created_unix_ms(NowMs());
  job.set_backend(backend_->Name());
  job.set_server_version(options_.server_version);
  job.set_shape_desc(ShapeDesc(job.spec()));
  job.set_tenant(tenant);
  // Stored before it is visible: a job the store refused does not exist.
  absl::Status stored = store_->PutJob(job);
  if (!stored.ok()) {
    return absl::UnavailableError(absl::StrCat("the job could not be stored, so it was not queued: ",
                                               stored.message()));
  }
  jobs_[job.id()] = j;
  RefreshPositionsLocked(job.spec().device());
  work_cv_.SignalAll();
  return job;
}

absl::StatusOr<pb::BenchJob> BenchScheduler::Get(const std::string& id, const std::string& tenant) {
  absl::MutexLock l(&mu_);
  std::shared_ptr<Job> j = FindLocked(id, tenant);
  if (!j) return absl::NotFoundError(absl::StrCat("no benchmark job ", QuoteClientText(id)));
  return j->job;
}

std::vector<pb::BenchJob> BenchScheduler::List(const pb::ListBenchRequest& request, const std::string& tenant,
                                               int64_t max_bytes, bool* truncated) {
  absl::MutexLock l(&mu_);
  std::vector<const Job*> all;
  for (const auto& [id, j] : jobs_) {
    if (!tenant.empty() && j->job.tenant() != tenant) continue;
    if (!request.submitter().empty() && j->job.spec().submitter() != request.submitter()) continue;
    if (!request.states().empty() &&
        std::find(request.states().begin(), request.states().end(), j->job.state()) == request.states().end()) {
      continue;
    }
    all.push_back(j.get());
  }
  std::sort(all.begin(), all.end(), [](const Job* a, const Job* b) { return a->order > b->order; });
  const size_t limit = request.limit() > 0 ? static_cast<size_t>(request.limit()) : 100;
  std::vector<pb::BenchJob> out;
  if (truncated != nullptr) *truncated = false;
  int64_t bytes = 0;
  for (size_t i = 0; i < all.size() && i < limit; ++i) {
    pb::BenchJob job = all[i]->job;
    if (request.summary()) job.clear_results();
    bytes += static_cast<int64_t>(job.ByteSizeLong()) + 16;  // and its framing
    if (max_bytes > 0 && bytes > max_bytes) {
      if (truncated != nullptr) *truncated = true;
      break;
    }
    out.push_back(std::move(job));
  }
  return out;
}

absl::StatusOr<pb::BenchJob> BenchScheduler::Cancel(const std::string& id, const std::string& reason,
                                                    const std::string& tenant) {
  KS_RETURN_IF_ERROR(CheckLength("reason", reason));
  absl::MutexLock l(&mu_);
  std::shared_ptr<Job> j = FindLocked(id, tenant);
  if (!j) return absl::NotFoundError(absl::StrCat("no benchmark job ", QuoteClientText(id)));
  const std::string why = reason.empty() ? "cancelled by request" : absl::StrCat("cancelled: ", reason);
  switch (j->job.state()) {
    case pb::JOB_CANCELLED:
      return j->job;
    case pb::JOB_QUEUED: {
      j->job.set_state(pb::JOB_CANCELLED);
      j->job.set_error(why);
      j->job.set_error_code(static_cast<int>(absl::StatusCode::kCancelled));
      j->job.set_finished_unix_ms(NowMs());
      j->job.set_queue_position(0);
      pb::BenchEvent e;
      e.set_phase(pb::PHASE_CANCELLED);
      e.set_message(why);
      EmitLocked(*j, std::move(e), true);
      RefreshPositionsLocked(j->job.spec().device());
      return j->job;
    }
    case pb::JOB_RUNNING: {
      j->cancel_reason = why;
      j->cancel = true;
      const absl::Time until = absl::Now() + absl::Seconds(2);
      while (j->job.state() == pb::JOB_RUNNING && absl::Now() < until) {
        event_cv_.WaitWithDeadline(&mu_, until);
      }
      return j->job;
    }
    default:
      return absl::FailedPreconditionError(absl::StrCat("job ", id, " already finished (",
                                                        pb::BenchJobState_Name(j->job.state()), ")"));
  }
}

absl::Status BenchScheduler::WaitEvents(const std::string& id, int64_t after_seq, absl::Duration timeout,
                                        std::vector<pb::BenchEvent>* out, bool* finished,
                                        const std::string& tenant) {
  absl::MutexLock l(&mu_);
  std::shared_ptr<Job> j = FindLocked(id, tenant);
  if (!j) return absl::NotFoundError(absl::StrCat("no benchmark job ", QuoteClientText(id)));
  KS_RETURN_IF_ERROR(EnsureEventsLocked(*j));
  const absl::Time until = absl::Now() + timeout;
  auto collect = [&] {
    for (const pb::BenchEvent& e : j->events) {
      if (e.seq() > after_seq) out->push_back(e);
    }
  };
  collect();
  while (out->empty() && !IsTerminal(j->job.state()) && !shutdown_) {
    if (event_cv_.WaitWithDeadline(&mu_, until)) break;
    collect();
  }
  if (out->empty()) collect();
  const int64_t last = out->empty() ? after_seq : out->back().seq();
  *finished = IsTerminal(j->job.state()) && last >= j->next_seq - 1;
  // The final event carries the job as it is now (results included).
  for (pb::BenchEvent& e : *out) {
    if (IsTerminal(e.state()) && e.seq() == j->next_seq - 1) *e.mutable_job() = j->job;
  }
  return absl::OkStatus();
}

pb::ListVariantsResponse BenchScheduler::ListVariants(pb::BenchOp op) const {
  pb::ListVariantsResponse r;
  for (const Variant* v : registry_.ListAll()) {
    if (op != pb::BENCH_OP_UNSPECIFIED && static_cast<int>(v->op) != op) continue;
    pb::VariantInfo* i = r.add_variants();
    i->set_op(static_cast<pb::BenchOp>(v->op));
    i->set_name(v->name);
    i->set_backend(v->backend);
    i->set_description(v->description);
    i->set_is_default(v->is_default);
    i->set_test_only(v->test_only);
  }
  r.set_backend(backend_->Name());
  r.set_server_version(options_.server_version);
  absl::MutexLock l(&mu_);
  for (const auto& c : ceilings_) {
    if (c) *r.add_ceilings() = *c;
  }
  return r;
}

// ------------------------------------------------------------------ runner

void BenchScheduler::RunnerLoop(int device) {
  while (true) {
    std::shared_ptr<Job> j;
    {
      absl::MutexLock l(&mu_);
      while (!shutdown_ && !(j = NextLocked(device))) work_cv_.Wait(&mu_);
      if (shutdown_) return;
      j->cancel = false;
      j->cancel_reason.clear();
      j->job.set_state(pb::JOB_RUNNING);
      j->job.set_attempts(j->job.attempts() + 1);
      j->job.set_started_unix_ms(NowMs());
      j->job.set_queue_position(0);
      j->last_position = 0;
      j->job.clear_results();
      j->job.clear_error();
      const DeviceInfo info = backend_->GetDeviceInfo(device);
      j->job.set_device_name(info.name);
      j->job.set_driver(info.driver);
      pb::BenchEvent e;
      e.set_phase(pb::PHASE_STARTED);
      e.set_message(absl::StrCat("started on ", backend_->Name(), " device ", device, " (", info.name,
                                 "), attempt ", j->job.attempts()));
      EmitLocked(*j, std::move(e), true);
      RefreshPositionsLocked(device);
    }
    absl::Status st = Execute(j, device);
    Finish(j, st);
  }
}

void BenchScheduler::Finish(const std::shared_ptr<Job>& j, const absl::Status& st) {
  absl::MutexLock l(&mu_);
  pb::BenchJob& job = j->job;
  pb::BenchEvent e;
  const bool shutting_down = shutdown_ && (j->cancel_reason == kShutdownReason || !st.ok());
  if (shutting_down) {
    // Graceful stop: back to the queue for the next start; this attempt does not count.
    job.set_state(pb::JOB_QUEUED);
    job.set_attempts(std::max(0, job.attempts() - 1));
    job.clear_results();
    job.set_started_unix_ms(0);
    e.set_phase(pb::PHASE_REQUEUED);
    e.set_message("the server is shutting down; re-queued for its next start");
    EmitLocked(*j, std::move(e), true);
    return;
  }
  job.set_finished_unix_ms(NowMs());
  if (st.ok()) {
    job.set_state(pb::JOB_DONE);
    e.set_phase(pb::PHASE_DONE);
    int ok = 0;
    for (const auto& r : job.results()) ok += r.correct() ? 1 : 0;
    e.set_message(absl::StrCat("done: ", ok, " of ", job.results_size(), " variants passed the correctness gate"));
    e.set_progress(1.0);
  } else if (st.code() == absl::StatusCode::kCancelled) {
    job.set_state(pb::JOB_CANCELLED);
    job.set_error(std::string(st.message()));
    job.set_error_code(static_cast<int>(st.code()));
    e.set_phase(pb::PHASE_CANCELLED);
    e.set_message(job.error());
  } else {
    job.set_state(pb::JOB_FAILED);
    job.set_error(std::string(st.message()));
    job.set_error_code(static_cast<int>(st.code()));
    e.set_phase(pb::PHASE_FAILED);
    e.set_message(job.error());
  }
  EmitLocked(*j, std::move(e), true);
  if (options_.start_check) work_cv_.SignalAll();  // another device may start this tenant's next job
}

namespace {

// Runs `fn` on its own thread and waits, polling `stop` every 20 ms so that a
// cancelled job is not held up by a long host computation (the thread is
// left to finish on its own; it owns what it touches).
absl::Status RunStoppable(std::function<absl::Status()> fn, const std::function<absl::Status()>& stop) {
  struct Shared {
    absl::Mutex mu;
    bool done = false;
    absl::Status status;
  };
  auto shared = std::make_shared<Shared>();
  std::thread t([shared, fn = std::move(fn)] {
    absl::Status st = fn();
    absl::MutexLock l(&shared->mu);
    shared->status = st;
    shared->done = true;
  });
  while (true) {
    {
      absl::MutexLock l(&shared->mu);
      if (shared->mu.AwaitWithTimeout(absl::Condition(&shared->done), absl::Milliseconds(20))) {
        t.join();
        return shared->status;
      }
    }
    absl::Status st = stop();
    if (!st.ok()) {
      t.detach();
      return st;
    }
  }
}

std::vector<TensorView*> Views(OpCall& c) {
  return {&c.q,
          &c.k,
          &c.v,
          &c.fp8_in.q,
          &c.fp8_in.k,
          &c.fp8_in.v,
          &c.fp8_in.q_descale,
          &c.fp8_in.k_descale,
          &c.fp8_in.v_descale,
          &c.mla_in.q_lat,
          &c.mla_in.q_pe,
          &c.mla_in.kv,
          &c.mla_in.seq_lens,
          &c.mla_in.kv_indices,
          &c.mla_in.kv_indptr,
          &c.mla_in.q_lens,
          &c.moe_in.x,
          &c.moe_in.topk_ids,
          &c.moe_in.topk_weights,
          &c.moe_in.w13,
          &c.moe_in.w13_scales,
          &c.moe_in.w2,
          &c.moe_in.w2_scales};
}

}  // namespace

absl::Status BenchScheduler::Execute(const std::shared_ptr<Job>& jp, int device) {
  Job& j = *jp;
  // A full device queue is not a failure of the job: wait for room.
  auto on_device = [&](std::function<absl::Status()> fn) -> absl::Status {
    while (true) {
      absl::Status st = runner_(device, fn);
      if (st.code() != absl::StatusCode::kResourceExhausted || !absl::StrContains(st.message(), "queue")) {
        return st;
      }
      if (j.cancel) return st;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  pb::BenchJobSpec spec;
  {
    absl::MutexLock l(&mu_);
    spec = j.job.spec();
  }
  const double limit_s = spec.time_limit_s() > 0 ? spec.time_limit_s() : options_.default_time_limit_s;
  const double deadline = NowS() + limit_s;
  auto stop = [&]() -> absl::Status {
    if (j.cancel) {
      absl::MutexLock l(&mu_);
      return absl::CancelledError(j.cancel_reason.empty() ? "cancelled" : j.cancel_reason);
    }
    if (NowS() > deadline) {
      return absl::DeadlineExceededError(absl::StrFormat("time limit of %g s exceeded", limit_s));
    }
    return absl::OkStatus();
  };
  auto note = [&](pb::BenchPhase phase, std::string msg, double progress) {
    pb::BenchEvent e;
    e.set_phase(phase);
    e.set_message(std::move(msg));
    e.set_progress(progress);
    Emit(j, std::move(e));
  };
  const BenchOp op = static_cast<BenchOp>(spec.op());
  std::vector<const Variant*> variants;
  for (const std::string& name : spec.variants()) {
    KS_ASSIGN_OR_RETURN(const Variant* v, registry_.Find(op, name));
    variants.push_back(v);
  }
  const double tol = spec.tolerance() > 0 ? spec.tolerance() : DefaultTolerance(op);

  // 1. Inputs on the host.
  note(pb::PHASE_NOTE, "preparing inputs", 0.0);
  std::shared_ptr<PreparedJob> prepared;
  {
    absl::StatusOr<std::unique_ptr<PreparedJob>> p = PrepareJob(spec, reader_, j.job.tenant());
    if (!p.ok()) return p.status();
    prepared = std::move(*p);
  }
  KS_RETURN_IF_ERROR(stop());

  // 2. The device's ceilings, once per device.
  pb::DeviceCeilings ceilings;
  {
    bool have = false;
    {
      absl::MutexLock l(&mu_);
      if (ceilings_[device]) {
        ceilings = *ceilings_[device];
        have = true;
      }
    }
    if (!have) {
      note(pb::PHASE_NOTE, "measuring the device's GEMM and copy ceilings (once per device)", 0.01);
      // Cancellable between GEMM runs: a job cancelled meanwhile stops at once
      // (with its own reason), and the next job measures again.
      const absl::Status measured = on_device([&]() -> absl::Status {
        KS_ASSIGN_OR_RETURN(ceilings, MeasureCeilings(*backend_, device, options_.gemm_tflops,
                                                      options_.gemm_fp8_tflops, [&] { return !stop().ok(); }));
        return absl::OkStatus();
      });
      KS_RETURN_IF_ERROR(stop());
      KS_RETURN_IF_ERROR(measured);
      absl::MutexLock l(&mu_);
      ceilings_[device] = ceilings;
    }
    absl::MutexLock l(&mu_);
    *j.job.mutable_ceilings() = ceilings;
    j.job.set_shape_desc(prepared->shape_desc);
  }

  // 3. Inputs on the device, and the output buffers, accounted against the
  // device's and the tenant's memory limits for as long as the run holds them.
  auto rs = std::make_shared<RunState>();
  rs->prepared = prepared;
  const TensorDesc out_desc = prepared->host_call.OutputDesc();
  rs->host_out = HostTensor(out_desc.dtype, out_desc.shape);
  DeviceState dev;
  dev.call = prepared->host_call;
  if (spec.method().l2_flush()) {
    dev.flush_bytes = backend_->Name() == "cpu" ? (size_t{64} << 20) : (size_t{256} << 20);
  }
  {
    int64_t bytes = std::max<int64_t>(1, out_desc.num_bytes()) + 2 * static_cast<int64_t>(dev.flush_bytes);
    for (const auto& [name, t] : prepared->tensors) bytes += std::max<int64_t>(1, t.num_bytes());
    if (options_.reserve_memory) {
      const std::string what = absl::StrCat("benchmark job ", j.job.id(), " (inputs and output",
                                            dev.flush_bytes > 0 ? ", L2 flush buffers" : "", ")");
      absl::StatusOr<std::shared_ptr<void>> r = options_.reserve_memory(device, j.job.tenant(), bytes, what);
      if (!r.ok()) return r.status();
      dev.reservation = std::move(*r);
    }
  }
  KS_RETURN_IF_ERROR(on_device([&]() -> absl::Status {
    std::map<const void*, void*> moved;
    for (auto& [name, t] : prepared->tensors) {
      KS_ASSIGN_OR_RETURN(std::unique_ptr<DeviceMemory> m,
                          backend_->Allocate(device, std::max<size_t>(1, static_cast<size_t>(t.num_bytes()))));
      KS_RETURN_IF_ERROR(backend_->CopyToDevice(device, m->data(), t.bytes(), static_cast<size_t>(t.num_bytes())));
      moved[t.bytes()] = m->data();
      dev.inputs.push_back(std::move(m));
    }
    for (TensorView* v : Views(dev.call)) {
      if (v->data == nullptr) continue;
      auto it = moved.find(v->data);
      if (it == moved.end()) return absl::InternalError("an input view points outside the job's tensors");
      v->data = it->second;
    }
    KS_ASSIGN_OR_RETURN(dev.out,
                        backend_->Allocate(device, std::max<size_t>(1, static_cast<size_t>(out_desc.num_bytes()))));
    if (dev.flush_bytes > 0) {
      KS_ASSIGN_OR_RETURN(dev.flush_src, backend_->Allocate(device, dev.flush_bytes));
      KS_ASSIGN_OR_RETURN(dev.flush_dst, backend_->Allocate(device, dev.flush_bytes));
    }
    return backend_->Synchronize(device);
  }));
  KS_RETURN_IF_ERROR(stop());

  // 4. The fp64 reference for the correctness gate.
  // Large problems are checked on an exact sample of the output.
  auto sample = std::make_shared<OracleSample>();
  const bool sampled = prepared->flops > options_.max_gate_flops;
  const double max_gate_flops = options_.max_gate_flops;
  note(pb::PHASE_CHECKING, sampled ? "computing the fp64 oracle reference on a sample of the output"
                                   : "computing the fp64 oracle reference",
       0.02);
  KS_RETURN_IF_ERROR(RunStoppable(
      [prepared, sample, sampled, max_gate_flops]() -> absl::Status {
        if (sampled) {
          KS_ASSIGN_OR_RETURN(*sample, OracleReferenceSample(prepared->host_call, max_gate_flops));
        } else {
          KS_ASSIGN_OR_RETURN(sample->reference, OracleReference(prepared->host_call));
        }
        return absl::OkStatus();
      },
      stop));
  const std::vector<double>* reference = &sample->reference;
  if (sampled) {
    absl::MutexLock l(&mu_);
    j.job.add_notes(absl::StrCat("correctness gate on ", sample->desc, " (", sample->index.size(),
                                 " outputs; the full fp64 reference exceeds ", max_gate_flops, " FLOPs)"));
  }

  // 5. The gate: one launch of each variant, compared with the reference.
  TensorView device_out{out_desc, dev.out->data()};
  const std::vector<uint8_t> poison(static_cast<size_t>(out_desc.num_bytes()), 0xFF);  // bf16 NaN
  std::vector<pb::VariantResult> results(variants.size());
  std::vector<double> gate_seconds(variants.size(), 0);
  const double gate_share = 0.1;
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = *variants[i];
    pb::VariantResult& r = results[i];
    r.set_variant(v.name);
    r.set_backend(v.backend);
    r.set_description(v.description);
    r.set_tolerance(tol);
    r.set_flops(prepared->flops);
    r.set_bytes(prepared->bytes);
    {
      pb::BenchEvent e;
      e.set_phase(pb::PHASE_CHECKING);
      e.set_variant(v.name);
      e.set_message(absl::StrCat("checking ", v.name, " against the fp64 oracle"));
      e.set_progress(0.03 + gate_share * static_cast<double>(i) / static_cast<double>(variants.size()));
      Emit(j, std::move(e));
    }
    const double t0 = NowS();
    absl::Status run_st;
    if (v.on_host) {
      std::memcpy(rs->host_out.bytes(), poison.data(), poison.size());
      run_st = RunStoppable(
          [rs, &v, this, device]() -> absl::Status {
            TensorView out = rs->host_out.view();
            return v.run(*backend_, device, rs->prepared->host_call, out);
          },
          stop);
      if (absl::IsCancelled(run_st) || absl::IsDeadlineExceeded(run_st)) return run_st;
    } else {
      run_st = on_device([&]() -> absl::Status {
        KS_RETURN_IF_ERROR(backend_->CopyToDevice(device, device_out.data, poison.data(), poison.size()));
        KS_RETURN_IF_ERROR(v.run(*backend_, device, dev.call, device_out));
        KS_RETURN_IF_ERROR(backend_->Synchronize(device));
        return backend_->CopyToHost(device, rs->host_out.bytes(), device_out.data, poison.size());
      });
    }
    gate_seconds[i] = NowS() - t0;
    if (!run_st.ok()) {
      r.set_correct(false);
      r.set_error_message(run_st.ToString());
      r.set_gate_message(absl::StrCat("the variant failed to run: ", run_st.ToString()));
    } else {
      std::vector<double> got = numerics::ToDoubles(rs->host_out.view());
      // NaN/Inf anywhere fails, sampled or not.
      int64_t nan = 0;
      for (double x : got) nan += std::isfinite(x) ? 0 : 1;
      const size_t total = got.size();
      if (sampled) {
        std::vector<double> sub(sample->index.size());
        for (size_t k = 0; k < sub.size(); ++k) sub[k] = got[static_cast<size_t>(sample->index[k])];
        got = std::move(sub);
      }
      if (got.size() != reference->size()) return absl::InternalError("the oracle reference has the wrong size");
      numerics::ErrorMetrics m = numerics::CompareToReference(got.data(), reference->data(),
                                                             static_cast<int64_t>(got.size()));
      r.mutable_error()->set_rel_rms(m.rel_rms);
      r.mutable_error()->set_max_abs(m.max_abs);
      r.mutable_error()->set_nonfinite(std::max<int64_t>(m.nonfinite, nan));
      if (nan > 0 || m.nonfinite > 0) {
        r.set_correct(false);
        r.set_gate_message(absl::StrCat(std::max<int64_t>(nan, m.nonfinite), " of ", total,
                                        " outputs are NaN or Inf"));
      } else if (!(m.rel_rms <= tol)) {
        r.set_correct(false);
        r.set_gate_message(absl::StrFormat("rel_rms %.4g exceeds the tolerance %.4g", m.rel_rms, tol));
      } else {
        r.set_correct(true);
        r.set_gate_message(absl::StrFormat("rel_rms %.4g <= %.4g", m.rel_rms, tol));
      }
      if (sampled) absl::StrAppend(r.mutable_gate_message(), " (on a sample: ", sample->desc, ")");
    }
    if (!r.correct()) {
      pb::BenchEvent e;
      e.set_phase(pb::PHASE_RESULT);
      e.set_variant(v.name);
      e.set_message(absl::StrCat(v.name, " failed the correctness gate: ", r.gate_message()));
      *e.mutable_result() = r;
      absl::MutexLock l(&mu_);
      *j.job.add_results() = r;
      EmitLocked(j, std::move(e), true);
    }
    KS_RETURN_IF_ERROR(stop());
  }

  // 6. Timing, all in one window on the device's worker.
  std::vector<size_t> timed;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (results[i].correct()) timed.push_back(i);
  }
  const pb::MethodOptions& mo = spec.method();
  const pb::BenchMethod method = mo.method() == pb::BENCH_METHOD_UNSPECIFIED ? pb::METHOD_KERNEL : mo.method();
  const int warmup = mo.warmup() > 0 ? mo.warmup() : 500;
  const int iters = mo.iters() > 0 ? mo.iters() : 100;
  const int passes = method == pb::METHOD_PASSES ? (mo.passes() > 0 ? mo.passes() : 5) : 1;
  const int replays = mo.graph_replays() > 0 ? mo.graph_replays() : iters;
  const double warmin_s = std::max(mo.warmin_s(), options_.min_warmin_s);
  const double window_s = std::max(mo.window_s(), options_.min_window_s);
  const std::string method_name =
      method == pb::METHOD_PASSES ? absl::StrCat("passes (", passes, " x ", iters, ")")
      : method == pb::METHOD_SUSTAINED ? absl::StrFormat("sustained (%.3g s warm-in, %.3g s window)", warmin_s, window_s)
      : method == pb::METHOD_GRAPH     ? absl::StrCat("graph (", warmup, " warm-up launches, ", replays, " replays)")
                                       : absl::StrCat("kernel (", warmup, " warm-up, ", iters, " timed)");
  // Which clock timed each variant, named in its result's method.
  enum class Timer { kUnknown, kHostClock, kDeviceEvents, kGraphEvents };
  std::vector<Timer> timer(variants.size(), Timer::kUnknown);
  auto timer_name = [](Timer t) -> const char* {
    switch (t) {
      case Timer::kDeviceEvents:
        return "device events";
      case Timer::kGraphEvents:
        return "device events around CUDA-graph replays";
      default:
        return "host clock around synchronised launches";
    }
  };

  auto launch = [&](size_t i) -> absl::Status {
    const Variant& v = *variants[i];
    if (v.on_host) {
      TensorView out = rs->host_out.view();
      return v.run(*backend_, device, rs->prepared->host_call, out);
    }
    return v.run(*backend_, device, dev.call, device_out);
  };
  auto sync = [&](size_t i) -> absl::Status {
    return variants[i]->on_host ? absl::OkStatus() : backend_->Synchronize(device);
  };
  auto flush = [&]() -> absl::Status {
    if (!mo.l2_flush()) return absl::OkStatus();
    KS_RETURN_IF_ERROR(backend_->CopyOnDevice(device, dev.flush_dst->data(), dev.flush_src->data(), dev.flush_bytes));
    return backend_->Synchronize(device);
  };
  // Launch counts of host variants are capped: the oracle is slow.
  auto counts = [&](size_t i, int* w, int* n) {
    *w = warmup;
    *n = method == pb::METHOD_GRAPH ? replays : iters;
    if (variants[i]->on_host) {
      *w = 0;
      *n = std::max(1, gate_seconds[i] > 5 ? 1 : std::min(iters, options_.max_host_launches));
    }
  };
  // m launches back to back; *ms: their total. Device events where the
  // backend has them (TimeLaunches), else the host clock around the launches
  // and one synchronisation (the cpu backend; host variants).
  auto timed_run = [&](size_t i, int m, double* ms) -> absl::Status {
    if (!variants[i]->on_host && timer[i] != Timer::kHostClock) {
      int calls = 0;
      absl::StatusOr<double> per = backend_->TimeLaunches(
          device,
          [&]() -> absl::Status {
            ++calls;
            return launch(i);
          },
          m);
      if (per.ok()) {
        timer[i] = Timer::kDeviceEvents;
        *ms = *per * m;
        return absl::OkStatus();
      }
      // UNIMPLEMENTED before any launch: the backend has no device timing.
      if (!absl::IsUnimplemented(per.status()) || calls > 0) return per.status();
    }
    timer[i] = Timer::kHostClock;
    const double t0 = NowS();
    for (int k = 0; k < m; ++k) KS_RETURN_IF_ERROR(launch(i));
    KS_RETURN_IF_ERROR(sync(i));
    *ms = (NowS() - t0) * 1e3;
    return absl::OkStatus();
  };
  // timed_run in runs of at most ~kStopCheckS each, with a cancellation and
  // time-limit check between them: a batch of a long job's launches must not
  // hold the device past a Cancel. The first run is one launch; later ones
  // are sized from the time per launch seen so far.
  constexpr double kStopCheckS = 0.1;
  auto timed_batch = [&](size_t i, int m, double* ms) -> absl::Status {
    *ms = 0;
    int done = 0, chunk = 1;
    while (done < m) {
      const int c = std::min(chunk, m - done);
      double run_ms = 0;
      KS_RETURN_IF_ERROR(timed_run(i, c, &run_ms));
      *ms += run_ms;
      done += c;
      if (done < m) KS_RETURN_IF_ERROR(stop());
      const double per_s = *ms * 1e-3 / done;
      chunk = static_cast<int>(std::clamp(kStopCheckS / std::max(per_s, 1e-9), 1.0, 1e6));
    }
    return absl::OkStatus();
  };
  // n launches; returns per-sample means in ms (batches, or single launches with flush).
  auto time_launches = [&](size_t i, int n, std::vector<double>* samples, double* total_ms) -> absl::Status {
    *total_ms = 0;
    const int batches = mo.l2_flush() ? n : std::min(n, 10);
    int done = 0;
    for (int b = 0; b < batches; ++b) {
      const int m = (n - done) / (batches - b);
      KS_RETURN_IF_ERROR(flush());
      KS_RETURN_IF_ERROR(stop());
      double ms = 0;
      KS_RETURN_IF_ERROR(timed_batch(i, m, &ms));
      *total_ms += ms;
      samples->push_back(ms / m);
      done += m;
    }
    return absl::OkStatus();
  };
  auto warm = [&](size_t i, int w) -> absl::Status {
    double last_check = NowS();
    for (int k = 0; k < w; ++k) {
      // Queued launches run asynchronously: check at least every ~0.1 s of host time.
      if (k % 16 == 0 || NowS() - last_check > kStopCheckS) {
        KS_RETURN_IF_ERROR(stop());
        last_check = NowS();
      }
      KS_RETURN_IF_ERROR(flush());
      KS_RETURN_IF_ERROR(launch(i));
    }
    return sync(i);
  };
  const double steps = static_cast<double>(std::max<size_t>(1, timed.size()) * passes);
  double step = 0;
  auto progress_event = [&](pb::BenchPhase phase, size_t i, int pass, std::string msg) {
    pb::BenchEvent e;
    e.set_phase(phase);
    e.set_variant(variants[i]->name);
    e.set_pass(pass);
    e.set_passes(passes);
    e.set_progress(0.03 + gate_share + (1.0 - 0.03 - gate_share) * step / steps);
    e.set_message(std::move(msg));
    Emit(j, std::move(e));
  };
  auto land = [&](size_t i) {
    pb::VariantResult& r = results[i];
    r.set_timed(true);
    r.set_method(absl::StrCat(method_name, "; timer: ", timer_name(timer[i])));
    const double s = r.time().value_ms() * 1e-3;
    if (s > 0) {
      r.set_tflops(r.flops() / s / 1e12);
      r.set_tbps(r.bytes() / s / 1e12);
      const double gemm = (op == BenchOp::kFp8Attention && ceilings.gemm_fp8_tflops() > 0)
                              ? ceilings.gemm_fp8_tflops()
                              : ceilings.gemm_tflops();
      if (gemm > 0) r.set_frac_gemm_ceiling(r.tflops() / gemm);
      if (ceilings.copy_tbps() > 0) r.set_frac_copy_ceiling(r.tbps() / ceilings.copy_tbps());
      // Over 100 % is reported as measured (clamping would hide it), with a
      // note: the ceiling's measurement, not the variant, is what is off.
      std::vector<std::string> over;
      if (r.frac_gemm_ceiling() > 1.0) {
        over.push_back(absl::StrFormat("%.3g TFLOP/s is %.0f%% of the GEMM ceiling of %.3g TFLOP/s (%s)", r.tflops(),
                                       100 * r.frac_gemm_ceiling(), gemm, ceilings.gemm_desc()));
      }
      if (r.frac_copy_ceiling() > 1.0) {
        over.push_back(absl::StrFormat("%.3g TB/s is %.0f%% of the copy ceiling of %.3g TB/s (%s)", r.tbps(),
                                       100 * r.frac_copy_ceiling(), ceilings.copy_tbps(), ceilings.copy_desc()));
      }
      if (!over.empty()) {
        r.set_ceiling_note(absl::StrCat(absl::StrJoin(over, "; "),
                                        ": the ceiling measurement was below the achieved rate, so this fraction "
                                        "is not of a real ceiling"));
      }
    }
    pb::BenchEvent e;
    e.set_phase(pb::PHASE_RESULT);
    e.set_variant(r.variant());
    e.set_message(absl::StrFormat("%s: %.4f ms, %.3g TFLOP/s, %.3g TB/s", r.variant(), r.time().value_ms(),
                                  r.tflops(), r.tbps()));
    *e.mutable_result() = r;
    absl::MutexLock l(&mu_);
    if (!r.ceiling_note().empty()) j.job.add_notes(absl::StrCat(r.variant(), ": ", r.ceiling_note()));
    *j.job.add_results() = r;
    EmitLocked(j, std::move(e), true);
  };

  absl::Status window = on_device([&]() -> absl::Status {
    if (method == pb::METHOD_KERNEL) {
      for (size_t i : timed) {
        int w, n;
        counts(i, &w, &n);
        progress_event(pb::PHASE_WARMING, i, 1, absl::StrCat("warming ", variants[i]->name, ": ", w, " launches"));
        KS_RETURN_IF_ERROR(warm(i, w));
        progress_event(pb::PHASE_TIMING, i, 1, absl::StrCat("timing ", variants[i]->name, ": ", n, " launches"));
        std::vector<double> samples;
        double total = 0;
        KS_RETURN_IF_ERROR(time_launches(i, n, &samples, &total));
        pb::TimeStats ts = ComputeStats(samples);
        ts.set_mean_ms(total / n);
        ts.set_value_ms(total / n);
        ts.set_count(n);
        *results[i].mutable_time() = ts;
        step += 1;
        land(i);
      }
    } else if (method == pb::METHOD_PASSES) {
      for (size_t i : timed) {
        int w, n;
        counts(i, &w, &n);
        progress_event(pb::PHASE_WARMING, i, 0, absl::StrCat("warming ", variants[i]->name, ": ", w, " launches"));
        KS_RETURN_IF_ERROR(warm(i, w));
      }
      std::vector<std::vector<double>> pass_ms(variants.size());
      for (int p = 0; p < passes; ++p) {
        for (size_t k = 0; k < timed.size(); ++k) {
          const size_t i = timed[(k + static_cast<size_t>(p)) % timed.size()];
          int w, n;
          counts(i, &w, &n);
          progress_event(pb::PHASE_TIMING, i, p + 1,
                         absl::StrCat("pass ", p + 1, " of ", passes, ": ", variants[i]->name));
          std::vector<double> samples;
          double total = 0;
          KS_RETURN_IF_ERROR(time_launches(i, n, &samples, &total));
          pass_ms[i].push_back(total / n);
          step += 1;
        }
      }
      for (size_t i : timed) {
        pb::TimeStats ts = ComputeStats(pass_ms[i]);
        ts.set_value_ms(Median(pass_ms[i]));
        int w, n;
        counts(i, &w, &n);
        ts.set_count(static_cast<int64_t>(n) * passes);
        *results[i].mutable_time() = ts;
        for (double x : pass_ms[i]) results[i].add_pass_ms(x);
        land(i);
      }
    } else if (method == pb::METHOD_GRAPH) {
      for (size_t i : timed) {
        int w, n;
        counts(i, &w, &n);
        progress_event(pb::PHASE_WARMING, i, 1, absl::StrCat("warming ", variants[i]->name, ": ", w, " launches"));
        KS_RETURN_IF_ERROR(warm(i, w));
        std::vector<double> samples;
        double total = 0;
        if (variants[i]->on_host) {
          // Host code has no graph: timed like method kernel (host clock).
          progress_event(pb::PHASE_TIMING, i, 1,
                         absl::StrCat("timing ", variants[i]->name, " on the host clock: ", n, " launches"));
          KS_RETURN_IF_ERROR(time_launches(i, n, &samples, &total));
        } else {
          progress_event(pb::PHASE_TIMING, i, 1,
                         absl::StrCat("timing ", variants[i]->name, ": ", n, " graph replays"));
          // Up to 10 batches, each its own capture, with a cancellation check between.
          const int batches = std::min(n, 10);
          int done = 0;
          absl::Status capture;
          for (int b = 0; b < batches && capture.ok(); ++b) {
            const int m = (n - done) / (batches - b);
            KS_RETURN_IF_ERROR(stop());
            int calls = 0;
            absl::StatusOr<double> per = backend_->TimeGraphReplays(
                device,
                [&]() -> absl::Status {
                  ++calls;
                  return launch(i);
                },
                m);
            if (per.ok()) {
              total += *per * m;
              samples.push_back(*per);
              done += m;
            } else if (absl::IsFailedPrecondition(per.status()) ||
                       (absl::IsUnimplemented(per.status()) && calls == 0)) {
              capture = per.status();  // this variant cannot be graph-timed; the others can
            } else {
              return per.status();
            }
          }
          if (!capture.ok()) {
            results[i].set_error_message(capture.ToString());
            const std::string why =
                absl::StrCat(variants[i]->name, " not timed: method graph could not capture it: ", capture.ToString());
            step += 1;
            pb::BenchEvent e;
            e.set_phase(pb::PHASE_RESULT);
            e.set_variant(variants[i]->name);
            e.set_message(why);
            *e.mutable_result() = results[i];
            absl::MutexLock l(&mu_);
            j.job.add_notes(why);
            *j.job.add_results() = results[i];  // reported (gate passed), neither timed nor ranked
            EmitLocked(j, std::move(e), true);
            continue;
          }
          timer[i] = Timer::kGraphEvents;
        }
        pb::TimeStats ts = ComputeStats(samples);
        ts.set_mean_ms(total / n);
        ts.set_value_ms(total / n);
        ts.set_count(n);
        *results[i].mutable_time() = ts;
        step += 1;
        land(i);
      }
    } else {  // sustained
      for (size_t ti = 0; ti < timed.size(); ++ti) {
        const size_t i = timed[ti];
        progress_event(pb::PHASE_WARMING, i, 1,
                       absl::StrFormat("warming %s for %.3g s", variants[i]->name, warmin_s));
        double t_start = NowS();
        int batch = 1;
        while (NowS() - t_start < warmin_s) {
          KS_RETURN_IF_ERROR(stop());
          const double t0 = NowS();
          for (int k = 0; k < batch; ++k) KS_RETURN_IF_ERROR(launch(i));
          KS_RETURN_IF_ERROR(sync(i));
          // Batches of about 20 ms keep the device busy between synchronisations.
          const double per = (NowS() - t0) / batch;
          batch = std::clamp(static_cast<int>(0.02 / std::max(per, 1e-7)), 1, 100000);
        }
        progress_event(pb::PHASE_TIMING, i, 1,
                       absl::StrFormat("timing %s for %.3g s at sustained clocks", variants[i]->name, window_s));
        ClockSampler sampler(backend_->Name(), device);
        sampler.Start();
        std::vector<double> samples;
        double total_ms = 0;
        int64_t launches = 0;
        t_start = NowS();
        double last_note = t_start;
        while (NowS() - t_start < window_s) {
          absl::Status st = stop();
          if (!st.ok()) {
            sampler.Stop();
            return st;
          }
          const double t0 = NowS();
          for (int k = 0; k < batch; ++k) KS_RETURN_IF_ERROR(launch(i));
          KS_RETURN_IF_ERROR(sync(i));
          const double ms = (NowS() - t0) * 1e3;
          total_ms += ms;
          launches += batch;
          samples.push_back(ms / batch);
          if (NowS() - last_note > 0.5) {
            last_note = NowS();
            step = static_cast<double>(ti) + std::min(1.0, (last_note - t_start) / window_s);
            progress_event(pb::PHASE_TIMING, i, 1,
                           absl::StrFormat("%s: %.1f of %.3g s", variants[i]->name, last_note - t_start, window_s));
          }
        }
        *results[i].mutable_clocks() = sampler.Stop();
        pb::TimeStats ts = ComputeStats(samples);
        ts.set_mean_ms(total_ms / static_cast<double>(launches));
        ts.set_value_ms(total_ms / static_cast<double>(launches));
        ts.set_count(launches);
        *results[i].mutable_time() = ts;
        step = static_cast<double>(ti) + 1;
        land(i);
      }
    }
    return absl::OkStatus();
  });
  KS_RETURN_IF_ERROR(window);

  // 7. Rank the timed variants; speedups against the first one listed.
  absl::MutexLock l(&mu_);
  std::vector<pb::VariantResult*> ranked;
  for (auto& r : *j.job.mutable_results()) {
    if (r.correct() && r.timed() && r.time().value_ms() > 0) ranked.push_back(&r);
  }
  double first_ms = 0;
  for (const std::string& name : spec.variants()) {
    for (pb::VariantResult* r : ranked) {
      if (first_ms == 0 && r->variant() == name) first_ms = r->time().value_ms();
    }
  }
  std::sort(ranked.begin(), ranked.end(),
            [](const pb::VariantResult* a, const pb::VariantResult* b) { return a->time().value_ms() < b->time().value_ms(); });
  for (size_t k = 0; k < ranked.size(); ++k) {
    ranked[k]->set_rank(static_cast<int>(k) + 1);
    ranked[k]->set_speedup_vs_first(first_ms / ranked[k]->time().value_ms());
  }
  // Results in the order the spec lists the variants.
  std::vector<pb::VariantResult> ordered;
  for (const std::string& name : spec.variants()) {
    for (const auto& r : j.job.results()) {
      if (r.variant() == name) ordered.push_back(r);
    }
  }
  j.job.clear_results();
  for (auto& r : ordered) *j.job.add_results() = std::move(r);
  for (const auto& r : results) {
    if (r.correct() && !r.timed()) {
      j.job.add_notes(absl::StrCat(r.variant(), " passed the gate but was not timed"));
    }
  }
  PersistLocked(j);
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace kernelserve
