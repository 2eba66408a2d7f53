#include "server/bench/pg_job_store.h"

#include <postgresql/libpq-fe.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace kernelserve {
namespace bench {
namespace {

// Whole messages as bytea: the store's readers are this server only, and a
// job's spec and results change shape with the proto, not with the schema.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS ks_jobs (
  id TEXT PRIMARY KEY,
  ord BIGSERIAL,
  state INTEGER NOT NULL,
  job BYTEA NOT NULL
);
CREATE TABLE IF NOT EXISTS ks_events (
  job_id TEXT NOT NULL,
  seq BIGINT NOT NULL,
  event BYTEA NOT NULL,
  PRIMARY KEY (job_id, seq)
);
)sql";

using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

class PgJobStore : public JobStore {
 public:
  explicit PgJobStore(PGconn* conn) : conn_(conn) {}
  ~PgJobStore() override { PQfinish(conn_); }
  PgJobStore(const PgJobStore&) = delete;
  PgJobStore& operator=(const PgJobStore&) = delete;

  absl::Status Init() {
    absl::MutexLock l(&mu_);
    // Several statements: only PQexec takes them (and returns text).
    Result r(PQexec(conn_, kSchema), &PQclear);
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
      return absl::UnavailableError(absl::StrCat("job database (postgresql): creating the tables: ",
                                                 PQerrorMessage(conn_)));
    }
    return absl::OkStatus();
  }

  absl::Status PutJob(const pb::BenchJob& job) override {
    absl::MutexLock l(&mu_);
    return Run(kUpsert, {job.id(), std::to_string(job.state()), Bytes(job.SerializeAsString())}).status();
  }
  absl::Status PutJobAndEvent(const pb::BenchJob& job, const pb::BenchEvent& event) override {
    absl::MutexLock l(&mu_);
    // One statement, so one transaction, also across a reconnect and retry.
    return Run("WITH j AS (" + std::string(kUpsert) + ") " + kInsertEvent6,
               {job.id(), std::to_string(job.state()), Bytes(job.SerializeAsString()), event.job_id(),
                std::to_string(event.seq()), Bytes(event.SerializeAsString())})
        .status();
  }
  absl::Status AppendEvent(const pb::BenchEvent& event) override {
    absl::MutexLock l(&mu_);
    return Run(kInsertEvent3, {event.job_id(), std::to_string(event.seq()), Bytes(event.SerializeAsString())}).status();
  }

  absl::StatusOr<std::vector<pb::BenchJob>> LoadJobs() override {
    absl::MutexLock l(&mu_);
    KS_ASSIGN_OR_RETURN(Result r, Run("SELECT id, job FROM ks_jobs ORDER BY ord", {}));
    std::vector<pb::BenchJob> jobs(static_cast<size_t>(PQntuples(r.get())));
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      if (!jobs[static_cast<size_t>(i)].ParseFromArray(PQgetvalue(r.get(), i, 1), PQgetlength(r.get(), i, 1))) {
        return absl::DataLossError(
            absl::StrCat("job database: job row ", PQgetvalue(r.get(), i, 0), " does not parse"));
      }
    }
    return jobs;
  }
  absl::StatusOr<std::vector<pb::BenchEvent>> LoadEvents(const std::string& job_id, int64_t after_seq) override {
    absl::MutexLock l(&mu_);
    KS_ASSIGN_OR_RETURN(Result r, Run("SELECT event FROM ks_events WHERE job_id = $1 AND seq > $2 ORDER BY seq",
                                      {job_id, std::to_string(after_seq)}));
    std::vector<pb::BenchEvent> events(static_cast<size_t>(PQntuples(r.get())));
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      if (!events[static_cast<size_t>(i)].ParseFromArray(PQgetvalue(r.get(), i, 0), PQgetlength(r.get(), i, 0))) {
        return absl::DataLossError(absl::StrCat("job database: an event of job ", job_id, " does not parse"));
      }
    }
    return events;
  }
  absl::StatusOr<int64_t> MaxEventSeq(const std::string& job_id) override {
    absl::MutexLock l(&mu_);
    KS_ASSIGN_OR_RETURN(Result r, Run("SELECT COALESCE(MAX(seq), 0)::text FROM ks_events WHERE job_id = $1", {job_id}));
    return std::stoll(PQgetvalue(r.get(), 0, 0));
  }

  // Commits are durable when the server says so (synchronous_commit).
  std::string journal_mode() const override { return "postgresql"; }

 private:
  static constexpr const char* kUpsert =
      "INSERT INTO ks_jobs (id, state, job) VALUES ($1, $2::integer, $3::bytea) "
      "ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, job = EXCLUDED.job";
  static constexpr const char* kInsertEvent3 =
      "INSERT INTO ks_events (job_id, seq, event) VALUES ($1, $2::bigint, $3::bytea) "
      "ON CONFLICT (job_id, seq) DO NOTHING";
  static constexpr const char* kInsertEvent6 =
      "INSERT INTO ks_events (job_id, seq, event) VALUES ($4, $5::bigint, $6::bytea) "
      "ON CONFLICT (job_id, seq) DO NOTHING";

  // Runs one statement `sql` with its parameters; on a broken connection
  // reconnects and runs it once more.
  // A parameter: text, or binary for the serialized messages (bytea).
  struct Param {
    Param(std::string v, bool bin = false) : value(std::move(v)), binary(bin) {}  // NOLINT: call sites read as lists
    std::string value;
    bool binary;
  };
  static Param Bytes(std::string v) { return Param(std::move(v), true); }

  absl::StatusOr<Result> Run(const std::string& sql, const std::vector<Param>& params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    for (const Param& p : params) {
      values.push_back(p.value.c_str());
      lengths.push_back(static_cast<int>(p.value.size()));
      formats.push_back(p.binary ? 1 : 0);
    }
    for (int attempt = 0;; ++attempt) {
      // Binary results: bytea columns arrive as the serialized bytes.
      Result r(PQexecParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr, values.data(),
                            lengths.data(), formats.data(), /*resultFormat=*/1),
               &PQclear);
      const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
      if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
      if (PQstatus(conn_) == CONNECTION_BAD && attempt == 0) {
        PQreset(conn_);
        if (PQstatus(conn_) == CONNECTION_OK) continue;
      }
      return absl::UnavailableError(absl::StrCat("job database (postgresql): ", PQerrorMessage(conn_)));
    }
  }

  absl::Mutex mu_;
  PGconn* conn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> OpenPgJobStore(const std::string& url, const std::string& what) {
  if (!absl::StartsWith(url, "postgres://") && !absl::StartsWith(url, "postgresql://")) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected a postgres://[user@]host[:port]/database[?options] URL"));
  }
  char* err = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(url.c_str(), &err);
  if (parsed == nullptr) {
    std::string msg = err ? err : "out of memory";
    PQfreemem(err);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a valid PostgreSQL URL: ", msg));
  }
  PQconninfoFree(parsed);
  PGconn* conn = PQconnectdb(url.c_str());
  if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) {
    std::string msg = conn ? PQerrorMessage(conn) : "out of memory";
    PQfinish(conn);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    return absl::UnavailableError(absl::StrCat(what, ": cannot connect to the job database: ", msg));
  }
  auto store = std::make_unique<PgJobStore>(conn);
  KS_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<JobStore>(std::move(store));
}

}  // namespace bench
}  // namespace kernelserve
