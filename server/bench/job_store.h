// Durable storage of benchmark jobs: jobs (with their spec), results and
// events, behind an interface (JobStore) so that another database can hold
// them; the embedded implementation is SQLite in WAL mode (job_store.cc).
#ifndef KERNELSERVE_SERVER_BENCH_JOB_STORE_H_
#define KERNELSERVE_SERVER_BENCH_JOB_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernelserve/v1/bench.pb.h"
#include "kernelserve/v1/device.pb.h"

struct sqlite3;

namespace kernelserve {
namespace bench {

namespace pb = ::kernelserve::v1;

// What the scheduler persists through. Implementations commit each call as
// one transaction before returning, so a server killed at any moment finds
// each job in its last committed state.
class JobStore {
 public:
  // The embedded SQLite store at `path` (created if needed); ":memory:" for
  // a throwaway store.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  virtual ~JobStore() = default;

  // Inserts or replaces the job row, its spec and its results.
  virtual absl::Status PutJob(const pb::BenchJob& job) = 0;
  // PutJob plus appending `event`, in one transaction.
  virtual absl::Status PutJobAndEvent(const pb::BenchJob& job, const pb::BenchEvent& event) = 0;
  virtual absl::Status AppendEvent(const pb::BenchEvent& event) = 0;

  // Every job, oldest first, with results.
  virtual absl::StatusOr<std::vector<pb::BenchJob>> LoadJobs() = 0;
  virtual absl::StatusOr<std::vector<pb::BenchEvent>> LoadEvents(const std::string& job_id, int64_t after_seq) = 0;
  virtual absl::StatusOr<int64_t> MaxEventSeq(const std::string& job_id) = 0;

  // How the store makes commits durable ("wal" for SQLite).
  virtual std::string journal_mode() const = 0;
};

// A store shared by several servers (a fleet of nodes): the primitives that
// keep one job on one node at a time. Columns next to the stored message
// (state, attempts, node, error, notes) are authoritative over its fields.
// The PostgreSQL store implements it (pg_job_store.h).
class FleetJobStore : public JobStore {
 public:
  // may_start(tenant, its RUNNING jobs in the whole fleet): false skips that
  // tenant's jobs. Null: every tenant may start.
  using TenantGate = std::function<bool(const std::string& tenant, int64_t running)>;

  // The best queued job (priority, then age) of `backend` that `device` may
  // run (pinned to it or unpinned; a queued job whose `node` is set is
  // pinned to that node), now RUNNING on `node` with one more
  // attempt and a fresh heartbeat; nullopt when there is none. With a gate,
  // claims are serialized fleet-wide so that the running counts it sees
  // stay true until the claim commits.
  virtual absl::StatusOr<std::optional<pb::BenchJob>> Claim(const std::string& node, const std::string& backend,
                                                           int device, int64_t now_ms, const TenantGate& may_start) = 0;
  // Every RUNNING job of `node` is alive at `now_ms`.
  virtual absl::Status Heartbeat(const std::string& node, int64_t now_ms) = 0;
  // RUNNING jobs whose last heartbeat is before `stale_before_ms` go back to
  // QUEUED, or to INTERRUPTED with the reason once they have started
  // `max_attempts` times; the reason is added to their notes either way.
  // Returns the jobs changed. Safe from many nodes at once: each job is
  // changed by one of them.
  virtual absl::StatusOr<std::vector<pb::BenchJob>> RequeueStale(int64_t stale_before_ms, int max_attempts) = 0;
  // The same for every RUNNING job of `node` (a node restarted under the
  // same id: what it ran before died with it).
  virtual absl::StatusOr<std::vector<pb::BenchJob>> RequeueNode(const std::string& node, int max_attempts) = 0;

  // What a node that holds a job's claim writes through: `job` (may be null)
  // and `event` (may be null) are stored only while the job is still RUNNING
  // on `node` at attempt `attempts`; FAILED_PRECONDITION otherwise (its
  // heartbeat went stale and another node requeued it). The job's attempts
  // are written too; a job written back as QUEUED is free for any node.
  virtual absl::Status PutClaimed(const pb::BenchJob* job, const pb::BenchEvent* event, const std::string& node,
                                  int attempts) = 0;
  // For writers that do not hold the claim: stores `job` only while its row
  // is still in `expect_state` at job.attempts(), and appends `event` (may be
  // null) with the next seq, which the store assigns; FAILED_PRECONDITION
  // when the row moved on (claimed meanwhile).
  virtual absl::Status PutIfState(const pb::BenchJob& job, pb::BenchJobState expect_state,
                                  const pb::BenchEvent* event) = 0;
  // Asks the node running `job_id` to cancel it (it sees the request at its
  // next heartbeat); FAILED_PRECONDITION when the job is not RUNNING.
  virtual absl::Status RequestCancel(const std::string& job_id, const std::string& reason) = 0;
  virtual absl::StatusOr<std::optional<pb::BenchJob>> LoadJob(const std::string& id) = 0;

  // A node's heartbeat: registers or refreshes `node` in the node table and
  // the heartbeat of those of `running` (job ids) still RUNNING on it.
  // `*still_claimed` gets those ids; `*cancel` (id, reason) the cancel
  // requests for them.
  virtual absl::Status HeartbeatNode(const pb::FleetNode& node, const std::vector<std::string>& running,
                                     int64_t now_ms, std::vector<std::string>* still_claimed,
                                     std::vector<std::pair<std::string, std::string>>* cancel) = 0;
  // Every registered node, by id.
  virtual absl::StatusOr<std::vector<pb::FleetNode>> ListNodes() = 0;
};

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_JOB_STORE_H_
