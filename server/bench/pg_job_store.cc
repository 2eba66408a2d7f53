#include "server/bench/pg_job_store.h"

#include <postgresql/libpq-fe.h>

#include <cstdlib>
#include <memory>
#include <optional>
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
ALTER TABLE ks_jobs ADD COLUMN IF NOT EXISTS backend TEXT NOT NULL DEFAULT '';
ALTER TABLE ks_jobs ADD COLUMN IF NOT EXISTS device INTEGER;  -- NULL: any
ALTER TABLE ks_jobs ADD COLUMN IF NOT EXISTS priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ks_jobs ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ks_jobs ADD COLUMN IF NOT EXISTS node TEXT;
ALTER TABLE ks_jobs ADD COLUMN IF NOT EXISTS heartbeat_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ks_jobs ADD COLUMN IF NOT EXISTS error TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS ks_jobs_queued ON ks_jobs (priority DESC, ord) WHERE state = 1;
CREATE TABLE IF NOT EXISTS ks_events (
  job_id TEXT NOT NULL,
  seq BIGINT NOT NULL,
  event BYTEA NOT NULL,
  PRIMARY KEY (job_id, seq)
);
)sql";

using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

class PgJobStoreImpl : public PgJobStore {
 public:
  explicit PgJobStoreImpl(PGconn* conn) : conn_(conn) {}
  ~PgJobStoreImpl() override { PQfinish(conn_); }
  PgJobStoreImpl(const PgJobStoreImpl&) = delete;
  PgJobStoreImpl& operator=(const PgJobStoreImpl&) = delete;

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
    return Run(kUpsert, JobParams(job)).status();
  }
  absl::Status PutJobAndEvent(const pb::BenchJob& job, const pb::BenchEvent& event) override {
    absl::MutexLock l(&mu_);
    // One statement, so one transaction, also across a reconnect and retry.
    std::vector<Param> p = JobParams(job);
    p.emplace_back(event.job_id());
    p.emplace_back(std::to_string(event.seq()));
    p.push_back(Bytes(event.SerializeAsString()));
    return Run("WITH j AS (" + std::string(kUpsert) + ") " + kInsertEventAfterJob, p).status();
  }
  absl::Status AppendEvent(const pb::BenchEvent& event) override {
    absl::MutexLock l(&mu_);
    return Run(kInsertEvent3, {event.job_id(), std::to_string(event.seq()), Bytes(event.SerializeAsString())}).status();
  }

  absl::StatusOr<std::vector<pb::BenchJob>> LoadJobs() override {
    absl::MutexLock l(&mu_);
    KS_ASSIGN_OR_RETURN(Result r, Run("SELECT " + std::string(kJobColumns) + " FROM ks_jobs ORDER BY ord", {}));
    return Jobs(r.get());
  }
  absl::StatusOr<std::optional<pb::BenchJob>> Claim(const std::string& node, const std::string& backend, int device,
                                                   int64_t now_ms) override {
    absl::MutexLock l(&mu_);
    KS_ASSIGN_OR_RETURN(
        Result r,
        Run("UPDATE ks_jobs SET state = 2, node = $1, heartbeat_ms = $2::bigint, attempts = attempts + 1, error = '' "
            "WHERE id = (SELECT id FROM ks_jobs WHERE state = 1 AND backend = $3 "
            "AND (device IS NULL OR device = $4::integer) ORDER BY priority DESC, ord "
            "LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING " + std::string(kJobColumns),
            {node, std::to_string(now_ms), backend, std::to_string(device)}));
    KS_ASSIGN_OR_RETURN(std::vector<pb::BenchJob> jobs, Jobs(r.get()));
    if (jobs.empty()) return std::optional<pb::BenchJob>();
    return std::optional<pb::BenchJob>(std::move(jobs[0]));
  }

  absl::Status Heartbeat(const std::string& node, int64_t now_ms) override {
    absl::MutexLock l(&mu_);
    return Run("UPDATE ks_jobs SET heartbeat_ms = $2::bigint WHERE state = 2 AND node = $1",
               {node, std::to_string(now_ms)})
        .status();
  }

  absl::StatusOr<std::vector<pb::BenchJob>> RequeueStale(int64_t stale_before_ms, int max_attempts) override {
    absl::MutexLock l(&mu_);
    // One statement: the row lock makes a second node's concurrent UPDATE
    // re-check `state = 2` and skip the row the first one changed.
    KS_ASSIGN_OR_RETURN(
        Result r,
        Run("UPDATE ks_jobs SET state = CASE WHEN attempts < $2::integer THEN 1 ELSE 6 END, "
            "error = CASE WHEN attempts < $2::integer THEN '' ELSE 'its node (' || node || ') stopped "
            "heartbeating while it ran, ' || attempts || ' times; not re-queued again' END, node = NULL "
            "WHERE state = 2 AND heartbeat_ms < $1::bigint RETURNING " + std::string(kJobColumns),
            {std::to_string(stale_before_ms), std::to_string(max_attempts)}));
    return Jobs(r.get());
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
  // $1 id, $2 state, $3 job, $4 backend, $5 device (NULL: any), $6 priority,
  // $7 attempts, $8 error.
  static constexpr const char* kUpsert =
      "INSERT INTO ks_jobs (id, state, job, backend, device, priority, attempts, error) "
      "VALUES ($1, $2::integer, $3::bytea, $4, $5::integer, $6::integer, $7::integer, $8) "
      "ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, job = EXCLUDED.job, attempts = EXCLUDED.attempts, "
      "error = EXCLUDED.error";
  static constexpr const char* kInsertEvent3 =
      "INSERT INTO ks_events (job_id, seq, event) VALUES ($1, $2::bigint, $3::bytea) "
      "ON CONFLICT (job_id, seq) DO NOTHING";
  static constexpr const char* kInsertEventAfterJob =
      "INSERT INTO ks_events (job_id, seq, event) VALUES ($9, $10::bigint, $11::bytea) "
      "ON CONFLICT (job_id, seq) DO NOTHING";

  // What a job row is read as: the message with the authoritative columns.
  static constexpr const char* kJobColumns = "id, job, state::text, attempts::text, error";

  static absl::StatusOr<std::vector<pb::BenchJob>> Jobs(const PGresult* r) {
    std::vector<pb::BenchJob> jobs(static_cast<size_t>(PQntuples(r)));
    for (int i = 0; i < PQntuples(r); ++i) {
      pb::BenchJob& j = jobs[static_cast<size_t>(i)];
      if (!j.ParseFromArray(PQgetvalue(r, i, 1), PQgetlength(r, i, 1))) {
        return absl::DataLossError(absl::StrCat("job database: job row ", PQgetvalue(r, i, 0), " does not parse"));
      }
      j.set_state(static_cast<pb::BenchJobState>(std::atoi(PQgetvalue(r, i, 2))));
      j.set_attempts(std::atoi(PQgetvalue(r, i, 3)));
      j.set_error(std::string(PQgetvalue(r, i, 4), static_cast<size_t>(PQgetlength(r, i, 4))));
    }
    return jobs;
  }

  // Runs one statement `sql` with its parameters; on a broken connection
  // reconnects and runs it once more.
  // A parameter: text, or binary for the serialized messages (bytea).
  struct Param {
    Param(std::string v, bool bin = false) : value(std::move(v)), binary(bin) {}  // NOLINT: call sites read as lists
    std::string value;
    bool binary;
    bool null = false;
  };
  static Param Bytes(std::string v) { return Param(std::move(v), true); }
  static Param Null() {
    Param p("");
    p.null = true;
    return p;
  }
  static std::vector<Param> JobParams(const pb::BenchJob& job) {
    return {job.id(),
            std::to_string(job.state()),
            Bytes(job.SerializeAsString()),
            job.backend(),
            job.spec().has_device() ? Param(std::to_string(job.spec().device())) : Null(),
            std::to_string(job.spec().priority()),
            std::to_string(job.attempts()),
            job.error()};
  }

  absl::StatusOr<Result> Run(const std::string& sql, const std::vector<Param>& params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    for (const Param& p : params) {
      values.push_back(p.null ? nullptr : p.value.c_str());
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

absl::StatusOr<std::unique_ptr<PgJobStore>> OpenPgJobStore(const std::string& url, const std::string& what) {
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
  auto store = std::make_unique<PgJobStoreImpl>(conn);
  KS_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<PgJobStore>(std::move(store));
}

}  // namespace bench
}  // namespace kernelserve
