// The benchmark job scheduler (DESIGN §6): a persistent queue per device,
// one runner thread per device, and the measurement method.
//
// Scheduling. Jobs wait in one queue, highest priority first, then in
// submission order. A job names its device or leaves it unset (`any`, the
// default); each device's runner starts the first queued job it may run (one
// pinned to it or an `any` one), so an `any` job goes to the first device
// that becomes free. A device runs one job at a time, and the job's whole
// timing phase is one task on the device's worker (DeviceRunner), so no
// kernel call or other job can touch the device during a timing window:
// kernel calls that arrive meanwhile wait in the worker's queue. Each
// submitter may have at most `max_jobs_per_submitter` jobs queued or running.
// A job whose tenant is at its running-job limit (start_check) stays queued,
// with an event saying so, while the device starts the next eligible job.
// Every job has a hard time limit; Cancel stops a running job between two
// launches (within a second unless one launch takes longer).
//
// Method (run by a JobRun, job_run.h, one method per phase; what differs per
// op comes from the op registry, op_registry.h). Every variant is first run
// once on the job's inputs and compared with the fp64 oracle (the
// correctness gate); a variant with a NaN/Inf output or an error over the
// tolerance is reported as failed and neither timed nor ranked. Then, per
// method:
//   kernel     warm-up launches, then N timed launches (in up to 10 batches;
//              each batch's mean is one sample; mean = total / N). A batch is
//              timed by device events (Backend::TimeLaunches) where the
//              backend has a device timer (Backend::Capabilities), else by
//              the host clock around the launches and one synchronisation
//              (cpu; host variants). With l2_flush every launch is timed
//              alone with the flush before it, outside the timed region.
//   passes     the same per pass, P passes, the variants alternating (pass p
//              starts at variant p mod V); the value is the median pass mean.
//   sustained  launches back to back for the warm-in, then a window, with the
//              SM clock, power and temperature sampled (NVML) during it; the
//              value is window time / launches (host clock).
//   graph      warm-up launches, then R replays (graph_replays, else iters) of
//              a CUDA graph holding one launch (Backend::TimeGraphReplays), in
//              up to 10 batches of one capture each, timed by device events.
//              Only where the backend has graph replay (FAILED_PRECONDITION
//              at submit elsewhere); a variant that cannot be captured is
//              reported untimed with the reason; host variants are timed as
//              in kernel.
// Each result's method names the timer that was used.
//
// Fleet (options.fleet.store set, --job_store=postgres://...). The queue is
// the shared store's: each device's runner claims the best queued job it may
// run there (FOR UPDATE SKIP LOCKED; tenants at their running limit in the
// whole fleet skipped), so a job submitted to any node runs on the first free
// device of any node. Every write of a running job is guarded by its claim
// (node, attempt): a node whose heartbeat went stale and whose job another
// node requeued cannot overwrite it, and stops that run. The node registers
// in ks_nodes and heartbeats; every node requeues (or, after max_attempts,
// interrupts) jobs of nodes whose heartbeat is older than stale_ms, with the
// reason in the job's notes and events, but only once it has itself been
// connected for stale_ms (after a database outage everyone's heartbeats are
// old). Get, List, Watch and Cancel read and write the store, so any node
// serves every job; Watch polls the store's events of jobs run elsewhere,
// Cancel of a job running elsewhere is a request its node sees at its next
// heartbeat. A job reading uploaded buffers is pinned to the node holding them.
//
// Persistence. Each state change and event is committed to SQLite before it
// is visible. On start-up, jobs found QUEUED stay queued; jobs found RUNNING
// (the server died under them) are re-queued until they have started
// `max_attempts` times, then marked INTERRUPTED; finished jobs keep their
// results. A graceful Shutdown() re-queues the running job.
#ifndef KERNELSERVE_SERVER_BENCH_SCHEDULER_H_
#define KERNELSERVE_SERVER_BENCH_SCHEDULER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/api/backend.h"
#include "kernels/api/variants.h"
#include "kernelserve/v1/bench.pb.h"
#include "server/bench/bench_inputs.h"
#include "server/bench/bench_options.h"
#include "server/bench/job_store.h"
#include "server/bench/timing.h"

namespace kernelserve {
namespace bench {

class BenchScheduler {
 public:
  // Opens the store, recovers the jobs found there, measures nothing yet and
  // starts one runner per device.
  static absl::StatusOr<std::unique_ptr<BenchScheduler>> Create(Backend* backend, BenchOptions options,
                                                                DeviceRunner runner, BufferReader reader);
  ~BenchScheduler();  // Shutdown(); releases the data dir
  BenchScheduler(const BenchScheduler&) = delete;
  BenchScheduler& operator=(const BenchScheduler&) = delete;

  // Stops the runners; a running job is re-queued (persisted) for the next start.
  void Shutdown();

  // `tenant` non-empty: the authenticated tenant; it becomes the submitter
  // and limits what Get/List/Cancel/Watch see. Empty: no authentication.
  absl::StatusOr<pb::BenchJob> Submit(pb::BenchJobSpec spec, const std::string& tenant = "");
  absl::StatusOr<pb::BenchJob> Get(const std::string& id, const std::string& tenant = "");
  // Newest first. `max_bytes` > 0: as many jobs as fit in that many bytes of
  // a response; *truncated (may be null) says whether some were left out.
  std::vector<pb::BenchJob> List(const pb::ListBenchRequest& request, const std::string& tenant = "",
                                 int64_t max_bytes = 0, bool* truncated = nullptr);
  // A queued job is cancelled at once; a running one stops between launches
  // (this waits up to 2 s for it). Cancelling a cancelled job is a no-op;
  // a finished one is FAILED_PRECONDITION.
  absl::StatusOr<pb::BenchJob> Cancel(const std::string& id, const std::string& reason,
                                      const std::string& tenant = "");
  // Appends the events with seq > after_seq to *out; when there are none yet,
  // waits up to `timeout` for some. *finished: the job is in a final state and
  // every event up to the last was returned.
  absl::Status WaitEvents(const std::string& id, int64_t after_seq, absl::Duration timeout,
                          std::vector<pb::BenchEvent>* out, bool* finished, const std::string& tenant = "");

  // A device's health changed (a probe returned it to service, or marked it
  // unhealthy): idle runners look at the queue again.
  void DeviceHealthChanged();

  pb::ListVariantsResponse ListVariants(pb::BenchOp op) const;
  // The leaderboard (leaderboard.h) over the jobs persisted in the store
  // that `tenant` may see; INVALID_ARGUMENT naming a bad request field.
  absl::StatusOr<pb::LeaderboardResponse> Leaderboard(const pb::LeaderboardRequest& request,
                                                      const std::string& tenant = "");
  const VariantRegistry& variants() const { return registry_; }
  std::string journal_mode() const { return store_->journal_mode(); }
  bool shutting_down() const {
    absl::MutexLock l(&mu_);
    return shutdown_;
  }

  // Fleet mode: the node id ("" on one node), the address this node tells
  // the fleet it serves on (set once it listens), and every registered node.
  const std::string& node_id() const { return options_.fleet.node_id; }
  void SetNodeAddress(const std::string& address);
  absl::StatusOr<std::vector<pb::FleetNode>> FleetNodes() const;

 private:
  int lock_fd_ = -1;  // flock on <data_dir>/bench.lock
  struct Job {
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
    // Fleet: the attempt this node claimed it at (what guards its writes), and
    // the last write the store did not take (the database was away), retried
    // when the run ends. mu_.
    int claim_attempt = 0;
    bool lost = false;  // another node requeued it: nothing more is written
    bool unsaved = false;
    std::optional<pb::BenchEvent> unsaved_event;
  };
  class RunSink;  // how a JobRun reports into its Job
  // Marker put into cancellation statuses caused by a graceful shutdown.
  static constexpr char kShutdownReason[] = "server shutting down";

  BenchScheduler(Backend* backend, BenchOptions options, DeviceRunner runner, BufferReader reader,
                 std::shared_ptr<JobStore> store);
  absl::Status Recover();
  void RunnerLoop(int device);
  // Runs the job (a JobRun, job_run.h); returns its final status (OK: DONE).
  absl::Status Execute(const std::shared_ptr<Job>& job, int device);
  void Finish(const std::shared_ptr<Job>& job, const absl::Status& status);
  // The job becomes RUNNING on `device` (attempts already counted).
  void StartLocked(Job& job, int device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores `job` and/or `event` (either may be null): through the claim in a fleet.
  void WriteLocked(Job& job, const pb::BenchEvent* event, bool with_job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckSubmitLimits(const std::vector<const pb::BenchJob*>& jobs, const pb::BenchJobSpec& spec,
                                 const std::string& tenant) const;
  pb::BenchJob NewQueuedJob(pb::BenchJobSpec spec, const std::string& tenant) const;
  static std::vector<pb::BenchJob> SelectJobs(const std::vector<const pb::BenchJob*>& newest_first,
                                              const pb::ListBenchRequest& request, const std::string& tenant,
                                              int64_t max_bytes, bool* truncated);

  // Fleet mode (scheduler_fleet.cc).
  absl::Status FleetRecover();
  void FleetRunnerLoop(int device);
  void FleetHeartbeatLoop();
  void FleetSettle(const std::shared_ptr<Job>& job);
  void FleetRequeued(const pb::BenchJob& job);
  absl::StatusOr<pb::BenchJob> FleetSubmit(pb::BenchJobSpec spec, const std::string& tenant);
  absl::StatusOr<pb::BenchJob> FleetGet(const std::string& id, const std::string& tenant);
  std::vector<pb::BenchJob> FleetList(const pb::ListBenchRequest& request, const std::string& tenant,
                                      int64_t max_bytes, bool* truncated);
  absl::StatusOr<pb::BenchJob> FleetCancel(const std::string& id, const std::string& why, const std::string& tenant);
  absl::Status FleetWaitEvents(const std::string& id, int64_t after_seq, absl::Duration timeout,
                               std::vector<pb::BenchEvent>* out, bool* finished, const std::string& tenant);

  absl::Status ValidateSubmit(const pb::BenchJobSpec& spec, const std::string& tenant) const;
  absl::Status ValidateUserKernels(const pb::BenchJobSpec& spec) const;
  std::shared_ptr<Job> FindLocked(const std::string& id, const std::string& tenant) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends `event` (seq and time filled) and persists it with the job.
  void EmitLocked(Job& job, pb::BenchEvent event, bool with_job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(Job& job, pb::BenchEvent event, bool with_job = false) ABSL_LOCKS_EXCLUDED(mu_);
  void RefreshPositionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<Job> NextLocked(int device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EnsureEventsLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistLocked(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Backend* backend_;
  const BenchOptions options_;
  DeviceRunner runner_;
  BufferReader reader_;
  std::shared_ptr<JobStore> store_;
  FleetJobStore* const fleet_;  // options_.fleet.store; null on one node
  VariantRegistry registry_;
  CeilingCache ceilings_;  // per device, measured by its first job
  std::unique_ptr<user_kernels::KernelBuilder> builder_;  // users' kernels; null when off

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;   // runners: new work or shutdown
  absl::CondVar event_cv_;  // watchers and Cancel: new events
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  // Every job on one node; in a fleet, the jobs this node has claimed and not yet finished.
  std::map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::string node_address_ ABSL_GUARDED_BY(mu_);

  std::vector<std::thread> threads_;
};

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_SCHEDULER_H_
