// The PostgreSQL job store against a real, private PostgreSQL cluster:
// round trips, a database restart survived, and bad URLs refused.
#include "server/bench/pg_job_store.h"

#include <string>

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

  // Every connection drops; the next call reconnects and nothing is lost.
  ASSERT_TRUE((*cluster)->Restart().ok());
  ASSERT_TRUE(store.AppendEvent(Event("job-b", 4)).ok());
  check(4);
}

}  // namespace
}  // namespace bench
}  // namespace kernelserve
