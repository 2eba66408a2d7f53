// A FleetJobStore in PostgreSQL (libpq), for a database that outlives one
// node and is shared by several. Each call is one statement or one
// transaction; a connection lost (a database restart) is re-established and
// a single statement retried once (a transaction fails instead, and its
// caller tries again later).
//
// Claims use FOR UPDATE SKIP LOCKED, so two nodes never claim one job; the
// claim (node, attempt) guards every later write of the job's runner.
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
absl::StatusOr<std::unique_ptr<FleetJobStore>> OpenPgJobStore(const std::string& url, const std::string& what);

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_PG_JOB_STORE_H_
