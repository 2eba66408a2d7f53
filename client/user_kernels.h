// Users' own kernels from the client side (server/user_kernels,
// kernels/api/user_kernel_abi.h): a UserKernel from a file, and the
// leaderboard (BenchService.Leaderboard) as a table.
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

// The kernel in `path`: an ELF file for EM_CUDA as a cubin, any other ELF
// file as a prebuilt shared object, a .ptx file as PTX, any other as source
// (a cubin or PTX needs its launch geometry set afterwards: UserKernel.launch). `name` "" takes the file's stem ("my_attn" for
// my_attn.cc); `backend` "" is the server's.
absl::StatusOr<pb::UserKernel> UserKernelFromFile(const std::string& path, const std::string& name = "",
                                                  const std::vector<std::string>& flags = {},
                                                  const std::string& backend = "");

// BenchService.Leaderboard's entries as a markdown table, one section per
// shape and device ("no passing results" when there are none).
std::string LeaderboardMarkdown(const pb::LeaderboardResponse& board);
// The same as JSON (the proto's JSON mapping, field names as in the proto).
std::string LeaderboardJson(const pb::LeaderboardResponse& board);

}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_USER_KERNELS_H_
