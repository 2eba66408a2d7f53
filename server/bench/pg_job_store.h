// A JobStore in PostgreSQL (libpq), for a database that outlives one node.
// Each call is one statement or one transaction; a connection lost (a
// database restart) is re-established and the call retried once.
//
// The fleet's primitives are here too: claiming a queued job (FOR UPDATE
// SKIP LOCKED, so two nodes never claim one job), heartbeats, and requeueing
// the jobs of a node that stopped heartbeating. The columns state, attempts,
// node and error are authoritative over the stored message's fields. The
// scheduler does not use these yet, so the server does not offer the store
// as --job_store.
#ifndef KERNELSERVE_SERVER_BENCH_PG_JOB_STORE_H_
#define KERNELSERVE_SERVER_BENCH_PG_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/bench/job_store.h"

namespace kernelserve {
namespace bench {

class PgJobStore : public JobStore {
 public:
  // The best queued job (priority, then age) of `backend` that `device` may
  // run (pinned to it or unpinned), now RUNNING on `node` with one more
  // attempt and a fresh heartbeat; nullopt when there is none.
  virtual absl::StatusOr<std::optional<pb::BenchJob>> Claim(const std::string& node, const std::string& backend,
                                                           int device, int64_t now_ms) = 0;
  // Every RUNNING job of `node` is alive at `now_ms`.
  virtual absl::Status Heartbeat(const std::string& node, int64_t now_ms) = 0;
  // RUNNING jobs whose last heartbeat is before `stale_before_ms` go back to
  // QUEUED, or to INTERRUPTED with the reason once they have started
  // `max_attempts` times. Returns the jobs changed. Safe from many nodes at
  // once: each job is changed by one of them.
  virtual absl::StatusOr<std::vector<pb::BenchJob>> RequeueStale(int64_t stale_before_ms, int max_attempts) = 0;
};

// `url`: postgres://... or postgresql://... (libpq's URI form). `what` names
// where it came from in errors (a flag). Creates the tables if missing.
absl::StatusOr<std::unique_ptr<PgJobStore>> OpenPgJobStore(const std::string& url, const std::string& what);

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_PG_JOB_STORE_H_
