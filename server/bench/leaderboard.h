// The leaderboard of users' kernels (BenchService.Leaderboard): the
// persisted results of finished jobs that passed the correctness gate and
// were timed, the best per (shape, device, variant, source hash), ranked per
// shape and device by time.
#ifndef KERNELSERVE_SERVER_BENCH_LEADERBOARD_H_
#define KERNELSERVE_SERVER_BENCH_LEADERBOARD_H_

#include <vector>

#include "absl/status/status.h"
#include "kernelserve/v1/bench.pb.h"

namespace kernelserve {
namespace bench {

namespace pb = ::kernelserve::v1;

// INVALID_ARGUMENT naming the request's field (op, attention.head_dim, ...,
// limit) and what was expected.
absl::Status ValidateLeaderboardRequest(const pb::LeaderboardRequest& request);

// The leaderboard of `request` (valid) over `jobs`.
pb::LeaderboardResponse RankLeaderboard(const std::vector<pb::BenchJob>& jobs, const pb::LeaderboardRequest& request);

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_LEADERBOARD_H_
