// The scheduler's fleet mode (scheduler.h, "Fleet"): the queue, claims,
// heartbeats and job reads through a store shared by several nodes.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/bench/scheduler.h"
#include "server/input_checks.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace bench {
namespace {

bool IsFinal(pb::BenchJobState s) {
  return s == pb::JOB_DONE || s == pb::JOB_FAILED || s == pb::JOB_CANCELLED || s == pb::JOB_INTERRUPTED;
}

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

absl::Status NoSuchJob(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("no benchmark job ", QuoteClientText(id)));
}

}  // namespace

void BenchScheduler::SetNodeAddress(const std::string& address) {
  absl::MutexLock l(&mu_);
  node_address_ = address;
}

absl::StatusOr<std::vector<pb::FleetNode>> BenchScheduler::FleetNodes() const {
  if (fleet_ == nullptr) return std::vector<pb::FleetNode>();
  return fleet_->ListNodes();
}

// What this node ran under the same id before it was restarted died with it.
absl::Status BenchScheduler::FleetRecover() {
  KS_ASSIGN_OR_RETURN(std::vector<pb::BenchJob> released,
                      fleet_->RequeueNode(options_.fleet.node_id, options_.max_attempts));
  for (const pb::BenchJob& job : released) FleetRequeued(job);
  return absl::OkStatus();
}

// Tells the job's watchers why it left its node; the store numbers the event.
void BenchScheduler::FleetRequeued(const pb::BenchJob& job) {
  pb::BenchEvent e;
  e.set_job_id(job.id());
  e.set_time_unix_ms(NowMs());
  e.set_state(job.state());
  const std::string why = job.notes().empty() ? std::string("its node stopped") : job.notes(job.notes_size() - 1);
  pb::BenchJob stored = job;
  if (job.state() == pb::JOB_QUEUED) {
    e.set_phase(pb::PHASE_REQUEUED);
    e.set_message(why);
    stored.clear_results();
    stored.set_started_unix_ms(0);
  } else {
    e.set_phase(pb::PHASE_INTERRUPTED);
    e.set_message(job.error());
    stored.set_finished_unix_ms(NowMs());
    stored.set_error_code(static_cast<int>(absl::StatusCode::kAborted));
    *e.mutable_job() = stored;
  }
  spdlog::warn("bench: job {} {} ({})", job.id(), job.state() == pb::JOB_QUEUED ? "re-queued" : "interrupted", why);
  absl::Status st = fleet_->PutIfState(stored, job.state(), &e);
  // A claim that came first already started it again: its events say so.
  if (!st.ok() && st.code() != absl::StatusCode::kFailedPrecondition) {
    spdlog::error("bench: recording why job {} left its node: {}", job.id(), st.ToString());
  }
}

void BenchScheduler::FleetRunnerLoop(int device) {
  std::string last_error;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (shutdown_) return;
    }
    // An unhealthy device (options_.device_check) claims nothing: the fleet's
    // other devices and nodes take the queue.
    if (options_.device_check && !options_.device_check(device).ok()) {
      absl::MutexLock l(&mu_);
      if (!shutdown_) work_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(options_.fleet.poll_ms));
      continue;
    }
    FleetJobStore::TenantGate gate;
    if (options_.start_check) {
      gate = [this](const std::string& tenant, int64_t running) { return options_.start_check(tenant, running).ok(); };
    }
    absl::StatusOr<std::optional<pb::BenchJob>> claimed =
        fleet_->Claim(options_.fleet.node_id, backend_->Name(), device, NowMs(), gate);
    absl::StatusOr<int64_t> max_seq = int64_t{0};
    if (claimed.ok() && claimed->has_value()) max_seq = store_->MaxEventSeq((*claimed)->id());
    if (!claimed.ok() || !max_seq.ok()) {
      const absl::Status st = claimed.ok() ? max_seq.status() : claimed.status();
      // Once per distinct error: a database restart is not a log flood.
      if (st.ToString() != last_error) spdlog::warn("bench: device {} cannot claim jobs: {}", device, st.ToString());
      last_error = st.ToString();
    } else {
      last_error.clear();
    }
    if (!claimed.ok() || !claimed->has_value() || !max_seq.ok()) {
      // A claimed job whose events could not be read stays claimed: with no
      // heartbeat for it, its staleness returns it to the queue.
      absl::MutexLock l(&mu_);
      if (!shutdown_) work_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(options_.fleet.poll_ms));
      continue;
    }
    auto j = std::make_shared<Job>();
    {
      absl::MutexLock l(&mu_);
      j->job = std::move(**claimed);
      j->order = next_order_++;
      j->next_seq = *max_seq + 1;
      j->events_loaded = false;
      j->claim_attempt = j->job.attempts();
      jobs_[j->job.id()] = j;
      StartLocked(*j, device);
      // Claimed while the server began to stop: straight back to the queue.
      if (shutdown_) {
        j->cancel_reason = kShutdownReason;
        j->cancel = true;
      }
    }
    absl::Status st = Execute(j, device);
    Finish(j, st);
    FleetSettle(j);
  }
}

// The run is over: its final state must reach the store (a database away at
// that moment would leave it RUNNING under a node that heartbeats), then the
// job is the store's alone.
void BenchScheduler::FleetSettle(const std::shared_ptr<Job>& j) {
  for (int attempt = 0;; ++attempt) {
    pb::BenchJob job;
    std::optional<pb::BenchEvent> event;
    {
      absl::MutexLock l(&mu_);
      if (!j->unsaved || j->lost || (shutdown_ && attempt >= 20)) {
        jobs_.erase(j->job.id());
        event_cv_.SignalAll();
        return;
      }
      job = j->job;
      event = j->unsaved_event;
    }
    absl::Status st = fleet_->PutClaimed(&job, event ? &*event : nullptr, options_.fleet.node_id, j->claim_attempt);
    absl::MutexLock l(&mu_);
    if (st.ok() || st.code() == absl::StatusCode::kFailedPrecondition) {
      j->unsaved = false;
      j->lost = !st.ok();
      continue;
    }
    work_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(options_.fleet.poll_ms));
  }
}

void BenchScheduler::FleetHeartbeatLoop() {
  int64_t connected_since = -1;  // of the current run of good heartbeats; -1: not connected
  while (true) {
    pb::FleetNode me;
    std::vector<std::string> running;
    {
      absl::MutexLock l(&mu_);
      me.set_address(node_address_);
      for (const auto& [id, j] : jobs_) {
        if (j->job.state() == pb::JOB_RUNNING && !j->lost) running.push_back(id);
      }
      // A stopping server heartbeats until its runs are back in the queue:
      // a drain longer than the stale window must not lose them.
      if (shutdown_ && running.empty()) return;
    }
    if (options_.fleet.describe) options_.fleet.describe(&me);
    me.set_node_id(options_.fleet.node_id);
    me.set_backend(backend_->Name());
    me.set_server_version(options_.server_version);
    std::vector<std::string> claimed;
    std::vector<std::pair<std::string, std::string>> cancel;
    const int64_t now = NowMs();
    absl::Status st = fleet_->HeartbeatNode(me, running, now, &claimed, &cancel);
    if (!st.ok()) {
      if (connected_since >= 0) spdlog::warn("bench: heartbeat to the job database failed: {}", st.ToString());
      connected_since = -1;
    } else {
      if (connected_since < 0) connected_since = now;
      absl::MutexLock l(&mu_);
      const std::set<std::string> still(claimed.begin(), claimed.end());
      for (const std::string& id : running) {
        auto it = jobs_.find(id);
        if (it == jobs_.end() || still.count(id) || it->second->job.state() != pb::JOB_RUNNING) continue;
        Job& j = *it->second;
        j.lost = true;
        j.cancel_reason = absl::StrCat("this node (", options_.fleet.node_id,
                                       ") lost the job: the fleet requeued it after its heartbeat went stale");
        j.cancel = true;
        spdlog::warn("bench: job {}: {}", id, j.cancel_reason);
      }
      for (const auto& [id, why] : cancel) {
        auto it = jobs_.find(id);
        if (it == jobs_.end() || it->second->cancel) continue;
        it->second->cancel_reason = why;
        it->second->cancel = true;
      }
    }
    // Only a node connected for a whole stale window judges others: after a
    // database outage every heartbeat in it is old.
    if (st.ok() && now - connected_since >= options_.fleet.stale_ms && !shutting_down()) {
      absl::StatusOr<std::vector<pb::BenchJob>> changed =
          fleet_->RequeueStale(now - options_.fleet.stale_ms, options_.max_attempts);
      if (!changed.ok()) {
        spdlog::warn("bench: requeueing the jobs of silent nodes: {}", changed.status().ToString());
      } else {
        for (const pb::BenchJob& job : *changed) FleetRequeued(job);
        if (!changed->empty()) {
          absl::MutexLock l(&mu_);
          work_cv_.SignalAll();
        }
      }
    }
    absl::MutexLock l(&mu_);
    work_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(options_.fleet.heartbeat_ms));
  }
}

absl::StatusOr<pb::BenchJob> BenchScheduler::FleetSubmit(pb::BenchJobSpec spec, const std::string& tenant) {
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return absl::UnavailableError("the benchmark scheduler is shutting down");
  }
  KS_ASSIGN_OR_RETURN(std::vector<pb::BenchJob> stored, store_->LoadJobs());
  std::vector<const pb::BenchJob*> all;
  for (const pb::BenchJob& j : stored) all.push_back(&j);
  KS_RETURN_IF_ERROR(CheckSubmitLimits(all, spec, tenant));
  pb::BenchJob job = NewQueuedJob(std::move(spec), tenant);
  pb::BenchEvent e;
  e.set_job_id(job.id());
  e.set_seq(1);
  e.set_time_unix_ms(NowMs());
  e.set_phase(pb::PHASE_QUEUED);
  e.set_state(pb::JOB_QUEUED);
  if (job.spec().inputs().kind() == pb::INPUT_BUFFERS) {
    // Its buffers live in this server's memory: no other node can read them.
    job.set_node(options_.fleet.node_id);
    e.set_message(absl::StrCat("queued on node ", job.node(), ", which holds its input buffers"));
  } else {
    e.set_message(absl::StrCat("queued for the first free ", backend_->Name(),
                               job.spec().has_device() ? absl::StrCat(" device ", job.spec().device()) : " device",
                               " of the fleet"));
  }
  absl::Status put = store_->PutJobAndEvent(job, e);
  if (!put.ok()) {
    return absl::UnavailableError(absl::StrCat("the job could not be stored, so it was not queued: ",
                                               put.message()));
  }
  absl::MutexLock l(&mu_);
  work_cv_.SignalAll();
  return job;
}

absl::StatusOr<pb::BenchJob> BenchScheduler::FleetGet(const std::string& id, const std::string& tenant) {
  {
    absl::MutexLock l(&mu_);
    if (std::shared_ptr<Job> j = FindLocked(id, tenant)) return j->job;
  }
  KS_ASSIGN_OR_RETURN(std::optional<pb::BenchJob> job, fleet_->LoadJob(id));
  if (!job || (!tenant.empty() && job->tenant() != tenant)) return NoSuchJob(id);
  return *job;
}

std::vector<pb::BenchJob> BenchScheduler::FleetList(const pb::ListBenchRequest& request, const std::string& tenant,
                                                    int64_t max_bytes, bool* truncated) {
  absl::StatusOr<std::vector<pb::BenchJob>> stored = store_->LoadJobs();
  if (!stored.ok()) {
    spdlog::error("bench: listing jobs from the job database: {}", stored.status().ToString());
    stored = std::vector<pb::BenchJob>();
  }
  // The jobs running here are fresher than their rows (progress).
  {
    absl::MutexLock l(&mu_);
    for (pb::BenchJob& job : *stored) {
      auto it = jobs_.find(job.id());
      if (it != jobs_.end()) job = it->second->job;
    }
  }
  std::vector<const pb::BenchJob*> newest_first;
  for (auto it = stored->rbegin(); it != stored->rend(); ++it) newest_first.push_back(&*it);
  return SelectJobs(newest_first, request, tenant, max_bytes, truncated);
}

absl::StatusOr<pb::BenchJob> BenchScheduler::FleetCancel(const std::string& id, const std::string& why,
                                                         const std::string& tenant) {
  const absl::Time until = absl::Now() + absl::Seconds(2);
  bool requested = false;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (std::shared_ptr<Job> j = FindLocked(id, tenant)) {
        // Running here: stop it between launches, as on one node.
        if (j->job.state() == pb::JOB_RUNNING && !j->cancel) {
          j->cancel_reason = why;
          j->cancel = true;
        }
        while (j->job.state() == pb::JOB_RUNNING && absl::Now() < until) event_cv_.WaitWithDeadline(&mu_, until);
        return j->job;
      }
    }
    KS_ASSIGN_OR_RETURN(std::optional<pb::BenchJob> job, fleet_->LoadJob(id));
    if (!job || (!tenant.empty() && job->tenant() != tenant)) return NoSuchJob(id);
    switch (job->state()) {
      case pb::JOB_CANCELLED:
        return *job;
      case pb::JOB_QUEUED: {
        job->set_state(pb::JOB_CANCELLED);
        job->set_error(why);
        job->set_error_code(static_cast<int>(absl::StatusCode::kCancelled));
        job->set_finished_unix_ms(NowMs());
        job->set_queue_position(0);
        pb::BenchEvent e;
        e.set_job_id(id);
        e.set_time_unix_ms(NowMs());
        e.set_phase(pb::PHASE_CANCELLED);
        e.set_state(pb::JOB_CANCELLED);
        e.set_message(why);
        *e.mutable_job() = *job;
        absl::Status st = fleet_->PutIfState(*job, pb::JOB_QUEUED, &e);
        if (st.ok()) return *job;
        if (st.code() != absl::StatusCode::kFailedPrecondition) return st;
        continue;  // claimed meanwhile: cancel it where it runs
      }
      case pb::JOB_RUNNING: {
        if (!requested) {
          absl::Status st = fleet_->RequestCancel(id, why);
          if (st.code() == absl::StatusCode::kFailedPrecondition) continue;  // it just moved on
          KS_RETURN_IF_ERROR(st);
          requested = true;
        }
        // Its node sees the request at its next heartbeat.
        if (absl::Now() >= until) return *job;
        absl::SleepFor(absl::Milliseconds(std::min<int64_t>(100, options_.fleet.poll_ms)));
        continue;
      }
      default:
        if (requested) return *job;
        return absl::FailedPreconditionError(
            absl::StrCat("job ", id, " already finished (", pb::BenchJobState_Name(job->state()), ")"));
    }
  }
}

absl::Status BenchScheduler::FleetWaitEvents(const std::string& id, int64_t after_seq, absl::Duration timeout,
                                             std::vector<pb::BenchEvent>* out, bool* finished,
                                             const std::string& tenant) {
  const absl::Time until = absl::Now() + timeout;
  while (true) {
    KS_ASSIGN_OR_RETURN(std::vector<pb::BenchEvent> events, store_->LoadEvents(id, after_seq));
    KS_ASSIGN_OR_RETURN(std::optional<pb::BenchJob> job, fleet_->LoadJob(id));
    if (!job || (!tenant.empty() && job->tenant() != tenant)) return NoSuchJob(id);
    const bool final_state = IsFinal(job->state());
    if (!events.empty() || final_state || shutting_down() || absl::Now() >= until) {
      KS_ASSIGN_OR_RETURN(int64_t max_seq, store_->MaxEventSeq(id));
      const int64_t last = events.empty() ? after_seq : events.back().seq();
      *finished = final_state && last >= max_seq;
      for (pb::BenchEvent& e : events) {
        if (IsFinal(e.state()) && e.seq() == max_seq) *e.mutable_job() = *job;
        out->push_back(std::move(e));
      }
      return absl::OkStatus();
    }
    absl::SleepFor(std::min(absl::Milliseconds(std::min<int64_t>(100, options_.fleet.poll_ms)), until - absl::Now()));
  }
}

}  // namespace bench
}  // namespace kernelserve
