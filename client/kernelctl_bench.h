// kernelctl's benchmark subcommands: bench, jobs, export and ci. kernelctl.cc
// dispatches to RunBenchSubcommand.
#ifndef KERNELSERVE_CLIENT_KERNELCTL_BENCH_H_
#define KERNELSERVE_CLIENT_KERNELCTL_BENCH_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/bench_client.h"
#include "client/client.h"
#include "client/kernelctl_flags.h"

namespace kernelserve {
namespace kernelctl {

// (name, one-line summary) of each benchmark subcommand.
const std::vector<std::pair<std::string, std::string>>& BenchSubcommands();

// Runs `cmd` ("bench", "jobs", "export" or "ci") with its arguments. With
// `help`, prints the subcommand's usage. Exit status: 0 success, 1 a failed
// call, job or CI gate, 2 a usage error.
int RunBenchSubcommand(const std::string& cmd, const std::vector<std::string>& args,
                       const ClientOptions& options, bool help);

// The job-spec flags of `bench` (--op, the shape, the method, ...), for the
// subcommands in other files (kernelctl_submit.cc): Define, parse, Build.
class JobSpecFlags {
 public:
  JobSpecFlags();
  ~JobSpecFlags();
  void Define(FlagSet& f);
  absl::StatusOr<pb::BenchJobSpec> Build() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Submits `specs` and follows them with bench's progress display.
absl::StatusOr<std::vector<pb::BenchJob>> RunJobsWithProgress(BenchClient& client,
                                                              const std::vector<pb::BenchJobSpec>& specs);

// kernelctl_submit.cc: `submit` (a user's kernel as a job) and `leaderboard`.
int CmdSubmit(const std::vector<std::string>& args, const ClientOptions& options, bool help);
int CmdLeaderboard(const std::vector<std::string>& args, const ClientOptions& options, bool help);

}  // namespace kernelctl
}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_KERNELCTL_BENCH_H_
