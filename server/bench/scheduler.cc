#include "server/bench/scheduler.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/bench/job_run.h"
#include "server/bench/leaderboard.h"
#include "server/bench/op_registry.h"
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

std::string NewJobId() {
  static std::mt19937_64 rng(std::random_device{}() ^
                             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  static absl::Mutex mu;
  absl::MutexLock l(&mu);
  return absl::StrFormat("job-%012x", rng() & 0xffffffffffffull);
}

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
  std::shared_ptr<JobStore> store = options.fleet.store;
  if (store == nullptr) {
    const std::string path = options.data_dir.empty() ? ":memory:" : options.data_dir + "/bench.db";
    absl::StatusOr<std::unique_ptr<JobStore>> opened = JobStore::Open(path);
    if (!opened.ok()) {
      if (lock_fd >= 0) close(lock_fd);
      return opened.status();
    }
    store = std::move(*opened);
  }
  std::unique_ptr<BenchScheduler> s(
      new BenchScheduler(backend, std::move(options), std::move(runner), std::move(reader), std::move(store)));
  s->lock_fd_ = lock_fd;
  VariantOptions vo;
  vo.test_variants = s->options_.test_variants;
  KS_RETURN_IF_ERROR(RegisterBackendVariants(*backend, vo, &s->registry_));
  KS_RETURN_IF_ERROR(RegisterOracleVariants(&s->registry_));
  if (s->options_.user_kernels.enabled) {
    s->builder_ = user_kernels::KernelBuilder::Create(s->options_.user_kernels, s->options_.data_dir);
    spdlog::info("user kernels: {}", s->builder_->Describe());
  }
  KS_RETURN_IF_ERROR(s->fleet_ ? s->FleetRecover() : s->Recover());
  for (int d = 0; d < backend->DeviceCount(); ++d) {
    s->threads_.emplace_back([p = s.get(), d] { p->fleet_ ? p->FleetRunnerLoop(d) : p->RunnerLoop(d); });
  }
  if (s->fleet_) s->threads_.emplace_back([p = s.get()] { p->FleetHeartbeatLoop(); });
  return s;
}

BenchScheduler::BenchScheduler(Backend* backend, BenchOptions options, DeviceRunner runner,
                               BufferReader reader, std::shared_ptr<JobStore> store)
    : backend_(backend),
      options_(std::move(options)),
      runner_(std::move(runner)),
      reader_(std::move(reader)),
      store_(std::move(store)),
      fleet_(options_.fleet.store.get()),
      ceilings_(backend->DeviceCount()) {}

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
  RefreshPositionsLocked();
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
  WriteLocked(const_cast<Job&>(job), nullptr, /*with_job=*/true);
}

void BenchScheduler::WriteLocked(Job& job, const pb::BenchEvent* event, bool with_job) {
  absl::Status st;
  if (fleet_ == nullptr) {
    st = with_job ? (event ? store_->PutJobAndEvent(job.job, *event) : store_->PutJob(job.job))
                  : store_->AppendEvent(*event);
  } else if (job.lost) {
    return;
  } else {
    st = fleet_->PutClaimed(with_job ? &job.job : nullptr, event, options_.fleet.node_id, job.claim_attempt);
    if (st.code() == absl::StatusCode::kFailedPrecondition) {
      // Another node requeued it (this node's heartbeat went stale): stop, write nothing more.
      job.lost = true;
      job.cancel_reason = absl::StrCat("this node (", options_.fleet.node_id, ") lost the job: ", st.message());
      job.cancel = true;
      spdlog::warn("bench: {}", job.cancel_reason);
      return;
    }
    if (!st.ok()) {
      job.unsaved = job.unsaved || with_job;
      if (event != nullptr && with_job) job.unsaved_event = *event;
    } else if (with_job) {
      job.unsaved = false;
      job.unsaved_event.reset();
    }
  }
  // Keep going on a store error (a full disk, a database restart): the
  // in-memory state is still served.
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
  WriteLocked(job, &e, with_job);
  if (job.events_loaded) job.events.push_back(std::move(e));
  event_cv_.SignalAll();
}

void BenchScheduler::Emit(Job& job, pb::BenchEvent e, bool with_job) {
  absl::MutexLock l(&mu_);
  EmitLocked(job, std::move(e), with_job);
}

// Positions count, for each queued job, the queued jobs ahead of it (higher
// priority, then older) that compete for one of its devices: a pinned job
// competes with the jobs pinned to its device and with the `any` ones; an
// `any` job with every queued job.
void BenchScheduler::RefreshPositionsLocked() {
  std::vector<Job*> queued;
  for (auto& [id, j] : jobs_) {
    if (j->job.state() == pb::JOB_QUEUED) queued.push_back(j.get());
  }
  std::sort(queued.begin(), queued.end(), [](const Job* a, const Job* b) {
    if (a->job.spec().priority() != b->job.spec().priority()) {
      return a->job.spec().priority() > b->job.spec().priority();
    }
    return a->order < b->order;
  });
  for (size_t i = 0; i < queued.size(); ++i) {
    Job& j = *queued[i];
    int pos = 1;
    for (size_t k = 0; k < i; ++k) {
      const pb::BenchJobSpec& ahead = queued[k]->job.spec();
      pos += !j.job.spec().has_device() || !ahead.has_device() || ahead.device() == j.job.spec().device();
    }
    j.job.set_queue_position(pos);
    if (pos != j.last_position) {
      j.last_position = pos;
      pb::BenchEvent e;
      e.set_phase(pb::PHASE_QUEUED);
      e.set_queue_position(pos);
      e.set_message(j.job.spec().has_device()
                        ? absl::StrCat("queued at position ", pos, " on device ", j.job.spec().device())
                        : absl::StrCat("queued at position ", pos, " for the first free ", backend_->Name(),
                                       " device"));
      EmitLocked(j, std::move(e), false);
    }
  }
}

std::shared_ptr<BenchScheduler::Job> BenchScheduler::NextLocked(int device) {
  std::shared_ptr<Job> best;
  std::map<std::string, int64_t> running;  // per tenant over all devices, for options_.start_check
  const bool sick = options_.device_check && !options_.device_check(device).ok();
  if (options_.start_check) {
    for (const auto& [id, j] : jobs_) running[j->job.tenant()] += j->job.state() == pb::JOB_RUNNING;
  }
  for (auto& [id, j] : jobs_) {
    if (j->job.state() != pb::JOB_QUEUED) continue;
    if (j->job.spec().has_device() && j->job.spec().device() != device) continue;
    // An unhealthy device takes only the jobs pinned to it, to fail them (Execute).
    if (!j->job.spec().has_device() && sick) continue;
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
  if (FindBenchOp(static_cast<BenchOp>(spec.op())) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("spec.op: expected ", BenchOpNames(", ", " or ")));
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
  KS_RETURN_IF_ERROR(ValidateUserKernels(spec));
  if (spec.variants().empty() && spec.user_kernels().empty() && registry_.Default(op) == nullptr) {
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
  if (m.method() == pb::METHOD_GRAPH && !backend_->Capabilities().graph_replay) {
    return absl::FailedPreconditionError(absl::StrCat(
        "spec.method: method graph replays device graphs (CUDA graphs) and needs a backend with graph capture; "
        "backend ",
        backend_->Name(), " of this server has none"));
  }
  if (!pb::BenchMethod_IsValid(m.method())) return absl::InvalidArgumentError("spec.method.method: unknown method");
  if (!(spec.time_limit_s() >= 0) || spec.time_limit_s() > options_.max_time_limit_s) {  // NaN too
    return absl::InvalidArgumentError(absl::StrCat("spec.time_limit_s: expected 0 (default ",
                                                   options_.default_time_limit_s, " s) up to ",
                                                   options_.max_time_limit_s, " s, got ", spec.time_limit_s()));
  }
  if (spec.has_device() && (spec.device() < 0 || spec.device() >= backend_->DeviceCount())) {
    return absl::InvalidArgumentError(absl::StrCat("spec.device: this server has devices 0..",
                                                   backend_->DeviceCount() - 1,
                                                   " (or leave it unset for the first free one), got ", spec.device()));
  }
  if (spec.has_device() && options_.device_check) {
    if (absl::Status sick = options_.device_check(spec.device()); !sick.ok()) {
      return absl::Status(sick.code(), absl::StrCat("spec.device: ", sick.message()));
    }
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

// Users' kernels: checked before anything is compiled (sizes, flags, names)
// against what ABI v1 gives each op (kernels/api/user_kernel_abi.h).
absl::Status BenchScheduler::ValidateUserKernels(const pb::BenchJobSpec& spec) const {
  if (spec.user_kernels().empty()) return absl::OkStatus();
  if (builder_ == nullptr) {
    return absl::FailedPreconditionError("spec.user_kernels: user kernels are off on this server (--user_kernels)");
  }
  if (spec.user_kernels_size() > options_.max_user_kernels_per_job) {
    return absl::InvalidArgumentError(absl::StrCat("spec.user_kernels: at most ", options_.max_user_kernels_per_job,
                                                   " per job, got ", spec.user_kernels_size()));
  }
  if (spec.inputs().kind() == pb::INPUT_BUFFERS) {
    return absl::InvalidArgumentError(
        "spec.inputs.kind: a job with user kernels generates its inputs from a secret seed (fresh per run), "
        "so it cannot take INPUT_BUFFERS");
  }
  if (spec.op() == pb::OP_FP8_ATTENTION &&
      (spec.attention().hadamard() || spec.attention().descale_mode() == pb::PER_HEAD)) {
    return absl::InvalidArgumentError(
        "spec.attention: user FP8 attention kernels (ABI v1) take per-tensor descales without a Hadamard "
        "rotation; set hadamard false and descale_mode per-tensor");
  }
  if (spec.op() == pb::OP_MLA_DECODE && spec.mla().page_size() != 0) {
    return absl::InvalidArgumentError(
        "spec.mla.page_size: user MLA decode kernels (ABI v1) read contiguous KV; expected 0, got " +
        std::to_string(spec.mla().page_size()));
  }
  // A code object must target the gfx architecture of the devices (the
  // job's, or the first: a node's HIP devices are alike).
  const std::string arch =
      backend_->Name() == "hip"
          ? user_kernels::HipArchFromDriver(backend_->GetDeviceInfo(spec.has_device() ? spec.device() : 0).driver)
          : "";
  std::set<std::string> names(spec.variants().begin(), spec.variants().end());
  for (int i = 0; i < spec.user_kernels_size(); ++i) {
    const std::string field = absl::StrCat("spec.user_kernels[", i, "]");
    KS_RETURN_IF_ERROR(builder_->Check(spec.user_kernels(i), spec.op(), backend_->Name(), field, arch));
    if (!names.insert(user_kernels::UserVariantName(spec.user_kernels(i))).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".name: ",
                                                     QuoteClientText(spec.user_kernels(i).name()), " is used twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<pb::LeaderboardResponse> BenchScheduler::Leaderboard(const pb::LeaderboardRequest& request,
                                                                   const std::string& tenant) {
  KS_RETURN_IF_ERROR(ValidateLeaderboardRequest(request));
  KS_ASSIGN_OR_RETURN(std::vector<pb::BenchJob> jobs, store_->LoadJobs());
  if (!tenant.empty()) {
    jobs.erase(std::remove_if(jobs.begin(), jobs.end(), [&](const pb::BenchJob& j) { return j.tenant() != tenant; }),
               jobs.end());
  }
  return RankLeaderboard(jobs, request);
}

absl::StatusOr<pb::BenchJob> BenchScheduler::Submit(pb::BenchJobSpec spec, const std::string& tenant) {
  if (!tenant.empty()) spec.set_submitter(tenant);
  if (spec.submitter().empty()) spec.set_submitter("anonymous");
  KS_RETURN_IF_ERROR(ValidateSubmit(spec, tenant));
  if (spec.variants().empty() && spec.user_kernels().empty()) {
    spec.add_variants(registry_.Default(static_cast<BenchOp>(spec.op()))->name);
  }
  if (fleet_) return FleetSubmit(std::move(spec), tenant);
  absl::MutexLock l(&mu_);
  if (shutdown_) return absl::UnavailableError("the benchmark scheduler is shutting down");
  std::vector<const pb::BenchJob*> all;
  for (const auto& [id, j] : jobs_) all.push_back(&j->job);
  KS_RETURN_IF_ERROR(CheckSubmitLimits(all, spec, tenant));
  auto j = std::make_shared<Job>();
  j->order = next_order_++;
  j->job = NewQueuedJob(std::move(spec), tenant);
  pb::BenchJob& job = j->job;
  // Stored before it is visible: a job the store refused does not exist.
  absl::Status stored = store_->PutJob(job);
  if (!stored.ok()) {
    return absl::UnavailableError(absl::StrCat("the job could not be stored, so it was not queued: ",
                                               stored.message()));
  }
  jobs_[job.id()] = j;
  RefreshPositionsLocked();
  work_cv_.SignalAll();
  return job;
}

absl::Status BenchScheduler::CheckSubmitLimits(const std::vector<const pb::BenchJob*>& jobs,
                                               const pb::BenchJobSpec& spec, const std::string& tenant) const {
  int active = 0;
  int64_t queued = 0;
  for (const pb::BenchJob* j : jobs) {
    active += j->spec().submitter() == spec.submitter() &&
              (j->state() == pb::JOB_QUEUED || j->state() == pb::JOB_RUNNING);
    queued += j->tenant() == tenant && j->state() == pb::JOB_QUEUED;
  }
  if (options_.submit_check) KS_RETURN_IF_ERROR(options_.submit_check(tenant, queued));
  if (active >= options_.max_jobs_per_submitter) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "submitter \"", spec.submitter(), "\" already has ", active,
        " queued or running benchmark jobs; the limit is ", options_.max_jobs_per_submitter,
        " (--bench_max_jobs_per_submitter)"));
  }
  return absl::OkStatus();
}

pb::BenchJob BenchScheduler::NewQueuedJob(pb::BenchJobSpec spec, const std::string& tenant) const {
  pb::BenchJob job;
  job.set_id(NewJobId());
  *job.mutable_spec() = std::move(spec);
  job.set_state(pb::JOB_QUEUED);
  job.set_created_unix_ms(NowMs());
  job.set_backend(backend_->Name());
  job.set_server_version(options_.server_version);
  job.set_shape_desc(FindBenchOp(static_cast<BenchOp>(job.spec().op()))->ShapeDesc(job.spec()));
  job.set_tenant(tenant);
  return job;
}

absl::StatusOr<pb::BenchJob> BenchScheduler::Get(const std::string& id, const std::string& tenant) {
  if (fleet_) return FleetGet(id, tenant);
  absl::MutexLock l(&mu_);
  std::shared_ptr<Job> j = FindLocked(id, tenant);
  if (!j) return absl::NotFoundError(absl::StrCat("no benchmark job ", QuoteClientText(id)));
  return j->job;
}

std::vector<pb::BenchJob> BenchScheduler::List(const pb::ListBenchRequest& request, const std::string& tenant,
                                               int64_t max_bytes, bool* truncated) {
  if (fleet_) return FleetList(request, tenant, max_bytes, truncated);
  absl::MutexLock l(&mu_);
  std::vector<const Job*> all;
  for (const auto& [id, j] : jobs_) all.push_back(j.get());
  std::sort(all.begin(), all.end(), [](const Job* a, const Job* b) { return a->order > b->order; });
  std::vector<const pb::BenchJob*> newest_first;
  for (const Job* j : all) newest_first.push_back(&j->job);
  return SelectJobs(newest_first, request, tenant, max_bytes, truncated);
}

std::vector<pb::BenchJob> BenchScheduler::SelectJobs(const std::vector<const pb::BenchJob*>& newest_first,
                                                     const pb::ListBenchRequest& request, const std::string& tenant,
                                                     int64_t max_bytes, bool* truncated) {
  std::vector<const pb::BenchJob*> all;
  for (const pb::BenchJob* j : newest_first) {
    if (!tenant.empty() && j->tenant() != tenant) continue;
    if (!request.submitter().empty() && j->spec().submitter() != request.submitter()) continue;
    if (!request.states().empty() &&
        std::find(request.states().begin(), request.states().end(), j->state()) == request.states().end()) {
      continue;
    }
    all.push_back(j);
  }
  const size_t limit = request.limit() > 0 ? static_cast<size_t>(request.limit()) : 100;
  std::vector<pb::BenchJob> out;
  if (truncated != nullptr) *truncated = false;
  int64_t bytes = 0;
  for (size_t i = 0; i < all.size() && i < limit; ++i) {
    pb::BenchJob job = *all[i];
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
  const std::string why = reason.empty() ? "cancelled by request" : absl::StrCat("cancelled: ", reason);
  if (fleet_) return FleetCancel(id, why, tenant);
  absl::MutexLock l(&mu_);
  std::shared_ptr<Job> j = FindLocked(id, tenant);
  if (!j) return absl::NotFoundError(absl::StrCat("no benchmark job ", QuoteClientText(id)));
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
      RefreshPositionsLocked();
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
  std::shared_ptr<Job> j;
  if (fleet_) {
    {
      absl::MutexLock l(&mu_);
      j = FindLocked(id, tenant);
    }
    // Not running here: its events are the store's.
    if (!j) return FleetWaitEvents(id, after_seq, timeout, out, finished, tenant);
  }
  absl::MutexLock l(&mu_);
  if (!j) j = FindLocked(id, tenant);
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
  for (const pb::DeviceCeilings& c : ceilings_.All()) *r.add_ceilings() = c;
  return r;
}

// ------------------------------------------------------------------ runner

void BenchScheduler::DeviceHealthChanged() {
  absl::MutexLock l(&mu_);
  work_cv_.SignalAll();
}

void BenchScheduler::RunnerLoop(int device) {
  while (true) {
    std::shared_ptr<Job> j;
    {
      absl::MutexLock l(&mu_);
      while (!shutdown_ && !(j = NextLocked(device))) work_cv_.Wait(&mu_);
      if (shutdown_) return;
      j->job.set_attempts(j->job.attempts() + 1);
      StartLocked(*j, device);
      RefreshPositionsLocked();
    }
    absl::Status st = Execute(j, device);
    Finish(j, st);
  }
}

void BenchScheduler::StartLocked(Job& j, int device) {
  j.cancel = false;
  j.cancel_reason.clear();
  j.job.set_state(pb::JOB_RUNNING);
  j.job.set_started_unix_ms(NowMs());
  j.job.set_queue_position(0);
  j.last_position = 0;
  j.job.clear_results();
  j.job.clear_error();
  const DeviceInfo info = backend_->GetDeviceInfo(device);
  j.job.set_device(device);
  j.job.set_device_name(info.name);
  j.job.set_driver(info.driver);
  j.job.set_node(options_.fleet.node_id);
  pb::BenchEvent e;
  e.set_phase(pb::PHASE_STARTED);
  std::string message =
      absl::StrCat("started on ", options_.fleet.node_id.empty() ? "" : "node " + options_.fleet.node_id + ", ",
                   backend_->Name(), " device ", device, " (", info.name, "), attempt ", j.job.attempts());
  // A retry says why the attempt before it ended (the job's last note), so the
  // events tell it even when the requeue's own event lost the race to this start.
  if (j.job.attempts() > 1 && j.job.notes_size() > 0) {
    absl::StrAppend(&message, " (after ", j.job.notes(j.job.notes_size() - 1), ")");
  }
  e.set_message(std::move(message));
  EmitLocked(j, std::move(e), true);
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
    e.set_message(fleet_ ? "the server is shutting down; re-queued for any node of the fleet"
                         : "the server is shutting down; re-queued for its next start");
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

// The run reports into the job: each result and event is committed to the
// store under mu_ before watchers see it.
class BenchScheduler::RunSink : public JobSink {
 public:
  RunSink(BenchScheduler* s, Job* job) : s_(s), job_(job) {}

  absl::Status Cancelled() const override {
    if (!job_->cancel) return absl::OkStatus();
    absl::MutexLock l(&s_->mu_);
    return absl::CancelledError(job_->cancel_reason.empty() ? "cancelled" : job_->cancel_reason);
  }
  void Emit(pb::BenchEvent event) override { s_->Emit(*job_, std::move(event)); }
  void AddNote(std::string note) override {
    absl::MutexLock l(&s_->mu_);
    job_->job.add_notes(std::move(note));
  }
  void AddResult(const pb::VariantResult& result, pb::BenchEvent event, const std::string& note) override {
    absl::MutexLock l(&s_->mu_);
    if (!note.empty()) job_->job.add_notes(note);
    *job_->job.add_results() = result;
    s_->EmitLocked(*job_, std::move(event), /*with_job=*/true);
  }
  void SetCeilings(const pb::DeviceCeilings& ceilings, const std::string& shape_desc) override {
    absl::MutexLock l(&s_->mu_);
    *job_->job.mutable_ceilings() = ceilings;
    job_->job.set_shape_desc(shape_desc);
  }
  void Finish(std::vector<pb::VariantResult> results, const std::vector<std::string>& notes) override {
    absl::MutexLock l(&s_->mu_);
    job_->job.clear_results();
    for (pb::VariantResult& r : results) *job_->job.add_results() = std::move(r);
    for (const std::string& n : notes) job_->job.add_notes(n);
    s_->PersistLocked(*job_);
  }

 private:
  BenchScheduler* const s_;
  Job* const job_;
};

absl::Status BenchScheduler::Execute(const std::shared_ptr<Job>& job, int device) {
  pb::BenchJobSpec spec;
  std::string id, tenant;
  {
    absl::MutexLock l(&mu_);
    spec = job->job.spec();
    id = job->job.id();
    tenant = job->job.tenant();
  }
  if (options_.device_check) KS_RETURN_IF_ERROR(options_.device_check(device));
  JobRunEnv env;
  env.backend = backend_;
  env.options = &options_;
  env.runner = &runner_;
  env.reader = &reader_;
  env.variants = &registry_;
  env.ceilings = &ceilings_;
  env.builder = builder_.get();
  RunSink sink(this, job.get());
  JobRun run(env, &sink, std::move(spec), std::move(id), std::move(tenant), device);
  return run.Run();
}

}  // namespace bench
}  // namespace kernelserve
