#include "server/call_log.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// The phases tile the call: each is the time from the previous mark, the
// last (reply) runs to the end, and together they add up to the call's time.
TEST(CallLogTest, PhasesSplitTheCall) {
  const absl::Time before = absl::Now();
  CallLog log("/test/Phases", nullptr);
  EXPECT_EQ(log.PhasesString(absl::Now()), "");
  absl::SleepFor(absl::Milliseconds(2));
  log.Mark("queue");
  absl::SleepFor(absl::Milliseconds(5));
  log.Mark("launch");
  const absl::Time end = absl::Now() + absl::Milliseconds(1);
  const std::string s = log.PhasesString(end);
  std::vector<std::string> parts = absl::StrSplit(s, ' ');
  ASSERT_EQ(parts.size(), 3u) << s;
  const char* names[] = {"queue", "launch", "reply"};
  double sum = 0, ms[3];
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> kv = absl::StrSplit(parts[i], '=');
    ASSERT_EQ(kv.size(), 2u) << s;
    EXPECT_EQ(kv[0], names[i]);
    ASSERT_TRUE(absl::SimpleAtod(kv[1], &ms[i])) << s;
    sum += ms[i];
  }
  EXPECT_GE(ms[0], 2.0) << s;
  EXPECT_GE(ms[1], 5.0) << s;
  EXPECT_GE(ms[2], 1.0) << s;
  EXPECT_LE(sum, absl::ToDoubleMilliseconds(end - before) + 0.01) << s;
}

}  // namespace
}  // namespace kernelserve
