// Users' own kernels from the client side (server/user_kernels,
// kernels/api/user_kernel_abi.h): a UserKernel from a file, and the
// leaderboard of passing results per op and shape.
//
//   KS_ASSIGN_OR_RETURN(pb::UserKernel k, UserKernelFromFile("my_attn.cc"));
//   spec.add_user_kernels()->Swap(&k);      // beside spec.variants ("cpu", ...)
//   KS_ASSIGN_OR_RETURN(pb::BenchJob job, client->Submit(spec));
#ifndef KERNELSERVE_CLIENT_USER_KERNELS_H_
#define KERNELSERVE_CLIENT_USER_KERNELS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernelserve/v1/bench.pb.h"

namespace kernelserve {

namespace pb = ::kernelserve::v1;

// The kernel in `path`: an ELF file goes as a prebuilt shared object, any
// other as source. `name` "" takes the file's stem ("my_attn" for
// my_attn.cc); `backend` "" is the server's.
absl::StatusOr<pb::UserKernel> UserKernelFromFile(const std::string& path, const std::string& name = "",
                                                  const std::vector<std::string>& flags = {},
                                                  const std::string& backend = "");

struct LeaderboardRow {
  int rank = 0;  // within its shape, 1 = fastest
  std::string shape_desc;
  std::string variant;        // "user:my_attn", "cpu", ...
  std::string source_sha256;  // user kernels only
  std::string tenant;         // the job's tenant ("" without authentication), else its submitter
  double value_ms = 0;
  double tflops = 0, tbps = 0;
  std::string job_id;
  std::string backend, device_name;
};

// Every passing (correct and timed) result of `op`'s finished jobs, the
// best per (shape, variant, source hash), ranked per shape by time;
// `shape_filter` (a substring of the shape description) "" keeps all.
std::vector<LeaderboardRow> Leaderboard(const std::vector<pb::BenchJob>& jobs, pb::BenchOp op,
                                        const std::string& shape_filter = "");
// A markdown table, one section per shape.
std::string LeaderboardMarkdown(const std::vector<LeaderboardRow>& rows);

}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_USER_KERNELS_H_
