// kernelctl's benchmark subcommands: bench, jobs, export and ci. kernelctl.cc
// dispatches to RunBenchSubcommand.
#ifndef KERNELSERVE_CLIENT_KERNELCTL_BENCH_H_
#define KERNELSERVE_CLIENT_KERNELCTL_BENCH_H_

#include <string>
#include <utility>
#include <vector>

#include "client/client.h"

namespace kernelserve {
namespace kernelctl {

// (name, one-line summary) of each benchmark subcommand.
const std::vector<std::pair<std::string, std::string>>& BenchSubcommands();

// Runs `cmd` ("bench", "jobs", "export" or "ci") with its arguments. With
// `help`, prints the subcommand's usage. Exit status: 0 success, 1 a failed
// call, job or CI gate, 2 a usage error.
int RunBenchSubcommand(const std::string& cmd, const std::vector<std::string>& args,
                       const ClientOptions& options, bool help);

}  // namespace kernelctl
}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_KERNELCTL_BENCH_H_
