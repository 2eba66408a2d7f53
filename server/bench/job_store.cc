#include "server/bench/job_store.h"

#include <sqlite3.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace kernelserve {
namespace bench {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  submitter TEXT NOT NULL,
  state INTEGER NOT NULL,
  priority INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL,
  attempts INTEGER NOT NULL,
  error TEXT NOT NULL,
  job BLOB NOT NULL  -- BenchJob without spec and results
);
CREATE TABLE IF NOT EXISTS specs (
  job_id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  op INTEGER NOT NULL,
  spec BLOB NOT NULL  -- BenchJobSpec
);
CREATE TABLE IF NOT EXISTS results (
  job_id TEXT NOT NULL,
  idx INTEGER NOT NULL,
  variant TEXT NOT NULL,
  correct INTEGER NOT NULL,
  value_ms REAL NOT NULL,
  result BLOB NOT NULL,  -- VariantResult
  PRIMARY KEY (job_id, idx)
);
CREATE TABLE IF NOT EXISTS events (
  job_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  time_ms INTEGER NOT NULL,
  phase INTEGER NOT NULL,
  event BLOB NOT NULL,  -- BenchEvent
  PRIMARY KEY (job_id, seq)
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state);
CREATE INDEX IF NOT EXISTS jobs_by_submitter ON jobs (submitter);
)sql";

absl::Status SqliteError(sqlite3* db, const std::string& what) {
  return absl::InternalError(absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
}

// RAII prepared statement.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  void Text(int i, const std::string& s) { sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT); }
  void Blob(int i, const std::string& s) { sqlite3_bind_blob(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT); }
  void Int(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Real(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  absl::Status Run(const std::string& what) {
    if (!ok()) return SqliteError(db_, what);
    if (sqlite3_step(stmt_) != SQLITE_DONE) return SqliteError(db_, what);
    return absl::OkStatus();
  }
  std::string ColumnBlob(int i) {
    const void* p = sqlite3_column_blob(stmt_, i);
    const int n = sqlite3_column_bytes(stmt_, i);
    return p ? std::string(static_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

// The embedded store: one SQLite database in WAL mode.
class SqliteJobStore : public JobStore {
 public:
  explicit SqliteJobStore(sqlite3* db) : db_(db) {}
  ~SqliteJobStore() override;
  SqliteJobStore(const SqliteJobStore&) = delete;
  SqliteJobStore& operator=(const SqliteJobStore&) = delete;

  absl::Status PutJob(const pb::BenchJob& job) override;
  absl::Status PutJobAndEvent(const pb::BenchJob& job, const pb::BenchEvent& event) override;
  absl::Status AppendEvent(const pb::BenchEvent& event) override;
  absl::StatusOr<std::vector<pb::BenchJob>> LoadJobs() override;
  absl::StatusOr<std::vector<pb::BenchEvent>> LoadEvents(const std::string& job_id, int64_t after_seq) override;
  absl::StatusOr<int64_t> MaxEventSeq(const std::string& job_id) override;
  std::string journal_mode() const override { return journal_mode_; }


 private:
  friend class JobStore;  // Open sets the store up
  absl::Status Exec(const char* sql);
  absl::Status PutJobLocked(const pb::BenchJob& job);
  absl::Status AppendEventLocked(const pb::BenchEvent& event);

  absl::Mutex mu_;
  sqlite3* db_;
  std::string journal_mode_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                                 nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open job database ", path, ": ", msg));
  }
  auto store = std::make_unique<SqliteJobStore>(db);
  sqlite3_busy_timeout(db, 5000);
  {
    Stmt s(db, "PRAGMA journal_mode=WAL");
    if (s.ok() && sqlite3_step(s.get()) == SQLITE_ROW) {
      store->journal_mode_ = reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 0));
    }
  }
  // WAL with synchronous=FULL: a committed transaction survives a crash of
  // the process and of the machine.
  KS_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=FULL"));
  KS_RETURN_IF_ERROR(store->Exec(kSchema));
  return std::unique_ptr<JobStore>(std::move(store));
}

SqliteJobStore::~SqliteJobStore() { sqlite3_close(db_); }

absl::Status SqliteJobStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite: ", msg));
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::PutJobLocked(const pb::BenchJob& job) {
  pb::BenchJob core = job;
  core.clear_spec();
  core.clear_results();
  {
    Stmt s(db_,
           "INSERT OR REPLACE INTO jobs (id, submitter, state, priority, created_ms, started_ms, "
           "finished_ms, attempts, error, job) VALUES (?,?,?,?,?,?,?,?,?,?)");
    s.Text(1, job.id());
    s.Text(2, job.spec().submitter());
    s.Int(3, job.state());
    s.Int(4, job.spec().priority());
    s.Int(5, job.created_unix_ms());
    s.Int(6, job.started_unix_ms());
    s.Int(7, job.finished_unix_ms());
    s.Int(8, job.attempts());
    s.Text(9, job.error());
    s.Blob(10, core.SerializeAsString());
    KS_RETURN_IF_ERROR(s.Run("write job"));
  }
  {
    Stmt s(db_, "INSERT OR REPLACE INTO specs (job_id, name, op, spec) VALUES (?,?,?,?)");
    s.Text(1, job.id());
    s.Text(2, job.spec().name());
    s.Int(3, job.spec().op());
    s.Blob(4, job.spec().SerializeAsString());
    KS_RETURN_IF_ERROR(s.Run("write spec"));
  }
  {
    Stmt s(db_, "DELETE FROM results WHERE job_id = ?");
    s.Text(1, job.id());
    KS_RETURN_IF_ERROR(s.Run("clear results"));
  }
  for (int i = 0; i < job.results_size(); ++i) {
    const pb::VariantResult& r = job.results(i);
    Stmt s(db_,
           "INSERT INTO results (job_id, idx, variant, correct, value_ms, result) VALUES (?,?,?,?,?,?)");
    s.Text(1, job.id());
    s.Int(2, i);
    s.Text(3, r.variant());
    s.Int(4, r.correct() ? 1 : 0);
    s.Real(5, r.time().value_ms());
    s.Blob(6, r.SerializeAsString());
    KS_RETURN_IF_ERROR(s.Run("write result"));
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::AppendEventLocked(const pb::BenchEvent& event) {
  pb::BenchEvent e = event;
  e.clear_job();  // the job row holds it
  Stmt s(db_, "INSERT OR REPLACE INTO events (job_id, seq, time_ms, phase, event) VALUES (?,?,?,?,?)");
  s.Text(1, event.job_id());
  s.Int(2, event.seq());
  s.Int(3, event.time_unix_ms());
  s.Int(4, event.phase());
  s.Blob(5, e.SerializeAsString());
  return s.Run("append event");
}

absl::Status SqliteJobStore::PutJob(const pb::BenchJob& job) {
  absl::MutexLock l(&mu_);
  KS_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status st = PutJobLocked(job);
  if (!st.ok()) {
    Exec("ROLLBACK").IgnoreError();
    return st;
  }
  return Exec("COMMIT");
}

absl::Status SqliteJobStore::PutJobAndEvent(const pb::BenchJob& job, const pb::BenchEvent& event) {
  absl::MutexLock l(&mu_);
  KS_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status st = PutJobLocked(job);
  if (st.ok()) st = AppendEventLocked(event);
  if (!st.ok()) {
    Exec("ROLLBACK").IgnoreError();
    return st;
  }
  return Exec("COMMIT");
}

absl::Status SqliteJobStore::AppendEvent(const pb::BenchEvent& event) {
  absl::MutexLock l(&mu_);
  return AppendEventLocked(event);
}

absl::StatusOr<std::vector<pb::BenchJob>> SqliteJobStore::LoadJobs() {
  absl::MutexLock l(&mu_);
  std::vector<pb::BenchJob> jobs;
  std::map<std::string, size_t> index;
  {
    Stmt s(db_, "SELECT id, job FROM jobs ORDER BY created_ms, rowid");
    if (!s.ok()) return SqliteError(db_, "load jobs");
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      pb::BenchJob j;
      if (!j.ParseFromString(s.ColumnBlob(1))) {
        return absl::DataLossError(absl::StrCat("job database: job row ",
                                                reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 0)),
                                                " does not parse"));
      }
      index[j.id()] = jobs.size();
      jobs.push_back(std::move(j));
    }
    if (rc != SQLITE_DONE) return SqliteError(db_, "load jobs");
  }
  {
    Stmt s(db_, "SELECT job_id, spec FROM specs");
    if (!s.ok()) return SqliteError(db_, "load specs");
    while (sqlite3_step(s.get()) == SQLITE_ROW) {
      auto it = index.find(reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 0)));
      if (it == index.end()) continue;
      if (!jobs[it->second].mutable_spec()->ParseFromString(s.ColumnBlob(1))) {
        return absl::DataLossError("job database: a spec row does not parse");
      }
    }
  }
  {
    Stmt s(db_, "SELECT job_id, result FROM results ORDER BY job_id, idx");
    if (!s.ok()) return SqliteError(db_, "load results");
    while (sqlite3_step(s.get()) == SQLITE_ROW) {
      auto it = index.find(reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 0)));
      if (it == index.end()) continue;
      if (!jobs[it->second].add_results()->ParseFromString(s.ColumnBlob(1))) {
        return absl::DataLossError("job database: a result row does not parse");
      }
    }
  }
  return jobs;
}

absl::StatusOr<std::vector<pb::BenchEvent>> SqliteJobStore::LoadEvents(const std::string& job_id,
                                                                 int64_t after_seq) {
  absl::MutexLock l(&mu_);
  std::vector<pb::BenchEvent> events;
  Stmt s(db_, "SELECT event FROM events WHERE job_id = ? AND seq > ? ORDER BY seq");
  if (!s.ok()) return SqliteError(db_, "load events");
  s.Text(1, job_id);
  s.Int(2, after_seq);
  while (sqlite3_step(s.get()) == SQLITE_ROW) {
    pb::BenchEvent e;
    if (!e.ParseFromString(s.ColumnBlob(0))) return absl::DataLossError("job database: an event does not parse");
    events.push_back(std::move(e));
  }
  return events;
}

absl::StatusOr<int64_t> SqliteJobStore::MaxEventSeq(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  Stmt s(db_, "SELECT COALESCE(MAX(seq), 0) FROM events WHERE job_id = ?");
  if (!s.ok()) return SqliteError(db_, "max event seq");
  s.Text(1, job_id);
  if (sqlite3_step(s.get()) != SQLITE_ROW) return SqliteError(db_, "max event seq");
  return static_cast<int64_t>(sqlite3_column_int64(s.get(), 0));
}

}  // namespace bench
}  // namespace kernelserve
