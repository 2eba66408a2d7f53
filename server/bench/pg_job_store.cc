#include "server/bench/pg_job_store.h"

#include <postgresql/libpq-fe.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace kernelserve {
namespace bench {
namespace {

// Whole messages as bytea: the store's readers are this server only, and a
// job's spec and results change shape with the proto, not with the schema.
constexpr const char* kSchema = R"sql(
SET client_min_messages = warning;
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
ALTER TABLE ks_jobs ADD COLUMN IF NOT EXISTS tenant TEXT NOT NULL DEFAULT '';
ALTER TABLE ks_jobs ADD COLUMN IF NOT EXISTS cancel TEXT NOT NULL DEFAULT '';  -- a cancel request
ALTER TABLE ks_jobs ADD COLUMN IF NOT EXISTS notes TEXT NOT NULL DEFAULT '';   -- lines the fleet added
CREATE INDEX IF NOT EXISTS ks_jobs_queued ON ks_jobs (priority DESC, ord) WHERE state = 1;
CREATE TABLE IF NOT EXISTS ks_events (
  job_id TEXT NOT NULL,
  seq BIGINT NOT NULL,
  event BYTEA NOT NULL,
  PRIMARY KEY (job_id, seq)
);
CREATE TABLE IF NOT EXISTS ks_nodes (
  id TEXT PRIMARY KEY,
  heartbeat_ms BIGINT NOT NULL,
  node BYTEA NOT NULL
);
)sql";

// Claims serialize on this advisory lock when a tenant gate applies.
constexpr int64_t kClaimLock = 0x6b73636c61696d;  // "ksclaim"

// A text[] literal: each element quoted, backslash and quote escaped.
std::string TextArray(const std::vector<std::string>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

class PgJobStoreImpl : public FleetJobStore {
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
                                                   int64_t now_ms, const TenantGate& may_start) override {
    absl::MutexLock l(&mu_);
    const std::string claim =
        "UPDATE ks_jobs SET state = 2, node = $1, heartbeat_ms = $2::bigint, attempts = attempts + 1, error = '', "
        "cancel = '' WHERE id = (SELECT id FROM ks_jobs WHERE state = 1 AND backend = $3 "
        "AND (device IS NULL OR device = $4::integer) AND (node IS NULL OR node = $1) AND tenant <> ALL($5::text[]) "
        "ORDER BY priority DESC, ord "
        "LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING " + std::string(kJobColumns);
    std::vector<Param> params = {node, std::to_string(now_ms), backend, std::to_string(device), TextArray({})};
    if (!may_start) {
      KS_ASSIGN_OR_RETURN(Result r, Run(claim, params));
      return First(r.get());
    }
    // One transaction under the claim lock: no other node starts a job
    // between the running counts read here and this claim's commit.
    KS_ASSIGN_OR_RETURN(Result begin, Run("BEGIN", {}));
    absl::StatusOr<std::optional<pb::BenchJob>> out = [&]() -> absl::StatusOr<std::optional<pb::BenchJob>> {
      KS_ASSIGN_OR_RETURN(Result lock, Run("SELECT pg_advisory_xact_lock($1::bigint)::text",
                                           {std::to_string(kClaimLock)}, /*retry=*/false));
      KS_ASSIGN_OR_RETURN(Result counts, Run("SELECT tenant, COUNT(*)::text FROM ks_jobs WHERE state = 2 "
                                             "GROUP BY tenant", {}, /*retry=*/false));
      std::vector<std::string> held;
      for (int i = 0; i < PQntuples(counts.get()); ++i) {
        std::string tenant(PQgetvalue(counts.get(), i, 0), static_cast<size_t>(PQgetlength(counts.get(), i, 0)));
        if (!may_start(tenant, std::atoll(PQgetvalue(counts.get(), i, 1)))) held.push_back(std::move(tenant));
      }
      params[4] = TextArray(held);
      KS_ASSIGN_OR_RETURN(Result r, Run(claim, params, /*retry=*/false));
      KS_ASSIGN_OR_RETURN(std::optional<pb::BenchJob> job, First(r.get()));
      KS_ASSIGN_OR_RETURN(Result commit, Run("COMMIT", {}, /*retry=*/false));
      return job;
    }();
    if (!out.ok()) Result rollback(PQexec(conn_, "ROLLBACK"), &PQclear);
    return out;
  }

  absl::Status Heartbeat(const std::string& node, int64_t now_ms) override {
    absl::MutexLock l(&mu_);
    return Run("UPDATE ks_jobs SET heartbeat_ms = $2::bigint WHERE state = 2 AND node = $1",
               {node, std::to_string(now_ms)})
        .status();
  }

  absl::StatusOr<std::vector<pb::BenchJob>> RequeueStale(int64_t stale_before_ms, int max_attempts) override {
    absl::MutexLock l(&mu_);
    return Requeue("heartbeat_ms < $1::bigint", std::to_string(stale_before_ms), max_attempts,
                   "stopped heartbeating while it ran");
  }
  absl::StatusOr<std::vector<pb::BenchJob>> RequeueNode(const std::string& node, int max_attempts) override {
    absl::MutexLock l(&mu_);
    return Requeue("node = $1", node, max_attempts, "restarted while it ran");
  }

  absl::Status PutClaimed(const pb::BenchJob* job, const pb::BenchEvent* event, const std::string& node,
                          int attempts) override {
    absl::MutexLock l(&mu_);
    // $1 id, $2 node, $3 attempts; then the job's state, message, error and attempts;
    // then the event's seq and message.
    std::vector<Param> p = {job ? job->id() : event->job_id(), node, std::to_string(attempts)};
    std::string sql;
    if (job != nullptr) {
      p.emplace_back(std::to_string(job->state()));
      p.push_back(Bytes(job->SerializeAsString()));
      p.emplace_back(job->error());
      p.emplace_back(std::to_string(job->attempts()));
      // Back to QUEUED (a graceful stop) frees the job for any node.
      sql = "WITH j AS (UPDATE ks_jobs SET state = $4::integer, job = $5::bytea, error = $6, attempts = $7::integer, "
            "node = CASE WHEN $4::integer = 1 THEN NULL ELSE node END WHERE id = $1 "
            "AND state = 2 AND node = $2 AND attempts = $3::integer RETURNING id)";
    } else {
      // The row lock keeps a requeue (and the next claim) out until the event is in.
      sql = "WITH j AS (SELECT id FROM ks_jobs WHERE id = $1 AND state = 2 AND node = $2 AND attempts = $3::integer "
            "FOR SHARE)";
    }
    if (event != nullptr) {
      const size_t n = p.size();
      p.emplace_back(std::to_string(event->seq()));
      p.push_back(Bytes(event->SerializeAsString()));
      sql += absl::StrCat(", e AS (INSERT INTO ks_events (job_id, seq, event) SELECT id, $", n + 1, "::bigint, $", n + 2,
                          "::bytea FROM j ON CONFLICT (job_id, seq) DO NOTHING)");
    }
    KS_ASSIGN_OR_RETURN(Result r, Run(sql + " SELECT COUNT(*)::text FROM j", p));
    if (std::atoi(PQgetvalue(r.get(), 0, 0)) == 0) {
      return absl::FailedPreconditionError(absl::StrCat("job ", p[0].value, " is no longer running on node ", node,
                                                        " (attempt ", attempts, "): its claim was lost"));
    }
    return absl::OkStatus();
  }

  absl::Status PutIfState(const pb::BenchJob& job, pb::BenchJobState expect_state,
                          const pb::BenchEvent* event) override {
    absl::MutexLock l(&mu_);
    std::vector<Param> p = {job.id(),           std::to_string(job.state()),  Bytes(job.SerializeAsString()),
                            job.error(),        std::to_string(expect_state), std::to_string(job.attempts())};
    std::string sql =
        "WITH j AS (UPDATE ks_jobs SET state = $2::integer, job = $3::bytea, error = $4 WHERE id = $1 "
        "AND state = $5::integer AND attempts = $6::integer RETURNING id)";
    if (event != nullptr) {
      p.push_back(Bytes(event->SerializeAsString()));
      sql += ", e AS (INSERT INTO ks_events (job_id, seq, event) SELECT id, "
             "COALESCE((SELECT MAX(seq) FROM ks_events WHERE job_id = $1), 0) + 1, $7::bytea FROM j "
             "ON CONFLICT (job_id, seq) DO NOTHING)";
    }
    KS_ASSIGN_OR_RETURN(Result r, Run(sql + " SELECT COUNT(*)::text FROM j", p));
    if (std::atoi(PQgetvalue(r.get(), 0, 0)) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job.id(), " is no longer ", pb::BenchJobState_Name(expect_state)));
    }
    return absl::OkStatus();
  }

  absl::Status RequestCancel(const std::string& job_id, const std::string& reason) override {
    absl::MutexLock l(&mu_);
    KS_ASSIGN_OR_RETURN(Result r, Run("UPDATE ks_jobs SET cancel = $2 WHERE id = $1 AND state = 2 RETURNING id",
                                      {job_id, reason}));
    if (PQntuples(r.get()) == 0) return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is not running"));
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<pb::BenchJob>> LoadJob(const std::string& id) override {
    absl::MutexLock l(&mu_);
    KS_ASSIGN_OR_RETURN(Result r, Run("SELECT " + std::string(kJobColumns) + " FROM ks_jobs WHERE id = $1", {id}));
    return First(r.get());
  }

  absl::Status HeartbeatNode(const pb::FleetNode& node, const std::vector<std::string>& running, int64_t now_ms,
                             std::vector<std::string>* still_claimed,
                             std::vector<std::pair<std::string, std::string>>* cancel) override {
    absl::MutexLock l(&mu_);
    pb::FleetNode stored = node;
    stored.set_heartbeat_unix_ms(now_ms);
    KS_ASSIGN_OR_RETURN(
        Result r,
        Run("WITH n AS (INSERT INTO ks_nodes (id, heartbeat_ms, node) VALUES ($1, $2::bigint, $3::bytea) "
            "ON CONFLICT (id) DO UPDATE SET heartbeat_ms = EXCLUDED.heartbeat_ms, node = EXCLUDED.node) "
            "UPDATE ks_jobs SET heartbeat_ms = $2::bigint WHERE state = 2 AND node = $1 AND id = ANY($4::text[]) "
            "RETURNING id, cancel",
            {node.node_id(), std::to_string(now_ms), Bytes(stored.SerializeAsString()), TextArray(running)}));
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      std::string id = PQgetvalue(r.get(), i, 0);
      std::string why(PQgetvalue(r.get(), i, 1), static_cast<size_t>(PQgetlength(r.get(), i, 1)));
      if (!why.empty()) cancel->emplace_back(id, std::move(why));
      still_claimed->push_back(std::move(id));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<pb::FleetNode>> ListNodes() override {
    absl::MutexLock l(&mu_);
    KS_ASSIGN_OR_RETURN(Result r, Run("SELECT id, node, heartbeat_ms::text FROM ks_nodes ORDER BY id", {}));
    std::vector<pb::FleetNode> nodes(static_cast<size_t>(PQntuples(r.get())));
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      pb::FleetNode& n = nodes[static_cast<size_t>(i)];
      if (!n.ParseFromArray(PQgetvalue(r.get(), i, 1), PQgetlength(r.get(), i, 1))) {
        return absl::DataLossError(absl::StrCat("job database: node row ", PQgetvalue(r.get(), i, 0),
                                                " does not parse"));
      }
      n.set_heartbeat_unix_ms(std::atoll(PQgetvalue(r.get(), i, 2)));
    }
    return nodes;
  }

  absl::StatusOr<std::vector<pb::BenchEvent>> LoadEvents(const std::string& job_id, int64_t after_seq) override {
    absl::MutexLock l(&mu_);
    // ks_events.seq, not the text column of the same name, orders them.
    KS_ASSIGN_OR_RETURN(Result r, Run("SELECT event, seq::text FROM ks_events WHERE job_id = $1 AND seq > $2 "
                                      "ORDER BY ks_events.seq", {job_id, std::to_string(after_seq)}));
    std::vector<pb::BenchEvent> events(static_cast<size_t>(PQntuples(r.get())));
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      if (!events[static_cast<size_t>(i)].ParseFromArray(PQgetvalue(r.get(), i, 0), PQgetlength(r.get(), i, 0))) {
        return absl::DataLossError(absl::StrCat("job database: an event of job ", job_id, " does not parse"));
      }
      // The column is authoritative: events appended by nodes without the
      // job's claim get their seq from the store.
      events[static_cast<size_t>(i)].set_seq(std::atoll(PQgetvalue(r.get(), i, 1)));
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
  // $7 attempts, $8 error, $9 tenant, $10 node (NULL: none). A queued job's
  // node pins it there (its input buffers live on that node); the node is
  // written on insert only, afterwards the claims own it.
  static constexpr const char* kUpsert =
      "INSERT INTO ks_jobs (id, state, job, backend, device, priority, attempts, error, tenant, node) "
      "VALUES ($1, $2::integer, $3::bytea, $4, $5::integer, $6::integer, $7::integer, $8, $9, $10) "
      "ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, job = EXCLUDED.job, attempts = EXCLUDED.attempts, "
      "error = EXCLUDED.error";
  static constexpr const char* kInsertEvent3 =
      "INSERT INTO ks_events (job_id, seq, event) VALUES ($1, $2::bigint, $3::bytea) "
      "ON CONFLICT (job_id, seq) DO NOTHING";
  static constexpr const char* kInsertEventAfterJob =
      "INSERT INTO ks_events (job_id, seq, event) VALUES ($11, $12::bigint, $13::bytea) "
      "ON CONFLICT (job_id, seq) DO NOTHING";

  // What a job row is read as: the message with the authoritative columns.
  static constexpr const char* kJobColumns =
      "id, job, state::text, attempts::text, error, COALESCE(node, ''), notes";

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
      j.set_node(PQgetvalue(r, i, 5));
      // The fleet's notes (why a node lost the job), once each.
      for (absl::string_view note : absl::StrSplit(PQgetvalue(r, i, 6), '\n', absl::SkipEmpty())) {
        if (std::find(j.notes().begin(), j.notes().end(), note) == j.notes().end()) j.add_notes(std::string(note));
      }
    }
    return jobs;
  }
  static absl::StatusOr<std::optional<pb::BenchJob>> First(const PGresult* r) {
    KS_ASSIGN_OR_RETURN(std::vector<pb::BenchJob> jobs, Jobs(r));
    if (jobs.empty()) return std::optional<pb::BenchJob>();
    return std::optional<pb::BenchJob>(std::move(jobs[0]));
  }

  // RUNNING jobs matching `where` (on $1 = `arg`) back to QUEUED, or to
  // INTERRUPTED after max_attempts starts; `what` says what their node did.
  absl::StatusOr<std::vector<pb::BenchJob>> Requeue(const std::string& where, const std::string& arg,
                                                    int max_attempts, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // One statement: the row lock makes a second node's concurrent UPDATE
    // re-check `state = 2` and skip the row the first one changed.
    KS_ASSIGN_OR_RETURN(
        Result r,
        Run("UPDATE ks_jobs SET state = CASE WHEN attempts < $2::integer THEN 1 ELSE 6 END, "
            "error = CASE WHEN attempts < $2::integer THEN '' ELSE 'its node (' || node || ') ' || $3 || ', ' || "
            "attempts || ' times; not re-queued again' END, "
            "notes = notes || 'attempt ' || attempts || ': its node (' || node || ') ' || $3 || "
            "CASE WHEN attempts < $2::integer THEN '; re-queued' ELSE '; not re-queued again' END || E'\\n', "
            "node = NULL, cancel = '' WHERE state = 2 AND " + where + " RETURNING " + std::string(kJobColumns),
            {arg, std::to_string(max_attempts), what}));
    return Jobs(r.get());
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
            job.error(),
            job.tenant(),
            job.node().empty() ? Null() : Param(job.node())};
  }

  // Inside a transaction `retry` is false: a reconnect would lose it.
  absl::StatusOr<Result> Run(const std::string& sql, const std::vector<Param>& params, bool retry = true)
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
      if (PQstatus(conn_) == CONNECTION_BAD && attempt == 0 && retry) {
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

absl::StatusOr<std::unique_ptr<FleetJobStore>> OpenPgJobStore(const std::string& url, const std::string& what) {
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
  return std::unique_ptr<FleetJobStore>(std::move(store));
}

}  // namespace bench
}  // namespace kernelserve
