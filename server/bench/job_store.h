// Durable storage of benchmark jobs: jobs (with their spec), results and
// events, behind an interface (JobStore) so that another database can hold
// them; the embedded implementation is SQLite in WAL mode (job_store.cc).
#ifndef KERNELSERVE_SERVER_BENCH_JOB_STORE_H_
#define KERNELSERVE_SERVER_BENCH_JOB_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernelserve/v1/bench.pb.h"

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

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_JOB_STORE_H_
