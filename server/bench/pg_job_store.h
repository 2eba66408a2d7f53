// A JobStore in PostgreSQL (libpq), for a database that outlives one node.
// Each call is one statement or one transaction; a connection lost (a
// database restart) is re-established and the call retried once.
//
// This is the storage half of a fleet's shared store: it persists and loads
// jobs and events like the SQLite store. Claiming queued jobs across nodes
// (FOR UPDATE SKIP LOCKED), heartbeats and requeueing a dead node's jobs are
// not here yet, so the server does not offer it as --job_store.
#ifndef KERNELSERVE_SERVER_BENCH_PG_JOB_STORE_H_
#define KERNELSERVE_SERVER_BENCH_PG_JOB_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/bench/job_store.h"

namespace kernelserve {
namespace bench {

// `url`: postgres://... or postgresql://... (libpq's URI form). `what` names
// where it came from in errors (a flag). Creates the tables if missing.
absl::StatusOr<std::unique_ptr<JobStore>> OpenPgJobStore(const std::string& url, const std::string& what);

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_PG_JOB_STORE_H_
