// The whole benchmark flow over loopback gRPC: a real KernelServer on the CPU
// backend, the client library's BenchClient, the exports and the CI gate.
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/bench_client.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/numerics/test_inputs.h"
#include "server/server.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;

class BenchE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.backend = "cpu";
    o.cpu_threads = 2;
    o.bench.test_variants = true;
    o.bench.min_warmin_s = 0.02;
    o.bench.min_window_s = 0.05;
    o.bench.max_jobs_per_submitter = 3;
    auto s = KernelServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    opts_.target = "127.0.0.1:" + std::to_string(server_->port());
    opts_.default_timeout = absl::Seconds(30);
    auto c = BenchClient::Connect(opts_);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }

  static pb::BenchJobSpec Attention(std::vector<std::string> variants) {
    pb::BenchJobSpec s;
    s.set_name("attn");
    s.set_op(pb::OP_ATTENTION);
    auto* a = s.mutable_attention();
    a->set_batch(1);
    a->set_heads_q(2);
    a->set_seq_q(64);
    a->set_head_dim(64);
    a->set_causal(true);
    for (auto& v : variants) s.add_variants(v);
    s.mutable_method()->set_warmup(2);
    s.mutable_method()->set_iters(4);
    return s;
  }

  static pb::BenchJobSpec Sustained(double window_s, const std::string& submitter = "") {
    pb::BenchJobSpec s = Attention({"cpu"});
    s.set_name("sustained");
    s.set_submitter(submitter);
    s.mutable_method()->set_method(pb::METHOD_SUSTAINED);
    s.mutable_method()->set_window_s(window_s);
    return s;
  }

  // Waits for the first event of `phase`.
  // The watcher follows the job to its end, owning what it uses: it outlives
  // this call and is joined in TearDown, before the client and server go.
  void WaitPhase(const std::string& id, pb::BenchPhase phase) {
    auto seen = std::make_shared<absl::Notification>();
    BenchClient* client = client_.get();
    watchers_.emplace_back([client, id, phase, seen] {
      client->Watch(id, [&](const pb::BenchEvent& e) {
        if (e.phase() == phase && !seen->HasBeenNotified()) seen->Notify();
      }, absl::Seconds(60)).IgnoreError();
    });
    ASSERT_TRUE(seen->WaitForNotificationWithTimeout(absl::Seconds(30)));
  }

  void TearDown() override {
    for (auto& t : watchers_) t.join();
  }

  std::vector<std::thread> watchers_;

  std::unique_ptr<KernelServer> server_;
  ClientOptions opts_;
  std::unique_ptr<BenchClient> client_;
};

TEST_F(BenchE2eTest, SubmitWatchGetListExportAndGate) {
  auto job = client_->Submit(Attention({"cpu", "oracle", "test.wrong"}));
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<pb::BenchEvent> events;
  auto done = client_->Watch(job->id(), [&](const pb::BenchEvent& e) { events.push_back(e); });
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), pb::JOB_DONE);
  ASSERT_EQ(done->results_size(), 3);
  EXPECT_TRUE(done->results(0).correct());
  EXPECT_TRUE(done->results(1).correct());
  EXPECT_FALSE(done->results(2).correct());
  EXPECT_EQ(done->results(0).rank() + done->results(1).rank(), 3);
  // Watch delivered every event once, in order, from QUEUED to DONE.
  ASSERT_FALSE(events.empty());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].seq(), static_cast<int64_t>(i) + 1);
  EXPECT_EQ(events.front().phase(), pb::PHASE_QUEUED);
  EXPECT_EQ(events.back().phase(), pb::PHASE_DONE);
  int results = 0;
  for (const auto& e : events) results += e.phase() == pb::PHASE_RESULT;
  EXPECT_EQ(results, 3);
  // Watching a finished job replays it; after_seq skips what was seen.
  std::vector<pb::BenchEvent> replay;
  ASSERT_TRUE(client_->Watch(job->id(), [&](const pb::BenchEvent& e) { replay.push_back(e); }).ok());
  EXPECT_EQ(replay.size(), events.size());

  auto got = client_->Get(job->id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->results_size(), 3);
  EXPECT_EQ(client_->Get("job-nope").status().code(), absl::StatusCode::kNotFound);

  pb::ListBenchRequest lr;
  lr.add_states(pb::JOB_DONE);
  lr.set_submitter("anonymous");
  auto listed = client_->List(lr);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id(), job->id());
  lr.clear_states();
  lr.add_states(pb::JOB_QUEUED);
  EXPECT_TRUE(client_->List(lr)->empty());

  // Exports.
  const std::string json = ExportJson({*got});
  auto parsed = ParseExportJson(json, "export");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ((*parsed)[0].results(0).time().value_ms(), got->results(0).time().value_ms());
  const std::string md = ExportMarkdown({*got});
  EXPECT_THAT(md, HasSubstr("| attn | attention | B=1 Hq=2 Hkv=2 Sq=64 Skv=64 D=64 causal | cpu | pass |"));
  EXPECT_THAT(md, HasSubstr("| test.wrong | **FAIL** |"));
  const std::string junit = ExportJUnit({*got});
  EXPECT_THAT(junit, HasSubstr("<testsuites name=\"kernelserve\" tests=\"3\" failures=\"1\">"));
  EXPECT_THAT(junit, HasSubstr("name=\"test.wrong\""));
  EXPECT_THAT(junit, HasSubstr("<failure message=\"rel_rms 0."));

  // CI gate against a baseline: the same results pass; a baseline twice as
  // fast makes every timed variant a regression.
  std::vector<pb::BenchJob> cur = {*got};
  cur[0].mutable_results()->RemoveLast();  // drop test.wrong: correctness passes
  auto checks = CiChecks(cur, &cur, 10);
  for (const auto& c : checks) EXPECT_FALSE(c.failed) << c.name << ": " << c.message;
  EXPECT_EQ(checks.size(), 4u);  // 2 variants x (gate + vs baseline)
  std::vector<pb::BenchJob> fast = cur;
  for (auto& r : *fast[0].mutable_results()) r.mutable_time()->set_value_ms(r.time().value_ms() / 2);
  checks = CiChecks(cur, &fast, 10);
  int regressions = 0;
  for (const auto& c : checks) {
    if (c.failed) {
      ++regressions;
      EXPECT_THAT(c.name, HasSubstr("vs baseline"));
      EXPECT_THAT(c.message, HasSubstr("+100.0%"));
    }
  }
  EXPECT_EQ(regressions, 2);
}

TEST_F(BenchE2eTest, ErrorsKeepTheirCodes) {
  pb::BenchJobSpec graph = Attention({"cpu"});
  graph.mutable_method()->set_method(pb::METHOD_GRAPH);
  auto r = client_->Submit(graph);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("graph"));
  r = client_->Submit(Attention({"cuda"}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // Per-submitter limit (3 here): RESOURCE_EXHAUSTED naming it.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client_->Submit(Sustained(0.3, "dora")).ok());
  r = client_->Submit(Sustained(0.3, "dora"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("the limit is 3"));
  EXPECT_TRUE(client_->Submit(Sustained(0.05, "erik")).ok());
}

// A spec over --bench_max_job_mb (here: petabytes of inputs) is refused at
// Submit with RESOURCE_EXHAUSTED naming the flag, and the server keeps serving.
TEST_F(BenchE2eTest, HugeJobIsRefusedAtSubmitAndTheServerKeepsServing) {
  pb::BenchJobSpec huge = Attention({"cpu"});
  huge.mutable_attention()->set_batch(1 << 20);
  huge.mutable_attention()->set_heads_q(128);
  huge.mutable_attention()->set_seq_q(1 << 20);
  huge.mutable_attention()->set_head_dim(128);
  auto r = client_->Submit(huge);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("--bench_max_job_mb"));
  // Still serving: a normal job runs to the end.
  auto job = client_->Submit(Attention({"cpu"}));
  ASSERT_TRUE(job.ok()) << job.status();
  auto done = client_->Watch(job->id(), [](const pb::BenchEvent&) {});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), pb::JOB_DONE) << done->error();
}

TEST_F(BenchE2eTest, CancelOverGrpcStopsWithinASecond) {
  auto job = client_->Submit(Sustained(60));
  ASSERT_TRUE(job.ok());
  WaitPhase(job->id(), pb::PHASE_TIMING);
  const absl::Time t0 = absl::Now();
  auto c = client_->Cancel(job->id(), "enough");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state(), pb::JOB_CANCELLED);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  auto w = client_->Watch(job->id(), [](const pb::BenchEvent&) {});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->state(), pb::JOB_CANCELLED);
}

TEST_F(BenchE2eTest, KernelCallsWaitForTheTimingWindow) {
  auto job = client_->Submit(Sustained(1.0));
  ASSERT_TRUE(job.ok());
  WaitPhase(job->id(), pb::PHASE_TIMING);
  // A kernel call now queues behind the window on the device's worker.
  auto kc = Client::Connect(opts_);
  ASSERT_TRUE(kc.ok());
  AttentionArgs args;
  args.q = numerics::GaussianBf16({1, 2, 16, 64}, 1);
  args.k = numerics::GaussianBf16({1, 2, 16, 64}, 2);
  args.v = numerics::GaussianBf16({1, 2, 16, 64}, 3);
  const absl::Time t0 = absl::Now();
  auto r = (*kc)->Attention(args);
  ASSERT_TRUE(r.ok()) << r.status();
  const absl::Time t1 = absl::Now();
  auto final = client_->Get(job->id());
  ASSERT_TRUE(final.ok());
  // The window's result lands inside it: the call returned after the window ended.
  EXPECT_EQ(final->results_size(), 1);
  EXPECT_GT(r->info.queue_ms, 300) << "the call did not wait for the window";
  EXPECT_GT(t1 - t0, absl::Milliseconds(300));
}

TEST_F(BenchE2eTest, UploadedBuffersAsInputs) {
  auto kc = Client::Connect(opts_);
  ASSERT_TRUE(kc.ok());
  // A captured-activation stand-in: the long-tail generator.
  numerics::LongTailOptions lt;
  lt.heads_q = lt.heads_kv = 2;
  lt.seq_q = lt.seq_kv = 128;
  lt.d_qk = lt.d_v = 64;
  numerics::AttentionTensors t = numerics::LongTailAttention(lt);
  auto q = (*kc)->UploadBuffer(t.q);
  auto k = (*kc)->UploadBuffer(t.k);
  auto v = (*kc)->UploadBuffer(t.v);
  ASSERT_TRUE(q.ok() && k.ok() && v.ok());
  pb::BenchJobSpec s = Attention({"cpu"});
  s.mutable_attention()->set_seq_q(128);
  s.mutable_inputs()->set_kind(pb::INPUT_BUFFERS);
  (*s.mutable_inputs()->mutable_buffers())["q"] = q->id();
  (*s.mutable_inputs()->mutable_buffers())["k"] = k->id();
  (*s.mutable_inputs()->mutable_buffers())["v"] = v->id();
  auto job = client_->Submit(s);
  ASSERT_TRUE(job.ok()) << job.status();
  auto done = client_->Watch(job->id(), [](const pb::BenchEvent&) {});
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->state(), pb::JOB_DONE) << done->error();
  EXPECT_TRUE(done->results(0).correct()) << done->results(0).gate_message();

  // A buffer of the wrong shape, and a missing one, are refused at Submit
  // by name, and no job is left behind.
  const size_t jobs_before = client_->List(pb::ListBenchRequest())->size();
  (*s.mutable_inputs()->mutable_buffers())["k"] = q->id();
  s.mutable_attention()->set_seq_kv(64);
  job = client_->Submit(s);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("buffers[\"k\"]"));
  s.mutable_attention()->set_seq_kv(0);
  (*s.mutable_inputs()->mutable_buffers())["k"] = "buf-00000000000000000000000000000000";
  job = client_->Submit(s);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound) << job.status();
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("spec.inputs.buffers[\"k\"]"));
  EXPECT_EQ(client_->List(pb::ListBenchRequest())->size(), jobs_before);
}

// A benchmark server of its own on `data_dir`, with its client library.
struct JobServer {
  std::unique_ptr<KernelServer> server;
  std::unique_ptr<Client> client;
  std::unique_ptr<BenchClient> bench;
};

JobServer StartJobServer(const std::string& data_dir, bool reject_nonfinite = false) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.backend = "cpu";
  o.cpu_threads = 2;
  o.data_dir = data_dir;
  o.reject_nonfinite = reject_nonfinite;
  o.bench.test_variants = true;
  JobServer js;
  auto s = KernelServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return js;
  js.server = std::move(*s);
  ClientOptions co;
  co.target = "127.0.0.1:" + std::to_string(js.server->port());
  co.default_timeout = absl::Seconds(30);
  auto c = Client::Connect(co);
  auto b = BenchClient::Connect(co);
  EXPECT_TRUE(c.ok() && b.ok());
  if (c.ok()) js.client = std::move(*c);
  if (b.ok()) js.bench = std::move(*b);
  return js;
}

int64_t MemoryUsed(Client* client) {
  auto devices = client->Devices();
  EXPECT_TRUE(devices.ok()) << devices.status();
  return devices.ok() && devices->devices_size() > 0 ? devices->devices(0).memory_used_bytes() : -1;
}

// Job ids and states, as List reports them.
std::vector<std::string> JobList(BenchClient* bench) {
  auto jobs = bench->List(pb::ListBenchRequest());
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  std::vector<std::string> out;
  if (jobs.ok()) {
    for (const pb::BenchJob& j : *jobs) out.push_back(j.id() + " " + pb::BenchJobState_Name(j.state()));
  }
  return out;
}

// A submission applies whole or leaves nothing: a spec that is good but for
// one part, at every position of the spec (the op, its shape, each variant,
// each named input buffer, the method, the limits), is refused naming that
// part, and leaves no job behind: not in List, not in the job database (a
// restart on the same data dir finds only the good job), no memory held.
// --cpu_devices=2 over gRPC: two jobs without a device run at once, one on
// each simulated device, each with its own worker; a bad count is refused at
// start naming the flag.
TEST_F(BenchE2eTest, AnyDeviceJobsSpreadOverSimulatedCpuDevices) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.backend = "cpu";
  o.cpu_threads = 1;
  o.cpu_devices = 0;
  auto refused = KernelServer::Start(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--cpu_devices: expected 1..64"));

  o.cpu_devices = 2;
  o.bench.min_warmin_s = 0.02;
  o.bench.min_window_s = 0.05;
  auto s = KernelServer::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  ClientOptions co = opts_;
  co.target = "127.0.0.1:" + std::to_string((*s)->port());
  auto c = BenchClient::Connect(co);
  ASSERT_TRUE(c.ok()) << c.status();
  const pb::BenchJobSpec spec = Sustained(60);
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    auto j = (*c)->Submit(spec);
    ASSERT_TRUE(j.ok()) << j.status();
    ids.push_back(j->id());
  }
  std::set<int> devices;
  for (const std::string& id : ids) {
    pb::BenchJob j;
    for (int i = 0; i < 3000; ++i) {
      j = (*c)->Get(id).value();
      if (j.state() == pb::JOB_RUNNING) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(j.state(), pb::JOB_RUNNING) << "both devices are free";
    devices.insert(j.device());
  }
  EXPECT_EQ(devices, (std::set<int>{0, 1}));
  for (const std::string& id : ids) {
    auto j = (*c)->Cancel(id, "enough");
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(j->state(), pb::JOB_CANCELLED);
  }
}

TEST(BenchSubmitTest, SubmitIsAllOrNothingWithABadPartAtEveryPosition) {
  const std::string dir = ::testing::TempDir() + "/submit_all_or_nothing";
  JobServer js = StartJobServer(dir);
  ASSERT_NE(js.bench, nullptr);
  auto q = js.client->UploadBuffer(numerics::GaussianBf16({1, 2, 64, 64}, 1));
  auto k = js.client->UploadBuffer(numerics::GaussianBf16({1, 2, 64, 64}, 2));
  auto v = js.client->UploadBuffer(numerics::GaussianBf16({1, 2, 64, 64}, 3));
  auto odd = js.client->UploadBuffer(numerics::GaussianBf16({1, 2, 32, 64}, 4));
  ASSERT_TRUE(q.ok() && k.ok() && v.ok() && odd.ok());
  pb::BenchJobSpec good;
  good.set_name("all-or-nothing");
  good.set_op(pb::OP_ATTENTION);
  pb::AttentionShape* a = good.mutable_attention();
  a->set_batch(1);
  a->set_heads_q(2);
  a->set_seq_q(64);
  a->set_head_dim(64);
  good.add_variants("cpu");
  good.add_variants("oracle");
  good.add_variants("test.wrong");
  good.mutable_inputs()->set_kind(pb::INPUT_BUFFERS);
  (*good.mutable_inputs()->mutable_buffers())["q"] = q->id();
  (*good.mutable_inputs()->mutable_buffers())["k"] = k->id();
  (*good.mutable_inputs()->mutable_buffers())["v"] = v->id();
  good.mutable_method()->set_warmup(1);
  good.mutable_method()->set_iters(2);

  using Edit = std::function<void(pb::BenchJobSpec*)>;
  auto buffer = [](const std::string& name, const std::string& id) -> Edit {
    return [name, id](pb::BenchJobSpec* s) { (*s->mutable_inputs()->mutable_buffers())[name] = id; };
  };
  const std::string missing = "buf-00000000000000000000000000000000";
  struct Bad {
    std::string part;
    Edit edit;
    absl::StatusCode code;
    std::string substr;
  };
  const std::vector<Bad> bads = {
      {"op", [](pb::BenchJobSpec* s) { s->set_op(static_cast<pb::BenchOp>(42)); }, absl::StatusCode::kInvalidArgument,
       "spec.op"},
      {"name", [](pb::BenchJobSpec* s) { s->set_name(std::string(1000, 'n')); }, absl::StatusCode::kInvalidArgument,
       "spec.name: expected at most 256 bytes, got 1000"},
      {"shape", [](pb::BenchJobSpec* s) { s->mutable_attention()->set_batch(0); }, absl::StatusCode::kInvalidArgument,
       "spec.attention.batch: expected > 0, got 0"},
      {"shape enum", [](pb::BenchJobSpec* s) { s->mutable_attention()->set_layout(static_cast<pb::Layout>(77)); },
       absl::StatusCode::kInvalidArgument, "spec.attention.layout: expected one of"},
      {"variant 0", [](pb::BenchJobSpec* s) { s->set_variants(0, "no-such"); }, absl::StatusCode::kInvalidArgument,
       "spec.variants"},
      {"variant 1", [](pb::BenchJobSpec* s) { s->set_variants(1, "no-such"); }, absl::StatusCode::kInvalidArgument,
       "spec.variants"},
      {"variant 2", [](pb::BenchJobSpec* s) { s->set_variants(2, "cpu"); }, absl::StatusCode::kInvalidArgument,
       "spec.variants: \"cpu\" is listed twice"},
      {"variant 2 too long", [](pb::BenchJobSpec* s) { s->set_variants(2, std::string(300, 'x')); },
       absl::StatusCode::kInvalidArgument, "spec.variants[2]: expected at most 256 bytes"},
      {"input kind", [](pb::BenchJobSpec* s) { s->mutable_inputs()->set_kind(static_cast<pb::BenchInputKind>(9)); },
       absl::StatusCode::kInvalidArgument, "spec.inputs.kind"},
      {"buffer q", buffer("q", missing), absl::StatusCode::kNotFound, "spec.inputs.buffers[\"q\"]: buffer_id: no buffer"},
      {"buffer k", buffer("k", missing), absl::StatusCode::kNotFound, "spec.inputs.buffers[\"k\"]: buffer_id: no buffer"},
      {"buffer v", buffer("v", missing), absl::StatusCode::kNotFound, "spec.inputs.buffers[\"v\"]: buffer_id: no buffer"},
      {"buffer v shape", buffer("v", odd->id()), absl::StatusCode::kInvalidArgument,
       "spec.inputs.buffers[\"v\"]: buffer \"" + odd->id() + "\" is bf16[1,2,32,64]"},
      {"an input the op lacks", buffer("x", q->id()), absl::StatusCode::kInvalidArgument,
       "spec.inputs.buffers: no input \"x\""},
      {"method", [](pb::BenchJobSpec* s) { s->mutable_method()->set_iters(-1); }, absl::StatusCode::kInvalidArgument,
       "spec.method"},
      {"method enum", [](pb::BenchJobSpec* s) { s->mutable_method()->set_method(static_cast<pb::BenchMethod>(9)); },
       absl::StatusCode::kInvalidArgument, "spec.method.method"},
      {"time limit", [](pb::BenchJobSpec* s) { s->set_time_limit_s(std::nan("")); },
       absl::StatusCode::kInvalidArgument, "spec.time_limit_s"},
      {"tolerance", [](pb::BenchJobSpec* s) { s->set_tolerance(-1); }, absl::StatusCode::kInvalidArgument,
       "spec.tolerance"},
      {"device", [](pb::BenchJobSpec* s) { s->set_device(3); }, absl::StatusCode::kInvalidArgument, "spec.device"},
  };
  const std::vector<std::string> before = JobList(js.bench.get());
  EXPECT_TRUE(before.empty());
  const int64_t used = MemoryUsed(js.client.get());
  for (const Bad& bad : bads) {
    SCOPED_TRACE(bad.part);
    pb::BenchJobSpec spec = good;
    bad.edit(&spec);
    auto job = js.bench->Submit(spec);
    EXPECT_EQ(job.status().code(), bad.code) << job.status();
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(bad.substr));
    EXPECT_EQ(JobList(js.bench.get()), before) << "a refused submission left a job";
    EXPECT_EQ(MemoryUsed(js.client.get()), used);
  }
  // The good spec applies whole: one job, with every variant.
  auto job = js.bench->Submit(good);
  ASSERT_TRUE(job.ok()) << job.status();
  auto done = js.bench->Watch(job->id(), [](const pb::BenchEvent&) {});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), pb::JOB_DONE) << done->error();
  EXPECT_EQ(done->results_size(), 3);
  const std::vector<std::string> after = JobList(js.bench.get());
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(MemoryUsed(js.client.get()), used);

  // Nothing of the refused submissions reached the job database either.
  js = JobServer();
  JobServer restarted = StartJobServer(dir);
  ASSERT_NE(restarted.bench, nullptr);
  EXPECT_EQ(JobList(restarted.bench.get()), after);
}

// --reject_nonfinite: a job whose named buffer holds NaN or Inf is refused
// at Submit naming the input and the element, and leaves no job.
TEST(BenchSubmitTest, RejectNonfiniteRefusesJobsOnNonfiniteBuffers) {
  JobServer js = StartJobServer("", /*reject_nonfinite=*/true);
  ASSERT_NE(js.bench, nullptr);
  HostTensor bad = numerics::GaussianBf16({1, 2, 64, 64}, 2);
  const uint16_t nan = 0x7FC0;
  std::memcpy(bad.bytes() + 2 * 200, &nan, 2);           // [0,0,3,8]
  std::memcpy(bad.bytes() + 2 * (bad.num_bytes() / 2 - 1), &nan, 2);  // and the last: the first is named
  auto q = js.client->UploadBuffer(numerics::GaussianBf16({1, 2, 64, 64}, 1));
  auto k = js.client->UploadBuffer(bad);
  auto finite_k = js.client->UploadBuffer(numerics::GaussianBf16({1, 2, 64, 64}, 3));
  ASSERT_TRUE(q.ok() && k.ok() && finite_k.ok());
  pb::BenchJobSpec spec;
  spec.set_op(pb::OP_ATTENTION);
  spec.mutable_attention()->set_batch(1);
  spec.mutable_attention()->set_heads_q(2);
  spec.mutable_attention()->set_seq_q(64);
  spec.mutable_attention()->set_head_dim(64);
  spec.add_variants("cpu");
  spec.mutable_inputs()->set_kind(pb::INPUT_BUFFERS);
  (*spec.mutable_inputs()->mutable_buffers())["q"] = q->id();
  (*spec.mutable_inputs()->mutable_buffers())["k"] = k->id();
  spec.mutable_method()->set_warmup(1);
  spec.mutable_method()->set_iters(1);
  auto job = js.bench->Submit(spec);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("spec.inputs.buffers[\"k\"][0,0,3,8]: NaN (element 200 of bf16[1,2,64,64]); "
                        "--reject_nonfinite refuses non-finite inputs"));
  EXPECT_TRUE(JobList(js.bench.get()).empty());
  (*spec.mutable_inputs()->mutable_buffers())["k"] = finite_k->id();
  job = js.bench->Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(js.bench->Watch(job->id(), [](const pb::BenchEvent&) {})->state(), pb::JOB_DONE);
}

// One server per data dir: a second one fails to start naming the lock (and
// a second one on the same port fails too: no SO_REUSEPORT sharing).
TEST(BenchDataDirTest, SecondServerOnTheSameDataDirFailsNamingTheLock) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.backend = "cpu";
  o.cpu_threads = 2;
  o.data_dir = ::testing::TempDir() + "/one_server_per_dir";
  auto first = KernelServer::Start(o);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = KernelServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(o.data_dir + "/bench.lock is locked"));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("--data_dir=" + o.data_dir));

  ServerOptions same_port = o;
  same_port.data_dir = o.data_dir + "_other";
  same_port.listen = "127.0.0.1:" + std::to_string((*first)->port());
  auto third = KernelServer::Start(same_port);
  ASSERT_FALSE(third.ok());
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("could not listen"));

  // The first server still serves.
  ClientOptions co;
  co.target = "127.0.0.1:" + std::to_string((*first)->port());
  auto c = BenchClient::Connect(co);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->ListVariants(pb::BENCH_OP_UNSPECIFIED).ok());
}

// A GPU server without --bench_gemm_tflops has no GEMM ceiling: the export
// says "not measured" (it printed "GEMM 0 TFLOP/s"), and a fraction over
// 100 % is marked and explained by the job's note.
TEST(ExportTest, UnmeasuredCeilingsAndFractionsOverTheCeiling) {
  EXPECT_EQ(CeilingText(0, "TFLOP/s"), "not measured");
  EXPECT_EQ(CeilingText(776, "TFLOP/s"), "776 TFLOP/s");
  pb::BenchJob j;
  j.set_id("job-1");
  j.set_state(pb::JOB_DONE);
  j.mutable_spec()->set_name("attn");
  j.mutable_spec()->set_op(pb::OP_ATTENTION);
  j.mutable_ceilings()->set_copy_tbps(4.19);
  j.mutable_ceilings()->set_gemm_desc("not measured");
  pb::VariantResult* r = j.add_results();
  r->set_variant("cuda");
  r->set_correct(true);
  r->set_timed(true);
  r->mutable_time()->set_value_ms(1);
  r->set_tflops(600);
  r->set_tbps(5);
  r->set_frac_copy_ceiling(5 / 4.19);
  r->set_ceiling_note("over the copy ceiling: the ceiling measurement was below the achieved rate");
  j.add_notes("cuda: " + r->ceiling_note());
  const std::string md = ExportMarkdown({j});
  EXPECT_THAT(md, HasSubstr("ceilings: GEMM not measured, copy 4.19 TB/s"));
  EXPECT_THAT(md, ::testing::Not(HasSubstr("GEMM 0 TFLOP/s")));
  EXPECT_THAT(md, HasSubstr("| 119.3 (!) |"));
  EXPECT_THAT(md, HasSubstr("cuda: over the copy ceiling"));
}

TEST(SuiteTest, ParsesJsonAndTextProto) {
  auto s = ParseSuite(R"({"name": "cpu", "jobs": [{"op": "OP_MOE_DOWN", "moe": {"tokens": 4},
                          "variants": ["cpu"]}, {"name": "x", "op": "OP_ATTENTION"}]})",
                      "inline");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->jobs(0).name(), "cpu/0");
  EXPECT_EQ(s->jobs(0).moe().tokens(), 4);
  EXPECT_EQ(s->jobs(1).name(), "x");
  auto t = ParseSuite("name: 't' jobs { op: OP_MLA_DECODE mla { batch: 2 } }", "text");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->jobs(0).mla().batch(), 2);
  EXPECT_EQ(ParseSuite("{\"jobs\": 3}", "bad").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSuite("{\"name\": \"empty\"}", "empty").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve
