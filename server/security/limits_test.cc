#include "server/security/limits.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace security {
namespace {

TEST(ParseLimitsFile, DefaultsOverridesAndErrors) {
  TenantLimits flags;
  flags.max_queued_jobs = 7;
  auto c = ParseLimitsFile(
      "alice max_device_memory=2GiB max_running_jobs=2\n"
      "* requests_per_second=10.5 max_device_memory=1M # comment\n"
      "bob request_burst=3\n",
      "limits", flags);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->For("alice").max_device_memory, int64_t{2} << 30);
  EXPECT_EQ(c->For("alice").max_running_jobs, 2);
  EXPECT_EQ(c->For("alice").max_queued_jobs, 7);
  EXPECT_DOUBLE_EQ(c->For("alice").requests_per_second, 10.5);  // "*" applies before tenant lines
  EXPECT_EQ(c->For("bob").max_device_memory, 1000000);
  EXPECT_EQ(c->For("bob").request_burst, 3);
  EXPECT_EQ(c->For("carol").max_device_memory, 1000000);

  auto bad = ParseLimitsFile("alice max_gpus=3\n", "limits", flags);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("limits:1"), std::string::npos);
  EXPECT_FALSE(ParseLimitsFile("alice max_device_memory=-1\n", "l", flags).ok());
  EXPECT_FALSE(ParseLimitsFile("alice requests_per_second=x\n", "l", flags).ok());
}

TEST(TenantLimiter, RateIsPerTenantTokenBucket) {
  LimitsConfig config;
  config.defaults.requests_per_second = 2;
  config.defaults.request_burst = 3;
  absl::Time now = absl::FromUnixSeconds(1000);
  TenantLimiter limiter(config, [&] { return now; });
  Tenant alice{"alice", false}, bob{"bob", false};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.AdmitRequest(alice).ok()) << i;
  absl::Status s = limiter.AdmitRequest(alice);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("requests_per_second"), std::string::npos) << s;
  EXPECT_NE(s.message().find("alice"), std::string::npos) << s;
  EXPECT_TRUE(limiter.AdmitRequest(bob).ok());  // separate bucket
  now += absl::Milliseconds(500);               // refills one token
  EXPECT_TRUE(limiter.AdmitRequest(alice).ok());
  EXPECT_FALSE(limiter.AdmitRequest(alice).ok());
  now += absl::Seconds(100);  // capped at the burst
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.AdmitRequest(alice).ok());
  EXPECT_FALSE(limiter.AdmitRequest(alice).ok());
  EXPECT_EQ(limiter.rejections()["requests_per_second"], 3);
}

TEST(TenantLimiter, StreamsAreReleased) {
  LimitsConfig config;
  config.defaults.max_concurrent_streams = 2;
  TenantLimiter limiter(config);
  Tenant alice{"alice", false};
  auto a = limiter.AcquireStream(alice);
  auto b = limiter.AcquireStream(alice);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = limiter.AcquireStream(alice);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("max_concurrent_streams"), std::string::npos);
  EXPECT_EQ(limiter.open_streams("alice"), 2);
  { auto moved = std::move(*a); }
  EXPECT_EQ(limiter.open_streams("alice"), 1);
  EXPECT_TRUE(limiter.AcquireStream(alice).ok());  // and released again at once
  EXPECT_EQ(limiter.open_streams("alice"), 1);
}

TEST(TenantLimiter, MemoryAndJobs) {
  LimitsConfig config;
  config.per_tenant["alice"].max_device_memory = 1000;
  config.per_tenant["alice"].max_queued_jobs = 2;
  config.per_tenant["alice"].max_running_jobs = 1;
  TenantLimiter limiter(config);
  Tenant alice{"alice", false}, bob{"bob", false};
  EXPECT_TRUE(limiter.CheckMemory(alice, 600, 400).ok());
  absl::Status s = limiter.CheckMemory(alice, 600, 401);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max_device_memory"), std::string::npos) << s;
  EXPECT_TRUE(limiter.CheckMemory(bob, int64_t{1} << 50, 1).ok());  // unlimited default
  EXPECT_TRUE(limiter.CheckSubmitJob(alice, 1).ok());
  EXPECT_NE(limiter.CheckSubmitJob(alice, 2).message().find("max_queued_jobs"), std::string::npos);
  EXPECT_TRUE(limiter.CheckStartJob(alice, 0).ok());
  EXPECT_NE(limiter.CheckStartJob(alice, 1).message().find("max_running_jobs"), std::string::npos);
  EXPECT_NE(limiter.CheckStartJob(alice, 1).message().find("1 running, limit 1"), std::string::npos)
      << limiter.CheckStartJob(alice, 1);
  EXPECT_TRUE(limiter.CheckStartJob(bob, 100).ok());
  // Memory and the queue refuse requests and count them; a held job is not a refusal.
  const std::map<std::string, int64_t> counted = limiter.rejections();
  EXPECT_EQ(counted.at("max_device_memory"), 1);
  EXPECT_EQ(counted.at("max_queued_jobs"), 1);
  EXPECT_EQ(counted.count("max_running_jobs"), 0u);
}

}  // namespace
}  // namespace security
}  // namespace kernelserve
