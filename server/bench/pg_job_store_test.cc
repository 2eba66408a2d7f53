// The PostgreSQL job store against a real, private PostgreSQL cluster:
// round trips, a database restart survived, and bad URLs refused.
#include "server/bench/pg_job_store.h"

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/bench/pg_test_cluster.h"

namespace kernelserve {
namespace bench {
namespace {

using ::testing::HasSubstr;

pb::BenchJob Job(const std::string& id, pb::BenchJobState state) {
  pb::BenchJob j;
  j.set_id(id);
  j.set_state(state);
  j.mutable_spec()->set_name(std::string("with a NUL \0 byte", 17));
  j.mutable_spec()->set_device(2);
  j.add_results()->set_variant("cpu");
  return j;
}

pb::BenchEvent Event(const std::string& id, int64_t seq) {
  pb::BenchEvent e;
  e.set_job_id(id);
  e.set_seq(seq);
  e.set_message("event " + std::to_string(seq));
  return e;
}

TEST(PgJobStoreTest, BadUrlsAreRefusedNamingTheFlag) {
  auto s = OpenPgJobStore("mysql://db/jobs", "--job_store");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("--job_store: expected a postgres://"));
  s = OpenPgJobStore("postgresql:///postgres?host=/nonexistent-ks-dir&user=ks", "--job_store");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("--job_store: cannot connect to the job database"));
}

TEST(PgJobStoreTest, RoundTripsAndSurvivesADatabaseRestart) {
  auto cluster = PgTestCluster::Start();
  if (cluster.status().code() == absl::StatusCode::kNotFound) GTEST_SKIP() << cluster.status().message();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto opened = OpenPgJobStore((*cluster)->url(), "--job_store");
  ASSERT_TRUE(opened.ok()) << opened.status();
  JobStore& store = **opened;
  EXPECT_EQ(store.journal_mode(), "postgresql");

  ASSERT_TRUE(store.PutJob(Job("job-b", pb::JOB_QUEUED)).ok());
  ASSERT_TRUE(store.PutJob(Job("job-a", pb::JOB_QUEUED)).ok());
  ASSERT_TRUE(store.PutJobAndEvent(Job("job-b", pb::JOB_RUNNING), Event("job-b", 1)).ok());
  ASSERT_TRUE(store.AppendEvent(Event("job-b", 2)).ok());
  ASSERT_TRUE(store.AppendEvent(Event("job-b", 3)).ok());

  auto check = [&](int64_t want_events) {
    auto jobs = store.LoadJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_EQ(jobs->size(), 2u);
    EXPECT_EQ((*jobs)[0].id(), "job-b") << "oldest first";
    EXPECT_EQ((*jobs)[0].state(), pb::JOB_RUNNING) << "replaced, not duplicated";
    EXPECT_EQ((*jobs)[0].spec().name(), std::string("with a NUL \0 byte", 17));
    EXPECT_EQ((*jobs)[0].spec().device(), 2);
    EXPECT_EQ((*jobs)[0].results(0).variant(), "cpu");
    EXPECT_EQ((*jobs)[1].id(), "job-a");
    auto events = store.LoadEvents("job-b", 1);
    ASSERT_TRUE(events.ok()) << events.status();
    ASSERT_EQ(static_cast<int64_t>(events->size()), want_events - 1);
    EXPECT_EQ((*events)[0].message(), "event 2");
    EXPECT_EQ(store.MaxEventSeq("job-b").value(), want_events);
    EXPECT_EQ(store.MaxEventSeq("job-a").value(), 0);
  };
  check(3);

  // Events come back in seq order, numerically (10 after 9).
  for (int64_t seq = 4; seq <= 11; ++seq) ASSERT_TRUE(store.AppendEvent(Event("job-c", seq)).ok());
  auto many = store.LoadEvents("job-c", 3);
  ASSERT_TRUE(many.ok());
  ASSERT_EQ(many->size(), 8u);
  for (size_t i = 0; i < many->size(); ++i) EXPECT_EQ((*many)[i].seq(), static_cast<int64_t>(i + 4));

  // Every connection drops; the next call reconnects and nothing is lost.
  ASSERT_TRUE((*cluster)->Restart().ok());
  ASSERT_TRUE(store.AppendEvent(Event("job-b", 4)).ok());
  check(4);
}

// The fleet's primitives, three connections standing for three nodes.
class PgFleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = PgTestCluster::Start();
    if (cluster.status().code() == absl::StatusCode::kNotFound) GTEST_SKIP() << cluster.status().message();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    for (int i = 0; i < 3; ++i) {
      auto s = OpenPgJobStore(cluster_->url(), "--job_store");
      ASSERT_TRUE(s.ok()) << s.status();
      nodes_.push_back(std::move(*s));
    }
  }

  static pb::BenchJob Queued(const std::string& id, int priority = 0) {
    pb::BenchJob j;
    j.set_id(id);
    j.set_state(pb::JOB_QUEUED);
    j.set_backend("cpu");
    j.mutable_spec()->set_priority(priority);
    return j;
  }

  std::unique_ptr<PgTestCluster> cluster_;
  std::vector<std::unique_ptr<FleetJobStore>> nodes_;
};

TEST_F(PgFleetTest, HundredJobsClaimedByThreeNodesEachExactlyOnce) {
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(nodes_[i % 3]->PutJob(Queued("job-" + std::to_string(i))).ok());
  absl::Mutex mu;
  std::map<std::string, int> claims;
  std::vector<int> per_node(3, 0);
  std::vector<std::thread> threads;
  for (int n = 0; n < 3; ++n) {
    threads.emplace_back([&, n] {
      while (true) {
        auto j = nodes_[n]->Claim("node" + std::to_string(n), "cpu", 0, 1000, nullptr);
        ASSERT_TRUE(j.ok()) << j.status();
        if (!j->has_value()) return;
        absl::MutexLock l(&mu);
        ++claims[(*j)->id()];
        ++per_node[n];
        EXPECT_EQ((*j)->state(), pb::JOB_RUNNING);
        EXPECT_EQ((*j)->attempts(), 1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(claims.size(), 100u);
  for (const auto& [id, n] : claims) EXPECT_EQ(n, 1) << id << " claimed " << n << " times";
  EXPECT_EQ(per_node[0] + per_node[1] + per_node[2], 100);
  auto more = nodes_[0]->Claim("node0", "cpu", 0, 1000, nullptr);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(more->has_value());
}

TEST_F(PgFleetTest, ClaimsFollowBackendDeviceAndPriority) {
  pb::BenchJob gpu = Queued("gpu-job", 9);
  gpu.set_backend("cuda");
  pb::BenchJob pinned = Queued("pinned-1", 5);
  pinned.mutable_spec()->set_device(1);
  ASSERT_TRUE(nodes_[0]->PutJob(gpu).ok());
  ASSERT_TRUE(nodes_[0]->PutJob(Queued("any-low", 0)).ok());
  ASSERT_TRUE(nodes_[0]->PutJob(pinned).ok());
  ASSERT_TRUE(nodes_[0]->PutJob(Queued("any-high", 3)).ok());
  pb::BenchJob on_node0 = Queued("on-node0", 9);
  on_node0.set_node("node0");
  ASSERT_TRUE(nodes_[0]->PutJob(on_node0).ok());
  auto id = [&](int device) {
    auto j = nodes_[1]->Claim("node1", "cpu", device, 1000, nullptr);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() && j->has_value() ? (*j)->id() : std::string("none");
  };
  EXPECT_EQ(id(0), "any-high") << "pinned-1 is for device 1; gpu-job for cuda; on-node0 for node0";
  EXPECT_EQ(id(1), "pinned-1");
  EXPECT_EQ(id(1), "any-low");
  EXPECT_EQ(id(0), "none");
  auto mine = nodes_[0]->Claim("node0", "cpu", 0, 1000, nullptr);
  ASSERT_TRUE(mine.ok() && mine->has_value());
  EXPECT_EQ((*mine)->id(), "on-node0");
}

// A node that stops heartbeating: another node requeues its job, claims and
// runs it; the second time it is marked INTERRUPTED with the reason.
TEST_F(PgFleetTest, AJobOfANodeThatStoppedHeartbeatingIsRequeuedThenInterrupted) {
  ASSERT_TRUE(nodes_[0]->PutJob(Queued("job-x")).ok());
  ASSERT_TRUE(nodes_[0]->PutJob(Queued("job-y")).ok());
  auto a = nodes_[0]->Claim("node0", "cpu", 0, 1000, nullptr);
  auto b = nodes_[1]->Claim("node1", "cpu", 0, 1000, nullptr);
  ASSERT_TRUE(a.ok() && a->has_value() && b.ok() && b->has_value());
  // node1 keeps heartbeating; node0 has died.
  ASSERT_TRUE(nodes_[1]->Heartbeat("node1", 5000).ok());
  auto changed = nodes_[2]->RequeueStale(/*stale_before_ms=*/4000, /*max_attempts=*/2);
  ASSERT_TRUE(changed.ok()) << changed.status();
  ASSERT_EQ(changed->size(), 1u);
  EXPECT_EQ((*changed)[0].id(), (*a)->id());
  EXPECT_EQ((*changed)[0].state(), pb::JOB_QUEUED);
  // Nothing is changed twice.
  EXPECT_TRUE(nodes_[1]->RequeueStale(4000, 2)->empty());

  auto again = nodes_[2]->Claim("node2", "cpu", 0, 6000, nullptr);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->id(), (*a)->id());
  EXPECT_EQ((*again)->attempts(), 2);
  changed = nodes_[1]->RequeueStale(7000, 2);
  ASSERT_TRUE(changed.ok()) << changed.status();
  ASSERT_EQ(changed->size(), 2u) << "node1 stopped too (last heartbeat 5000)";
  for (const pb::BenchJob& j : *changed) {
    if (j.id() == (*a)->id()) {
      EXPECT_EQ(j.state(), pb::JOB_INTERRUPTED);
      EXPECT_EQ(j.error(), "its node (node2) stopped heartbeating while it ran, 2 times; not re-queued again");
    } else {
      EXPECT_EQ(j.state(), pb::JOB_QUEUED);
    }
  }
  auto all = nodes_[0]->LoadJobs();
  ASSERT_TRUE(all.ok());
  for (const pb::BenchJob& j : *all) EXPECT_NE(j.state(), pb::JOB_RUNNING) << j.id();
}


// A node whose claim was lost (requeued after a stale heartbeat and claimed
// by another) cannot overwrite the job or add events; the new owner can.
TEST_F(PgFleetTest, WritesOfANodeThatLostItsClaimAreRefused) {
  ASSERT_TRUE(nodes_[0]->PutJob(Queued("job-l")).ok());
  auto a = nodes_[0]->Claim("node0", "cpu", 0, 1000, nullptr);
  ASSERT_TRUE(a.ok() && a->has_value());
  pb::BenchJob mine = **a;
  pb::BenchEvent started = Event("job-l", 1);
  ASSERT_TRUE(nodes_[0]->PutClaimed(&mine, &started, "node0", 1).ok());
  ASSERT_EQ(nodes_[2]->RequeueStale(2000, 3)->size(), 1u);
  auto b = nodes_[1]->Claim("node1", "cpu", 0, 3000, nullptr);
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->attempts(), 2);
  EXPECT_EQ((*b)->node(), "node1");
  EXPECT_THAT((*b)->notes(), ::testing::Contains(HasSubstr("its node (node0) stopped heartbeating")));

  mine.set_state(pb::JOB_DONE);
  pb::BenchEvent late = Event("job-l", 2);
  absl::Status st = nodes_[0]->PutClaimed(&mine, &late, "node0", 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("its claim was lost"));
  EXPECT_EQ(nodes_[0]->PutClaimed(nullptr, &late, "node0", 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(nodes_[0]->MaxEventSeq("job-l").value(), 1) << "the lost node's event is not stored";

  pb::BenchJob theirs = **b;
  theirs.set_state(pb::JOB_DONE);
  pb::BenchEvent done = Event("job-l", 2);
  ASSERT_TRUE(nodes_[1]->PutClaimed(&theirs, &done, "node1", 2).ok());
  auto now = nodes_[2]->LoadJob("job-l");
  ASSERT_TRUE(now.ok() && now->has_value());
  EXPECT_EQ((*now)->state(), pb::JOB_DONE);
  EXPECT_EQ((*now)->node(), "node1");
  EXPECT_EQ(nodes_[2]->MaxEventSeq("job-l").value(), 2);
  EXPECT_FALSE(nodes_[2]->LoadJob("no-such-job")->has_value());
}

TEST_F(PgFleetTest, ClaimSkipsTenantsAtTheirRunningLimit) {
  pb::BenchJob a1 = Queued("a1", 9), a2 = Queued("a2", 9), b1 = Queued("b1", 0);
  a1.set_tenant("alice");
  a2.set_tenant("alice");
  b1.set_tenant("bob");
  for (const auto& j : {a1, a2, b1}) ASSERT_TRUE(nodes_[0]->PutJob(j).ok());
  FleetJobStore::TenantGate one_each = [](const std::string&, int64_t running) { return running < 1; };
  auto id = [&](int n) {
    auto j = nodes_[n]->Claim("node" + std::to_string(n), "cpu", 0, 1000, one_each);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() && j->has_value() ? (*j)->id() : std::string("none");
  };
  EXPECT_EQ(id(0), "a1");
  EXPECT_EQ(id(1), "b1") << "alice runs one job (on node0), so a2 waits although its priority is higher";
  EXPECT_EQ(id(2), "none");
}

TEST_F(PgFleetTest, QueuedWritesCancelRequestsAndNodeHeartbeats) {
  ASSERT_TRUE(nodes_[0]->PutJob(Queued("job-q")).ok());
  ASSERT_TRUE(nodes_[0]->PutJobAndEvent(Queued("job-r"), Event("job-r", 1)).ok());
  // A cancel of a queued job from any node, its event numbered by the store.
  pb::BenchJob q = Queued("job-q");
  q.set_state(pb::JOB_CANCELLED);
  pb::BenchEvent e;
  e.set_job_id("job-q");
  e.set_message("cancelled");
  ASSERT_TRUE(nodes_[1]->PutIfState(q, pb::JOB_QUEUED, &e).ok());
  EXPECT_EQ(nodes_[1]->PutIfState(q, pb::JOB_QUEUED, &e).code(), absl::StatusCode::kFailedPrecondition);
  auto events = nodes_[2]->LoadEvents("job-q", 0);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].seq(), 1);

  EXPECT_EQ(nodes_[1]->RequestCancel("job-r", "stop").code(), absl::StatusCode::kFailedPrecondition)
      << "not running yet";
  auto r = nodes_[0]->Claim("node0", "cpu", 0, 1000, nullptr);
  ASSERT_TRUE(r.ok() && r->has_value());
  ASSERT_TRUE(nodes_[1]->RequestCancel("job-r", "stop").ok());
  pb::FleetNode me;
  me.set_node_id("node0");
  me.set_address("10.0.0.1:50051");
  me.add_devices()->set_name("cpu0");
  std::vector<std::string> claimed;
  std::vector<std::pair<std::string, std::string>> cancel;
  ASSERT_TRUE(nodes_[0]->HeartbeatNode(me, {"job-r", "job-q"}, 5000, &claimed, &cancel).ok());
  EXPECT_THAT(claimed, ::testing::ElementsAre("job-r"));
  ASSERT_EQ(cancel.size(), 1u);
  EXPECT_EQ(cancel[0].second, "stop");
  EXPECT_TRUE(nodes_[2]->RequeueStale(4000, 2)->empty()) << "the heartbeat reached job-r";
  auto nodes = nodes_[2]->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].address(), "10.0.0.1:50051");
  EXPECT_EQ((*nodes)[0].heartbeat_unix_ms(), 5000);
  EXPECT_EQ((*nodes)[0].devices(0).name(), "cpu0");
  // A node restarted under its id gives up what it ran before.
  auto released = nodes_[0]->RequeueNode("node0", 2);
  ASSERT_TRUE(released.ok());
  ASSERT_EQ(released->size(), 1u);
  EXPECT_THAT((*released)[0].notes(), ::testing::Contains(HasSubstr("its node (node0) restarted while it ran")));
}

}  // namespace
}  // namespace bench
}  // namespace kernelserve
