// Durable storage of benchmark jobs in SQLite (WAL mode): jobs (with their
// spec), results and events. Every state change is one transaction, so a
// server killed at any moment finds each job in its last committed state.
#ifndef KERNELSERVE_SERVER_BENCH_JOB_STORE_H_
#define KERNELSERVE_SERVER_BENCH_JOB_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernelserve/v1/bench.pb.h"

struct sqlite3;

namespace kernelserve {
namespace bench {

namespace pb = ::kernelserve::v1;

class JobStore {
 public:
  // Opens (creating if needed) `path`; ":memory:" for a throwaway store.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Inserts or replaces the job row, its spec and its results.
  absl::Status PutJob(const pb::BenchJob& job);
  // PutJob plus appending `event`, in one transaction.
  absl::Status PutJobAndEvent(const pb::BenchJob& job, const pb::BenchEvent& event);
  absl::Status AppendEvent(const pb::BenchEvent& event);

  // Every job, oldest first, with results.
  absl::StatusOr<std::vector<pb::BenchJob>> LoadJobs();
  absl::StatusOr<std::vector<pb::BenchEvent>> LoadEvents(const std::string& job_id, int64_t after_seq);
  absl::StatusOr<int64_t> MaxEventSeq(const std::string& job_id);

  std::string journal_mode() const { return journal_mode_; }

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql);
  absl::Status PutJobLocked(const pb::BenchJob& job);
  absl::Status AppendEventLocked(const pb::BenchEvent& event);

  absl::Mutex mu_;
  sqlite3* db_;
  std::string journal_mode_;
};

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_JOB_STORE_H_
