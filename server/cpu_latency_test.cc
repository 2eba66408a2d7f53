#include "server/cpu_latency.h"

#include <unistd.h>

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// The real device: a request is in force while held and gone after. The
// file reads the strictest request of every holder (main_test's server may
// hold 0 at the same time), so the checks are bounds, and the release is
// waited for.
TEST(CpuLatencyTest, HoldsTheRequestWhileAlive) {
  if (access(kCpuDmaLatencyPath, W_OK) != 0) {
    GTEST_SKIP() << kCpuDmaLatencyPath << " is not writable here (needs root and the device node)";
  }
  const absl::StatusOr<int32_t> before = CurrentCpuLatency();
  ASSERT_TRUE(before.ok()) << before.status();
  if (*before <= 1) GTEST_SKIP() << "another process holds a request of " << *before << " µs";
  {
    absl::StatusOr<CpuLatencyRequest> held = CpuLatencyRequest::Hold(1);
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_LE(CurrentCpuLatency().value_or(-1), 1);
    EXPECT_GE(CurrentCpuLatency().value_or(-1), 0);
    // Moved, the request stays in force once.
    std::optional<CpuLatencyRequest> moved(std::move(*held));
    held = absl::UnknownError("moved from");
    EXPECT_LE(CurrentCpuLatency().value_or(-1), 1);
    EXPECT_GE(CurrentCpuLatency().value_or(-1), 0);
  }
  int32_t after = 1;
  for (int i = 0; i < 100 && after == 1; ++i) {
    after = CurrentCpuLatency().value_or(-1);
    if (after == 1) usleep(50000);
  }
  EXPECT_NE(after, 1) << "the request outlived its holder";
}

TEST(CpuLatencyTest, ClearErrors) {
  const absl::StatusOr<CpuLatencyRequest> missing = CpuLatencyRequest::Hold(0, "/nonexistent/cpu_dma_latency");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("cannot open /nonexistent/cpu_dma_latency: No such file"),
            std::string::npos)
      << missing.status();
  const absl::StatusOr<CpuLatencyRequest> negative = CpuLatencyRequest::Hold(-5);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("got -5"), std::string::npos) << negative.status();
}

}  // namespace
}  // namespace kernelserve
