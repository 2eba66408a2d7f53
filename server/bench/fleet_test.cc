// A fleet: three real kernelserve binaries (CPU backend, real ports) sharing
// one private PostgreSQL cluster (--job_store). Jobs submitted to one server
// run on all three, each once; a server killed with SIGKILL mid-job loses it
// to another, which finishes it with the reason in its notes; a database
// restart mid-run is survived. Skips, saying why, without PostgreSQL.
#include <signal.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/bench_client.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/bench/pg_test_cluster.h"
#include "server/bench/server_process.h"

namespace kernelserve {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// Stale after 3 s: well above a heartbeat (200 ms) plus a database restart.
constexpr int kStaleMs = 3000;

// Attention on the CPU; `window_s` > 0 makes it a sustained run that long.
pb::BenchJobSpec Spec(const std::string& name, double window_s) {
  pb::BenchJobSpec s = SmallAttentionSpec(name);
  if (window_s > 0) {
    s.mutable_method()->set_method(pb::METHOD_SUSTAINED);
    s.mutable_method()->set_warmin_s(0.05);
    s.mutable_method()->set_window_s(window_s);
  }
  return s;
}

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = bench::PgTestCluster::Start();
    if (cluster.status().code() == absl::StatusCode::kNotFound) {
      GTEST_SKIP() << "no PostgreSQL here, so no fleet to test: " << cluster.status().message();
    }
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    dir_ = TempDir();
    for (int i = 0; i < 3; ++i) Start(i);
  }

  void Start(int i) {
    const std::string n = std::to_string(i);
    servers_.resize(3);
    servers_[i] = std::make_unique<ServerProcess>(
        dir_ + "/d" + n, dir_ + "/log" + n,
        std::vector<std::string>{"--job_store=" + cluster_->url(), "--node_id=node" + n, "--fleet_heartbeat_ms=200",
                                 absl::StrCat("--fleet_stale_ms=", kStaleMs), "--bench_max_attempts=3",
                                 "--bench_max_jobs_per_submitter=100"});
    ASSERT_GT(servers_[i]->port(), 0) << servers_[i]->log();
    ClientOptions o;
    o.target = servers_[i]->target();
    o.default_timeout = absl::Seconds(30);
    clients_.resize(3);
    clients_[i] = std::move(BenchClient::Connect(o).value());
  }

  // Polls server `i` until job `id` is in a final state (or 60 s pass).
  pb::BenchJob WaitDone(int i, const std::string& id) {
    pb::BenchJob last;
    for (int k = 0; k < 600; ++k) {
      absl::StatusOr<pb::BenchJob> j = clients_[i]->Get(id);
      if (j.ok()) {
        last = *j;
        if (j->state() == pb::JOB_DONE || j->state() == pb::JOB_FAILED || j->state() == pb::JOB_CANCELLED ||
            j->state() == pb::JOB_INTERRUPTED) {
          return last;
        }
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " did not finish: " << last.DebugString();
    return last;
  }

  // Polls until job `id` runs; the job then.
  pb::BenchJob WaitRunning(int i, const std::string& id) {
    pb::BenchJob last;
    for (int k = 0; k < 300; ++k) {
      absl::StatusOr<pb::BenchJob> j = clients_[i]->Get(id);
      if (j.ok() && j->state() == pb::JOB_RUNNING && !j->node().empty()) return *j;
      if (j.ok()) last = *j;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "job " << id << " did not start: " << last.DebugString();
    return last;
  }

  std::unique_ptr<bench::PgTestCluster> cluster_;
  std::string dir_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<std::unique_ptr<BenchClient>> clients_;
};

TEST_F(FleetTest, JobsSubmittedToOneServerRunOnAllThreeEachOnce) {
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) {
    absl::StatusOr<pb::BenchJob> j = clients_[0]->Submit(Spec("job" + std::to_string(i), 0.1));
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(j->state(), pb::JOB_QUEUED);
    ids.push_back(j->id());
  }
  std::map<std::string, int> per_node;
  for (const std::string& id : ids) {
    const pb::BenchJob j = WaitDone(2, id);  // read through another server
    EXPECT_EQ(j.state(), pb::JOB_DONE) << j.error();
    EXPECT_EQ(j.attempts(), 1) << id << " ran more than once";
    ASSERT_EQ(j.results_size(), 1);
    EXPECT_TRUE(j.results(0).correct());
    ++per_node[j.node()];
  }
  for (const std::string n : {"node0", "node1", "node2"}) {
    EXPECT_GT(per_node[n], 0) << n << " ran none of the 30 jobs";
  }
  EXPECT_EQ(per_node["node0"] + per_node["node1"] + per_node["node2"], 30);

  // Every server lists every job; a watch on a server that did not run the
  // job follows it to the end through the store's events.
  for (int i = 0; i < 3; ++i) {
    pb::ListBenchRequest req;
    req.set_limit(100);
    absl::StatusOr<std::vector<pb::BenchJob>> all = clients_[i]->List(req);
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(all->size(), 30u) << "server " << i;
  }
  absl::StatusOr<pb::BenchJob> later = clients_[1]->Submit(Spec("watched", 0.3));
  ASSERT_TRUE(later.ok()) << later.status();
  std::vector<pb::BenchPhase> phases;
  absl::StatusOr<pb::BenchJob> watched =
      clients_[2]->Watch(later->id(), [&](const pb::BenchEvent& e) { phases.push_back(e.phase()); }, absl::Seconds(60));
  ASSERT_TRUE(watched.ok()) << watched.status();
  EXPECT_EQ(watched->state(), pb::JOB_DONE);
  EXPECT_FALSE(watched->node().empty());
  EXPECT_THAT(phases, Contains(pb::PHASE_QUEUED));
  EXPECT_THAT(phases, Contains(pb::PHASE_STARTED));
  EXPECT_EQ(phases.back(), pb::PHASE_DONE);

  // The fleet view: each server lists the two others with their devices.
  ClientOptions o;
  o.target = servers_[0]->target();
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<pb::ListDevicesResponse> devices = (*client)->Devices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_EQ(devices->node_id(), "node0");
  ASSERT_EQ(devices->fleet_size(), 2);
  EXPECT_EQ(devices->fleet(0).node_id(), "node1");
  EXPECT_EQ(devices->fleet(0).address(), servers_[1]->target());
  EXPECT_EQ(devices->fleet(1).address(), servers_[2]->target());
  EXPECT_EQ(devices->fleet(1).devices_size(), 1);
  EXPECT_GT(devices->fleet(1).heartbeat_unix_ms(), absl::ToUnixMillis(absl::Now()) - 10000);

  std::string out;
  ASSERT_EQ(Kernelctl(servers_[1]->target(), "devices --fleet", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("node: node1"));
  EXPECT_THAT(out, HasSubstr("fleet: 2 other node(s)"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("node node0 at ", servers_[0]->target(), ": cpu")));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("node node2 at ", servers_[2]->target(), ": cpu")));
  EXPECT_THAT(out, HasSubstr("last heartbeat"));
  ASSERT_EQ(Kernelctl(servers_[1]->target(), "jobs get " + ids[0], &out), 0) << out;
  EXPECT_THAT(out, HasSubstr(ids[0])) << "any server gets any job";
}

// 100 short jobs submitted round robin: each starts exactly once, wherever.
TEST_F(FleetTest, HundredJobsSubmittedToAllThreeEachRunOnce) {
  std::vector<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<pb::BenchJob> j = clients_[i % 3]->Submit(Spec("short" + std::to_string(i), 0));
    ASSERT_TRUE(j.ok()) << j.status();
    ids.push_back(j->id());
  }
  std::set<std::string> nodes;
  for (const std::string& id : ids) {
    const pb::BenchJob j = WaitDone(0, id);
    EXPECT_EQ(j.state(), pb::JOB_DONE) << j.error();
    EXPECT_EQ(j.attempts(), 1) << id;
    nodes.insert(j.node());
  }
  EXPECT_GE(nodes.size(), 2u) << "one node ran all 100";
  // The events agree: one start per job.
  for (int k = 0; k < 100; k += 9) {
    int starts = 0;
    absl::StatusOr<pb::BenchJob> w = clients_[(k + 1) % 3]->Watch(
        ids[k], [&](const pb::BenchEvent& e) { starts += e.phase() == pb::PHASE_STARTED; }, absl::Seconds(30));
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(starts, 1) << ids[k];
  }
}

TEST_F(FleetTest, AServerKilledMidJobLosesItToAnotherThatFinishesIt) {
  absl::StatusOr<pb::BenchJob> job = clients_[0]->Submit(Spec("long", 2.0));
  ASSERT_TRUE(job.ok()) << job.status();
  const pb::BenchJob running = WaitRunning(0, job->id());
  const int victim = running.node().back() - '0';
  ASSERT_TRUE(victim >= 0 && victim < 3) << running.node();
  const int status = servers_[victim]->Kill(SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(status));
  const int reader = (victim + 1) % 3;
  const pb::BenchJob done = WaitDone(reader, job->id());
  EXPECT_EQ(done.state(), pb::JOB_DONE) << done.error();
  EXPECT_EQ(done.attempts(), 2);
  EXPECT_NE(done.node(), running.node()) << "finished by another node";
  EXPECT_THAT(done.notes(), Contains(HasSubstr(absl::StrCat("its node (", running.node(),
                                                            ") stopped heartbeating while it ran; re-queued"))));
  // Its events say so too, read from a server that did not run it.
  std::vector<std::string> messages;
  std::vector<int64_t> seqs;
  int starts = 0;
  absl::StatusOr<pb::BenchJob> watched = clients_[reader]->Watch(
      job->id(),
      [&](const pb::BenchEvent& e) {
        messages.push_back(absl::StrCat(e.seq(), ": ", e.message()));
        seqs.push_back(e.seq());
        starts += e.phase() == pb::PHASE_STARTED;
      },
      absl::Seconds(30));
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string trail = ::testing::PrintToString(messages);
  EXPECT_THAT(messages, Contains(HasSubstr("stopped heartbeating"))) << trail;
  // The killed node may have died between its claim and its first event.
  EXPECT_GE(starts, 1) << trail;
  EXPECT_THAT(messages, Contains(HasSubstr("attempt 2"))) << trail;
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], static_cast<int64_t>(i + 1)) << trail;
}

// SIGTERM drains: the running job goes back to the queue, free for any node,
// and that start does not count.
TEST_F(FleetTest, AServerStoppedMidJobHandsItBackToTheFleet) {
  absl::StatusOr<pb::BenchJob> job = clients_[2]->Submit(Spec("handed back", 2.0));
  ASSERT_TRUE(job.ok()) << job.status();
  const pb::BenchJob running = WaitRunning(2, job->id());
  const int stopped = running.node().back() - '0';
  ASSERT_TRUE(stopped >= 0 && stopped < 3) << running.node();
  const int status = servers_[stopped]->Kill(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << servers_[stopped]->log();
  const pb::BenchJob done = WaitDone((stopped + 1) % 3, job->id());
  std::vector<std::string> messages;
  absl::StatusOr<pb::BenchJob> watched = clients_[(stopped + 1) % 3]->Watch(
      job->id(), [&](const pb::BenchEvent& e) { messages.push_back(absl::StrCat(e.seq(), ": ", e.message())); },
      absl::Seconds(30));
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string trail = ::testing::PrintToString(messages) + "\n" + servers_[stopped]->log();
  EXPECT_EQ(done.state(), pb::JOB_DONE) << done.error() << trail;
  EXPECT_NE(done.node(), running.node()) << trail;
  EXPECT_EQ(done.attempts(), 1) << "a graceful stop does not count the attempt: " << trail;
}

TEST_F(FleetTest, ADatabaseRestartMidRunIsSurvived) {
  absl::StatusOr<pb::BenchJob> job = clients_[1]->Submit(Spec("across a restart", 2.0));
  ASSERT_TRUE(job.ok()) << job.status();
  const pb::BenchJob running = WaitRunning(1, job->id());
  ASSERT_TRUE(cluster_->Restart().ok());
  const pb::BenchJob done = WaitDone(2, job->id());
  EXPECT_EQ(done.state(), pb::JOB_DONE) << done.error();
  EXPECT_EQ(done.attempts(), 1) << "the restart did not make the fleet requeue a running job";
  EXPECT_EQ(done.node(), running.node());
  // Every server serves on: a new job submitted anywhere runs.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<pb::BenchJob> next = clients_[i]->Submit(Spec("after " + std::to_string(i), 0));
    ASSERT_TRUE(next.ok()) << "server " << i << ": " << next.status();
    EXPECT_EQ(WaitDone(i, next->id()).state(), pb::JOB_DONE);
  }
}

}  // namespace
}  // namespace kernelserve
