// The real kernelserve binary as a subprocess: SIGKILL it mid-job, restart it
// on the same --data_dir, and check that nothing was lost. Then kernelctl's
// ci gate (pass, correctness failure, regression against a baseline) and
// export, run as a user would.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/bench_client.h"
#include "server/bench/server_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;

pb::BenchJobSpec Small(const std::string& name) {
  pb::BenchJobSpec s = SmallAttentionSpec(name);
  s.add_variants("test.wrong");
  return s;
}

std::unique_ptr<BenchClient> Connect(const ServerProcess& s) {
  ClientOptions o;
  o.target = s.target();
  o.default_timeout = absl::Seconds(30);
  return std::move(BenchClient::Connect(o).value());
}

pb::BenchJob WaitFor(BenchClient& c, const std::string& id, std::function<bool(const pb::BenchJob&)> pred) {
  pb::BenchJob j;
  for (int i = 0; i < 1200; ++i) {
    auto g = c.Get(id);
    if (g.ok()) {
      j = *g;
      if (pred(j)) return j;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ADD_FAILURE() << "timed out on " << id << " in " << pb::BenchJobState_Name(j.state());
  return j;
}

TEST(BenchRestartTest, SigkillMidJobLosesNothing) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  std::string done_id, running_id, queued_id;
  pb::BenchJob done_before;
  {
    ServerProcess s1(dir, dir + "/log1");
    ASSERT_GT(s1.port(), 0) << s1.log();
    auto c = Connect(s1);
    auto a = c->Submit(Small("finished"));
    ASSERT_TRUE(a.ok()) << a.status();
    done_id = a->id();
    done_before = c->Watch(done_id, [](const pb::BenchEvent&) {}).value();
    ASSERT_EQ(done_before.state(), pb::JOB_DONE);

    pb::BenchJobSpec long_spec = Small("long");
    long_spec.clear_variants();
    long_spec.add_variants("cpu");
    long_spec.mutable_method()->set_method(pb::METHOD_SUSTAINED);
    long_spec.mutable_method()->set_window_s(60);
    auto b = c->Submit(long_spec);
    ASSERT_TRUE(b.ok());
    running_id = b->id();
    auto q = c->Submit(Small("queued"));
    ASSERT_TRUE(q.ok());
    queued_id = q->id();
    WaitFor(*c, running_id, [](const pb::BenchJob& j) { return j.state() == pb::JOB_RUNNING; });
    EXPECT_EQ(c->Get(queued_id)->state(), pb::JOB_QUEUED);
    const int status = s1.Kill(SIGKILL);
    EXPECT_TRUE(WIFSIGNALED(status));
  }

  ServerProcess s2(dir, dir + "/log2");
  ASSERT_GT(s2.port(), 0) << s2.log();
  auto c = Connect(s2);
  // The finished job is all there, results and events.
  auto done = c->Get(done_id);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->SerializeAsString(), done_before.SerializeAsString());
  // The running job was re-queued (second attempt) and starts again first.
  pb::BenchJob again = WaitFor(*c, running_id, [](const pb::BenchJob& j) { return j.state() == pb::JOB_RUNNING; });
  EXPECT_EQ(again.attempts(), 2);
  EXPECT_THAT(absl::StrJoin(again.notes(), ";"), HasSubstr("re-queued"));
  std::vector<pb::BenchEvent> events;
  ASSERT_TRUE(c->Cancel(running_id, "restart test").ok());
  auto cancelled = c->Watch(running_id, [&](const pb::BenchEvent& e) { events.push_back(e); });
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), pb::JOB_CANCELLED);
  bool requeued = false;
  for (const auto& e : events) requeued |= e.phase() == pb::PHASE_REQUEUED;
  EXPECT_TRUE(requeued);
  // The queued job was kept and now runs to the end.
  auto q = c->Watch(queued_id, [](const pb::BenchEvent&) {});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->state(), pb::JOB_DONE);
  EXPECT_EQ(q->results_size(), 2);
  EXPECT_EQ(q->attempts(), 1);

  // kernelctl sees the same jobs.
  std::string out;
  EXPECT_EQ(Kernelctl(s2.target(), "jobs list", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr(done_id));
  EXPECT_THAT(out, HasSubstr("cancelled"));
  EXPECT_EQ(Kernelctl(s2.target(), "export --format=junit " + done_id, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("<failure message=\"rel_rms"));
  EXPECT_EQ(Kernelctl(s2.target(), "export --format=markdown " + done_id, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("| finished | attention |"));

  // SIGTERM drains and exits cleanly.
  const int status = s2.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(BenchRestartTest, KernelctlCiGate) {
  const std::string dir = TempDir();
  ServerProcess s(dir, dir + "/log");
  ASSERT_GT(s.port(), 0) << s.log();
  std::string out;
  const std::string suite = Runfile("bench/suites/cpu_small.json");
  // A clean suite passes and writes JUnit and results.
  int rc = Kernelctl(s.target(),
                     absl::StrCat("ci --suite=", suite, " --junit=", dir, "/j1.xml --results=", dir, "/r1.json"), &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("0 failed"));
  const std::string j1 = ReadAll(dir + "/j1.xml");
  EXPECT_THAT(j1, HasSubstr("<testsuites name=\"cpu_small\""));
  EXPECT_THAT(j1, HasSubstr("failures=\"0\""));

  // Against its own results with a limit far above this shared machine's
  // timing noise: still passes.
  rc = Kernelctl(s.target(),
                 absl::StrCat("ci --suite=", suite, " --baseline=", dir, "/r1.json --max-regression=100000 --junit=", dir,
                              "/j2.xml"),
                 &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(ReadAll(dir + "/j2.xml"), HasSubstr("vs baseline"));

  // A baseline 1000x faster: every timed variant regressed.
  auto base = LoadExportJson(dir + "/r1.json");
  ASSERT_TRUE(base.ok()) << base.status();
  for (auto& j : *base) {
    for (auto& r : *j.mutable_results()) r.mutable_time()->set_value_ms(r.time().value_ms() / 1000);
  }
  WriteAll(dir + "/fast.json", ExportJson(*base));
  rc = Kernelctl(s.target(),
                 absl::StrCat("ci --suite=", suite, " --baseline=", dir, "/fast.json --max-regression=10 --junit=", dir,
                              "/j3.xml"),
                 &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("vs baseline"));
  const std::string j3 = ReadAll(dir + "/j3.xml");
  EXPECT_THAT(j3, HasSubstr("<failure message="));
  EXPECT_THAT(j3, HasSubstr("limit +10.0%"));

  // A variant that fails the correctness gate fails CI.
  rc = Kernelctl(s.target(),
                 absl::StrCat("ci --suite=", Runfile("bench/suites/cpu_gate_fail.json"), " --junit=", dir, "/j4.xml"),
                 &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("FAIL attention/wrong-on-purpose / test.wrong"));
  EXPECT_THAT(ReadAll(dir + "/j4.xml"), HasSubstr("failures=\"1\""));

  // Usage errors exit 2.
  EXPECT_EQ(Kernelctl(s.target(), "ci", &out), 2) << out;
  EXPECT_EQ(Kernelctl(s.target(), "bench --op=nonsense", &out), 2) << out;
  // bench from flags prints the table.
  rc = Kernelctl(s.target(),
                 "bench --op=mla_decode --batch=1 --heads=4 --seq=64 --q-len=2 --variants=cpu,oracle --warmup=1 "
                 "--iters=2",
                 &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("| mla_decode | mla_decode | B=1 q_len=2 H=4 S=64 | cpu | pass |"));
  EXPECT_THAT(out, HasSubstr("done"));
}

}  // namespace
}  // namespace kernelserve
