// Client side of benchmark jobs (DESIGN §6): a BenchService stub with a
// reconnecting Watch, suite files, and the exports (JSON, a markdown table
// like the seeds' tables, JUnit XML) with the CI gate behind `kernelctl ci`.
#ifndef KERNELSERVE_CLIENT_BENCH_CLIENT_H_
#define KERNELSERVE_CLIENT_BENCH_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "kernelserve/v1/bench.grpc.pb.h"

namespace kernelserve {

namespace pb = ::kernelserve::v1;

class BenchClient {
 public:
  static absl::StatusOr<std::unique_ptr<BenchClient>> Connect(const ClientOptions& options);

  absl::StatusOr<pb::BenchJob> Submit(const pb::BenchJobSpec& spec);
  absl::StatusOr<pb::BenchJob> Get(const std::string& job_id);
  absl::StatusOr<std::vector<pb::BenchJob>> List(const pb::ListBenchRequest& request);
  absl::StatusOr<pb::BenchJob> Cancel(const std::string& job_id, const std::string& reason);
  absl::StatusOr<pb::ListVariantsResponse> ListVariants(pb::BenchOp op);
  // Users' kernels ranked per shape and device (BenchService.Leaderboard).
  absl::StatusOr<pb::LeaderboardResponse> Leaderboard(const pb::LeaderboardRequest& request);

  // Follows the job's events until it finishes and returns the final job.
  // A dropped stream (server restart) is resumed from the last event seen,
  // retrying UNAVAILABLE until `timeout` (zero: no limit) runs out or the
  // server has been unreachable for two minutes.
  absl::StatusOr<pb::BenchJob> Watch(const std::string& job_id,
                                     const std::function<void(const pb::BenchEvent&)>& on_event,
                                     absl::Duration timeout = absl::ZeroDuration());

 private:
  explicit BenchClient(ClientOptions options) : options_(std::move(options)) {}
  void Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::BenchService::Stub> stub_;
};

// ------------------------------------------------------------------ suites

// A suite file: JSON ({"name": ..., "jobs": [BenchJobSpec, ...]}, proto JSON
// field names) or text proto (BenchSuite). Ops and enums may be written by
// name ("op": "OP_ATTENTION"). Each job without a name gets "<suite>/<index>".
absl::StatusOr<pb::BenchSuite> LoadSuite(const std::string& path);
absl::StatusOr<pb::BenchSuite> ParseSuite(const std::string& text, const std::string& what);

// ------------------------------------------------------------------ export

// {"jobs": [...]} in proto JSON with the proto's field names.
std::string ExportJson(const std::vector<pb::BenchJob>& jobs);
absl::StatusOr<std::vector<pb::BenchJob>> ParseExportJson(const std::string& json, const std::string& what);
absl::StatusOr<std::vector<pb::BenchJob>> LoadExportJson(const std::string& path);

// A ceiling for people: "776 TFLOP/s", or "not measured" for 0 (a GPU server
// without --bench_gemm_tflops has no GEMM ceiling; 0 would read as a rate).
std::string CeilingText(double value, const std::string& unit);

// One row per variant: job, op and shape, variant, gate, error, time, TFLOP/s,
// TB/s, fractions of the ceilings (marked "(!)" where over 100 %; the job's
// notes below the table say why), clocks when sampled, rank and speedup.
std::string ExportMarkdown(const std::vector<pb::BenchJob>& jobs);

// One check of the CI gate: a variant's correctness, a job's failure, or a
// slowdown against the baseline.
struct CiCheck {
  std::string suite;     // the job's name
  std::string name;      // the variant ("job" for the job itself)
  bool failed = false;
  std::string message;   // why it failed, or a one-line summary
  double seconds = 0;    // the variant's time, for JUnit's time attribute
};

// Correctness of every variant, the state of every job, and (with a
// baseline) the slowdown of every timed variant found in it by job name and
// variant: failed when value_ms > baseline * (1 + max_regression_pct / 100).
std::vector<CiCheck> CiChecks(const std::vector<pb::BenchJob>& jobs, const std::vector<pb::BenchJob>* baseline,
                              double max_regression_pct);
std::string ExportJUnit(const std::string& suite_name, const std::vector<CiCheck>& checks);

// JUnit of the jobs alone (no baseline).
std::string ExportJUnit(const std::vector<pb::BenchJob>& jobs);

}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_BENCH_CLIENT_H_
