// Wall-clock timing and flag parsing shared by the benches.
#ifndef KERNELSERVE_BENCH_BENCH_UTIL_H_
#define KERNELSERVE_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kernelserve {
namespace bench {

struct WallTimes {
  double best_s = 0;
  double mean_s = 0;
};

// Runs `call` reps + 1 times; the first run is a warm-up and is not counted.
// The first failing status is returned as is.
inline absl::StatusOr<WallTimes> TimeReps(int reps, const std::function<absl::Status()>& call) {
  double best = 1e30, total = 0;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status st = call();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) return st;
    if (r == 0) continue;  // warm-up
    best = std::min(best, sec);
    total += sec;
  }
  return WallTimes{best, total / reps};
}

// The text after `prefix` when `arg` starts with it, else nullptr.
inline const char* FlagValue(const std::string& arg, const char* prefix) {
  const size_t n = std::strlen(prefix);
  return arg.compare(0, n, prefix) == 0 ? arg.c_str() + n : nullptr;
}

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_BENCH_BENCH_UTIL_H_
