// The scheduler on the real CPU backend and the real fp64 oracle, without
// gRPC: the method, the gate, limits, priorities, cancellation and recovery.
#include "server/bench/scheduler.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/bench/timing.h"
#include "server/security/limits.h"

namespace kernelserve {
namespace bench {
namespace {

using ::testing::AnyOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Runs device tasks inline, one at a time, like a device worker.
DeviceRunner InlineRunner() {
  auto mu = std::make_shared<absl::Mutex>();
  return [mu](int, std::function<absl::Status()> fn) {
    absl::MutexLock l(mu.get());
    return fn();
  };
}

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = absl::StrCat(base ? base : "/tmp", "/benchXXXXXX");
  char* d = mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string();
}

pb::BenchJobSpec AttentionSpec(std::vector<std::string> variants) {
  pb::BenchJobSpec s;
  s.set_name("attn-small");
  s.set_op(pb::OP_ATTENTION);
  auto* a = s.mutable_attention();
  a->set_batch(1);
  a->set_heads_q(2);
  a->set_seq_q(48);
  a->set_head_dim(64);
  a->set_causal(true);
  for (auto& v : variants) s.add_variants(v);
  s.mutable_inputs()->set_seed(7);
  s.mutable_method()->set_warmup(2);
  s.mutable_method()->set_iters(5);
  return s;
}

// A job that holds its device for `window_s` (sustained, tiny shape).
pb::BenchJobSpec LongSpec(double window_s, const std::string& submitter = "alice") {
  pb::BenchJobSpec s = AttentionSpec({"cpu"});
  s.set_name("long");
  s.set_submitter(submitter);
  s.mutable_method()->set_method(pb::METHOD_SUSTAINED);
  s.mutable_method()->set_window_s(window_s);
  return s;
}

// Until the job's timing window opens (true), or ~100 s.
bool WaitForTiming(BenchScheduler& s, const std::string& id) {
  int64_t seq = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<pb::BenchEvent> ev;
    bool fin;
    if (!s.WaitEvents(id, seq, absl::Milliseconds(50), &ev, &fin).ok()) return false;
    for (const auto& e : ev) {
      seq = e.seq();
      if (e.phase() == pb::PHASE_TIMING) return true;
    }
  }
  return false;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override { backend_ = CreateCpuBackend(2); }

  std::unique_ptr<BenchScheduler> Make(BenchOptions o = {}) {
    o.test_variants = true;
    o.min_warmin_s = 0.02;
    o.min_window_s = 0.05;
    o.server_version = "test";
    auto s = BenchScheduler::Create(backend_.get(), o, InlineRunner(), nullptr);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  static pb::BenchJob WaitState(BenchScheduler& s, const std::string& id,
                                std::function<bool(const pb::BenchJob&)> pred, double timeout_s = 60) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    pb::BenchJob j;
    while (std::chrono::steady_clock::now() < until) {
      j = s.Get(id).value();
      if (pred(j)) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "timed out waiting on job " << id << " in state " << pb::BenchJobState_Name(j.state());
    return j;
  }

  static pb::BenchJob WaitFinal(BenchScheduler& s, const std::string& id, double timeout_s = 60) {
    return WaitState(s, id, [](const pb::BenchJob& j) {
      return j.state() != pb::JOB_QUEUED && j.state() != pb::JOB_RUNNING;
    }, timeout_s);
  }

  static const pb::VariantResult* Result(const pb::BenchJob& j, const std::string& v) {
    for (const auto& r : j.results()) {
      if (r.variant() == v) return &r;
    }
    return nullptr;
  }

  std::unique_ptr<Backend> backend_;
};

TEST_F(SchedulerTest, GateCatchesWrongAndNanVariantsAndRanksTheRest) {
  auto s = Make();
  auto job = s->Submit(AttentionSpec({"cpu", "oracle", "test.wrong", "test.nan"}));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), pb::JOB_QUEUED);
  EXPECT_EQ(job->spec().submitter(), "anonymous");
  pb::BenchJob j = WaitFinal(*s, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  ASSERT_EQ(j.results_size(), 4);
  EXPECT_EQ(j.results(0).variant(), "cpu");  // spec order

  const pb::VariantResult* cpu = Result(j, "cpu");
  EXPECT_TRUE(cpu->correct()) << cpu->gate_message();
  EXPECT_TRUE(cpu->timed());
  EXPECT_LT(cpu->error().rel_rms(), 0.01);
  EXPECT_GT(cpu->error().rel_rms(), 0.0);  // bf16 output: never bit-equal to fp64
  EXPECT_EQ(cpu->time().count(), 5);
  EXPECT_GT(cpu->time().value_ms(), 0);
  EXPECT_LE(cpu->time().min_ms(), cpu->time().median_ms());
  EXPECT_LE(cpu->time().median_ms(), cpu->time().max_ms());
  EXPECT_GT(cpu->tflops(), 0);
  EXPECT_GT(cpu->tbps(), 0);
  EXPECT_GT(cpu->frac_gemm_ceiling(), 0);
  EXPECT_GT(cpu->frac_copy_ceiling(), 0);
  // Causal: 48*49/2 pairs per head, 4*D FLOPs per pair.
  EXPECT_DOUBLE_EQ(cpu->flops(), 4.0 * 64 * (48 * 49 / 2) * 2);

  const pb::VariantResult* oracle = Result(j, "oracle");
  EXPECT_TRUE(oracle->correct()) << oracle->gate_message();
  EXPECT_LT(oracle->error().rel_rms(), 0.005);
  EXPECT_TRUE(oracle->timed());
  EXPECT_EQ(oracle->time().count(), 3);  // host variants: max_host_launches

  const pb::VariantResult* wrong = Result(j, "test.wrong");
  EXPECT_FALSE(wrong->correct());
  EXPECT_FALSE(wrong->timed());
  EXPECT_EQ(wrong->rank(), 0);
  EXPECT_NEAR(wrong->error().rel_rms(), 0.5, 0.02);
  EXPECT_THAT(wrong->gate_message(), HasSubstr("exceeds the tolerance"));

  const pb::VariantResult* nan = Result(j, "test.nan");
  EXPECT_FALSE(nan->correct());
  EXPECT_EQ(nan->error().nonfinite(), 1);
  EXPECT_THAT(nan->gate_message(), HasSubstr("NaN"));

  // Ranks 1 and 2 go to the timed variants (which is faster depends on a
  // busy 2-core machine); speedups are against the first variant listed.
  EXPECT_EQ(cpu->rank() + oracle->rank(), 3);
  EXPECT_EQ(cpu->rank() * oracle->rank(), 2);
  EXPECT_DOUBLE_EQ(cpu->speedup_vs_first(), 1.0);
  EXPECT_NEAR(oracle->speedup_vs_first(), cpu->time().value_ms() / oracle->time().value_ms(), 1e-9);
  EXPECT_EQ(j.server_version(), "test");
  EXPECT_EQ(j.backend(), "cpu");
  EXPECT_GT(j.ceilings().gemm_tflops(), 0);
  EXPECT_GT(j.ceilings().copy_tbps(), 0);
  EXPECT_EQ(j.attempts(), 1);

  // The event stream tells the whole story, in order.
  std::vector<pb::BenchEvent> ev;
  bool finished = false;
  ASSERT_TRUE(s->WaitEvents(j.id(), 0, absl::Seconds(1), &ev, &finished).ok());
  EXPECT_TRUE(finished);
  std::vector<pb::BenchPhase> phases;
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].seq(), static_cast<int64_t>(i) + 1);
    phases.push_back(ev[i].phase());
  }
  ASSERT_FALSE(phases.empty());
  EXPECT_EQ(phases.front(), pb::PHASE_QUEUED);
  EXPECT_EQ(phases.back(), pb::PHASE_DONE);
  EXPECT_EQ(ev.back().job().results_size(), 4);
  auto count = [&](pb::BenchPhase p) { return std::count(phases.begin(), phases.end(), p); };
  EXPECT_EQ(count(pb::PHASE_STARTED), 1);
  EXPECT_GE(count(pb::PHASE_CHECKING), 4);
  EXPECT_EQ(count(pb::PHASE_WARMING), 2);
  EXPECT_EQ(count(pb::PHASE_RESULT), 4);
}

TEST_F(SchedulerTest, EveryOpRunsWithPassesMethod) {
  auto s = Make();
  std::vector<pb::BenchJobSpec> specs;
  {
    pb::BenchJobSpec f;
    f.set_op(pb::OP_FP8_ATTENTION);
    auto* a = f.mutable_attention();
    a->set_batch(1);
    a->set_heads_q(2);
    a->set_seq_q(96);
    a->set_head_dim(128);
    a->set_causal(true);
    f.add_variants("cpu.exact");
    f.add_variants("cpu.lean");
    f.add_variants("cpu.naive");
    f.mutable_inputs()->set_kind(pb::INPUT_LONG_TAIL);
    specs.push_back(f);
  }
  {
    pb::BenchJobSpec m;
    m.set_op(pb::OP_MLA_DECODE);
    m.mutable_mla()->set_batch(2);
    m.mutable_mla()->set_q_len(2);
    m.mutable_mla()->set_heads(4);
    m.mutable_mla()->set_seq_len(40);
    specs.push_back(m);
    for (int64_t page : {1, 16}) {  // paged pools, pages shuffled; 40 rows = 2.5 pages of 16
      m.mutable_mla()->set_page_size(page);
      specs.push_back(m);
    }
  }
  for (pb::BenchOp op : {pb::OP_MOE_GATEUP, pb::OP_MOE_DOWN, pb::OP_MOE_LAYER}) {
    pb::BenchJobSpec m;
    m.set_op(op);
    auto* e = m.mutable_moe();
    e->set_tokens(5);
    e->set_experts(6);
    e->set_top_k(2);
    e->set_hidden(64);
    e->set_inter(32);
    e->set_swiglu(op == pb::OP_MOE_GATEUP);
    e->set_weighted_sum(op == pb::OP_MOE_DOWN);
    specs.push_back(m);
  }
  for (pb::BenchJobSpec& spec : specs) {
    spec.mutable_method()->set_method(pb::METHOD_PASSES);
    spec.mutable_method()->set_passes(3);
    spec.mutable_method()->set_warmup(1);
    spec.mutable_method()->set_iters(2);
    auto job = s->Submit(spec);
    ASSERT_TRUE(job.ok()) << job.status();
    pb::BenchJob j = WaitFinal(*s, job->id());
    SCOPED_TRACE(pb::BenchOp_Name(spec.op()));
    ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
    ASSERT_EQ(j.results_size(), spec.variants_size() ? spec.variants_size() : 1);
    if (spec.mla().page_size() > 0) {
      EXPECT_THAT(j.shape_desc(),
                  HasSubstr(absl::StrCat("paged page_size=", spec.mla().page_size())));
    }
    for (const auto& r : j.results()) {
      SCOPED_TRACE(r.variant());
      EXPECT_TRUE(r.correct()) << r.gate_message() << " " << r.error_message();
      EXPECT_TRUE(r.timed());
      EXPECT_EQ(r.pass_ms_size(), 3);
      EXPECT_EQ(r.time().count(), 6);
      EXPECT_GT(r.flops(), 0);
      EXPECT_GT(r.bytes(), 0);
      EXPECT_DOUBLE_EQ(r.time().value_ms(), Median({r.pass_ms().begin(), r.pass_ms().end()}));
    }
  }
}

TEST_F(SchedulerTest, LargeProblemsAreGatedOnAnExactSample) {
  BenchOptions o;
  o.max_gate_flops = 5e4;  // force sampling on tiny shapes
  auto s = Make(o);
  std::vector<pb::BenchJobSpec> specs;
  {
    pb::BenchJobSpec a = AttentionSpec({"cpu", "test.wrong", "test.nan"});
    a.mutable_attention()->set_heads_q(6);
    a.mutable_attention()->set_heads_kv(2);  // GQA
    a.mutable_attention()->set_batch(2);
    a.mutable_attention()->set_seq_q(80);
    a.mutable_attention()->set_seq_kv(112);  // cross, bottom-right causal
    a.mutable_attention()->set_layout(pb::BSHD);
    specs.push_back(a);
  }
  {
    pb::BenchJobSpec f;
    f.set_op(pb::OP_FP8_ATTENTION);
    auto* a = f.mutable_attention();
    a->set_batch(2);
    a->set_heads_q(4);
    a->set_heads_kv(2);
    a->set_seq_q(96);
    a->set_head_dim(128);
    a->set_causal(true);
    a->set_descale_mode(pb::PER_HEAD);
    a->set_hadamard(true);
    f.add_variants("cpu.lean");
    f.add_variants("test.wrong");
    specs.push_back(f);
  }
  {
    pb::BenchJobSpec m;
    m.set_op(pb::OP_MLA_DECODE);
    m.mutable_mla()->set_batch(3);
    m.mutable_mla()->set_q_len(3);
    m.mutable_mla()->set_heads(6);
    m.mutable_mla()->set_seq_len(50);
    m.add_variants("cpu");
    m.add_variants("test.wrong");
    specs.push_back(m);
    m.mutable_mla()->set_page_size(8);  // the sample reads the first requests' page table
    specs.push_back(m);
  }
  for (pb::BenchOp op : {pb::OP_MOE_DOWN, pb::OP_MOE_LAYER}) {
    pb::BenchJobSpec m;
    m.set_op(op);
    auto* e = m.mutable_moe();
    e->set_tokens(9);
    e->set_experts(6);
    e->set_top_k(2);
    e->set_hidden(64);
    e->set_inter(32);
    e->set_weighted_sum(true);
    m.add_variants("cpu");
    m.add_variants("test.wrong");
    specs.push_back(m);
  }
  for (pb::BenchJobSpec& spec : specs) {
    spec.mutable_method()->set_warmup(1);
    spec.mutable_method()->set_iters(1);
    auto job = s->Submit(spec);
    ASSERT_TRUE(job.ok()) << job.status();
    pb::BenchJob j = WaitFinal(*s, job->id());
    SCOPED_TRACE(pb::BenchOp_Name(spec.op()));
    ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
    // One note on the sample; tiny in-cache shapes may also beat the copy
    // ceiling (measured over 64 MiB), which adds a ceiling note.
    std::vector<std::string> notes;
    for (const std::string& n : j.notes()) {
      if (n.find("ceiling measurement was below the achieved rate") == std::string::npos) notes.push_back(n);
    }
    ASSERT_EQ(notes.size(), 1u) << absl::StrJoin(j.notes(), "\n");
    EXPECT_THAT(notes[0], HasSubstr("correctness gate on"));
    // The real kernel agrees with the sampled reference (a wrong sample
    // would not); the wrong variants are still caught.
    EXPECT_TRUE(j.results(0).correct()) << j.results(0).gate_message();
    EXPECT_THAT(j.results(0).gate_message(), HasSubstr("on a sample"));
    EXPECT_LT(j.results(0).error().rel_rms(), spec.op() == pb::OP_FP8_ATTENTION ? 0.1 : 0.01);
    for (int i = 1; i < j.results_size(); ++i) EXPECT_FALSE(j.results(i).correct()) << j.results(i).variant();
  }
}

TEST_F(SchedulerTest, RejectsBadSpecsWithClearMessages) {
  auto s = Make();
  pb::BenchJobSpec graph = AttentionSpec({"cpu"});
  graph.mutable_method()->set_method(pb::METHOD_GRAPH);
  auto r = s->Submit(graph);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("method graph"));

  r = s->Submit(AttentionSpec({"cuda"}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no variant \"cuda\""));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("oracle"));

  BenchOptions small_gate;
  small_gate.max_gate_flops = 1e3;
  auto s2 = Make(small_gate);
  r = s2->Submit(AttentionSpec({"cpu", "oracle"}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("runs the fp64 oracle on the host"));
  EXPECT_TRUE(s2->Submit(AttentionSpec({"cpu"})).ok());

  pb::BenchJobSpec bad = AttentionSpec({"cpu"});
  bad.mutable_attention()->set_heads_kv(3);  // Hq=2 not a multiple
  r = s->Submit(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);

  pb::BenchJobSpec no_shape;
  no_shape.set_op(pb::OP_MOE_DOWN);
  r = s->Submit(no_shape);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("spec.moe"));

  pb::BenchJobSpec mla;
  mla.set_op(pb::OP_MLA_DECODE);
  mla.mutable_mla()->set_batch(2);
  mla.mutable_mla()->set_heads(4);
  mla.mutable_mla()->set_seq_len(40);
  mla.mutable_mla()->set_page_size(-1);
  r = s->Submit(mla);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("spec.mla.page_size: expected 0 (contiguous)"));
  mla.mutable_mla()->set_page_size(1);
  mla.mutable_mla()->set_batch(int64_t{1} << 20);
  mla.mutable_mla()->set_seq_len(int64_t{1} << 20);  // 2^40 slots: not int32
  r = s->Submit(mla);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("int32 slots"));
}

// The cpu backend's GEMM ceiling is a real ceiling: its attention kernel stays
// under it at a moderate shape, or the result says the ceiling measurement
// was low (a loaded CI machine can depress the one-off measurement), never an
// unexplained 177 % as with the old unblocked GEMM.
TEST_F(SchedulerTest, CpuAttentionStaysUnderTheMeasuredGemmCeiling) {
  auto s = Make();
  pb::BenchJobSpec spec = AttentionSpec({"cpu"});
  spec.mutable_attention()->set_heads_q(4);
  spec.mutable_attention()->set_seq_q(512);
  spec.mutable_attention()->set_head_dim(128);
  spec.mutable_attention()->set_causal(false);
  spec.mutable_method()->set_warmup(3);
  spec.mutable_method()->set_iters(10);
  auto job = s->Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  pb::BenchJob j = WaitFinal(*s, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  EXPECT_GT(j.ceilings().gemm_tflops(), 0);
  EXPECT_THAT(j.ceilings().gemm_desc(), HasSubstr("fp32 GEMM 1152^3"));
  const pb::VariantResult& r = j.results(0);
  ASSERT_TRUE(r.timed());
  ASSERT_GT(r.frac_gemm_ceiling(), 0);
  EXPECT_TRUE(r.frac_gemm_ceiling() <= 1.0 || !r.ceiling_note().empty())
      << r.tflops() * 1e3 << " GFLOP/s vs ceiling " << j.ceilings().gemm_tflops() * 1e3 << " GFLOP/s";
  EXPECT_EQ(r.frac_gemm_ceiling() > 1.0 || r.frac_copy_ceiling() > 1.0, !r.ceiling_note().empty()) << r.ceiling_note();
  std::cout << "cpu attention " << r.tflops() * 1e3 << " GFLOP/s = " << 100 * r.frac_gemm_ceiling()
            << " % of the GEMM ceiling " << j.ceilings().gemm_tflops() * 1e3 << " GFLOP/s ("
            << j.ceilings().gemm_desc() << ")\n";
}

// A ceiling below the achieved rate is reported as measured, not clamped, and
// the result and the job say that the ceiling measurement was the problem.
TEST_F(SchedulerTest, FractionOverTheCeilingCarriesANote) {
  BenchOptions o;
  o.gemm_tflops = 1e-6;  // "measured elsewhere": 1 MFLOP/s, far below any kernel
  auto s = Make(o);
  auto job = s->Submit(AttentionSpec({"cpu"}));
  ASSERT_TRUE(job.ok()) << job.status();
  pb::BenchJob j = WaitFinal(*s, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  EXPECT_THAT(j.ceilings().gemm_desc(), HasSubstr("--bench_gemm_tflops"));
  const pb::VariantResult& r = j.results(0);
  EXPECT_GT(r.frac_gemm_ceiling(), 10.0) << "reported as measured, not clamped";
  EXPECT_NEAR(r.frac_gemm_ceiling(), r.tflops() / 1e-6, 1e-6 * r.frac_gemm_ceiling());
  EXPECT_THAT(r.ceiling_note(), HasSubstr("the ceiling measurement was below the achieved rate"));
  EXPECT_THAT(r.ceiling_note(), HasSubstr("GEMM ceiling"));
  EXPECT_THAT(absl::StrJoin(j.notes(), ";"), HasSubstr("cpu: "));
  EXPECT_THAT(absl::StrJoin(j.notes(), ";"), HasSubstr("ceiling measurement was below"));
}

TEST_F(SchedulerTest, PerSubmitterLimitPrioritiesAndQueuePositions) {
  BenchOptions o;
  o.max_jobs_per_submitter = 3;
  auto s = Make(o);
  auto blocker = s->Submit(LongSpec(1.0, "carol"));
  ASSERT_TRUE(blocker.ok());
  WaitState(*s, blocker->id(), [](const pb::BenchJob& j) { return j.state() == pb::JOB_RUNNING; });

  pb::BenchJobSpec low = AttentionSpec({"cpu"});
  low.set_submitter("alice");
  low.set_priority(0);
  pb::BenchJobSpec high = low;
  high.set_priority(5);
  auto a = s->Submit(low);
  auto b = s->Submit(low);
  auto c = s->Submit(high);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto d = s->Submit(low);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("the limit is 3"));
  // Another submitter is not affected.
  pb::BenchJobSpec bob = low;
  bob.set_submitter("bob");
  auto e = s->Submit(bob);
  ASSERT_TRUE(e.ok());

  EXPECT_EQ(s->Get(c->id())->queue_position(), 1);  // high priority jumps ahead
  EXPECT_EQ(s->Get(a->id())->queue_position(), 2);
  EXPECT_EQ(s->Get(b->id())->queue_position(), 3);
  EXPECT_EQ(s->Get(e->id())->queue_position(), 4);

  pb::BenchJob jc = WaitFinal(*s, c->id());
  pb::BenchJob ja = WaitFinal(*s, a->id());
  pb::BenchJob jb = WaitFinal(*s, b->id());
  pb::BenchJob je = WaitFinal(*s, e->id());
  EXPECT_EQ(jc.state(), pb::JOB_DONE);
  EXPECT_LE(WaitFinal(*s, blocker->id()).finished_unix_ms(), jc.started_unix_ms());
  EXPECT_LE(jc.finished_unix_ms(), ja.started_unix_ms());
  EXPECT_LE(ja.finished_unix_ms(), jb.started_unix_ms());
  EXPECT_LE(jb.finished_unix_ms(), je.started_unix_ms());

  // Positions were reported as they changed.
  std::vector<pb::BenchEvent> ev;
  bool fin;
  ASSERT_TRUE(s->WaitEvents(b->id(), 0, absl::Seconds(1), &ev, &fin).ok());
  std::vector<int> positions;
  for (const auto& x : ev) {
    if (x.phase() == pb::PHASE_QUEUED) positions.push_back(x.queue_position());
  }
  EXPECT_EQ(positions, (std::vector<int>{2, 3, 2, 1}));

  // Once finished, the submitter may submit again.
  EXPECT_TRUE(s->Submit(low).ok());
  pb::ListBenchRequest lr;
  lr.set_submitter("alice");
  EXPECT_EQ(s->List(lr).size(), 4u);
  lr.clear_submitter();
  lr.add_states(pb::JOB_DONE);
  for (const auto& j : s->List(lr)) EXPECT_EQ(j.state(), pb::JOB_DONE);
}

TEST_F(SchedulerTest, CancelStopsARunningJobWithinASecond) {
  auto s = Make();
  auto job = s->Submit(LongSpec(60.0));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(WaitForTiming(*s, job->id()));
  const auto t0 = std::chrono::steady_clock::now();
  auto c = s->Cancel(job->id(), "test says stop");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state(), pb::JOB_CANCELLED);
  EXPECT_LT(took, 1.0);
  EXPECT_THAT(c->error(), HasSubstr("test says stop"));
  // Cancelling again is a no-op; a finished job cannot be cancelled.
  EXPECT_TRUE(s->Cancel(job->id(), "").ok());
  auto done = s->Submit(AttentionSpec({"cpu"}));
  WaitFinal(*s, done->id());
  EXPECT_EQ(s->Cancel(done->id(), "").status().code(), absl::StatusCode::kFailedPrecondition);
  // A queued job is cancelled at once.
  auto blocker = s->Submit(LongSpec(0.5));
  auto queued = s->Submit(AttentionSpec({"cpu"}));
  auto qc = s->Cancel(queued->id(), "");
  ASSERT_TRUE(qc.ok());
  EXPECT_EQ(qc->state(), pb::JOB_CANCELLED);
  WaitFinal(*s, blocker->id());
  EXPECT_EQ(s->Get(queued->id())->state(), pb::JOB_CANCELLED);
}

// A kernel-method job with a huge launch count: its timed batches (n / 10
// launches each) are checked for cancellation and the time limit at least
// every ~0.1 s, not only between batches.
TEST_F(SchedulerTest, CancelAndTimeLimitStopALongKernelBatch) {
  auto s = Make();
  pb::BenchJobSpec spec = AttentionSpec({"cpu"});
  spec.set_name("many-iters");
  spec.mutable_method()->set_warmup(1);
  spec.mutable_method()->set_iters(1000000);  // one batch alone would take minutes
  auto job = s->Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitForTiming(*s, job->id()));
  absl::SleepFor(absl::Milliseconds(300));  // well inside the first batch
  const auto t0 = std::chrono::steady_clock::now();
  auto c = s->Cancel(job->id(), "stop the batch");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state(), pb::JOB_CANCELLED);
  EXPECT_LT(took, 1.0);

  // The cancelled run's launches already queued on the backend still drain
  // (on a loaded 2-core CI machine that took > 10 s once): a small job that
  // runs after them, before the time limit is timed on an idle device.
  auto drain = s->Submit(AttentionSpec({"cpu"}));
  ASSERT_TRUE(drain.ok()) << drain.status();
  WaitFinal(*s, drain->id(), 120);
  spec.set_time_limit_s(0.5);
  auto limited = s->Submit(spec);
  ASSERT_TRUE(limited.ok()) << limited.status();
  pb::BenchJob j = WaitFinal(*s, limited->id(), 10);
  EXPECT_EQ(j.state(), pb::JOB_FAILED);
  EXPECT_EQ(j.error_code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(j.finished_unix_ms() - j.started_unix_ms(), 2000);
}

TEST_F(SchedulerTest, NanDurationsAreRefused) {
  auto s = Make();
  const double nan = std::nan("");
  pb::BenchJobSpec spec = LongSpec(3);
  spec.mutable_method()->set_window_s(nan);
  auto r = s->Submit(spec);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("spec.method"));
  spec = LongSpec(3);
  spec.mutable_method()->set_warmin_s(nan);
  EXPECT_EQ(s->Submit(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec = LongSpec(3);
  spec.mutable_method()->set_window_s(1e12);
  EXPECT_EQ(s->Submit(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec = AttentionSpec({"cpu"});
  spec.set_time_limit_s(nan);
  r = s->Submit(spec);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("spec.time_limit_s"));
}

// Seeded routing costs O(tokens * top_k), not O(tokens * experts): Submit
// with half a million tokens over 262144 experts answers at once (it used to
// spin for hours in the gRPC handler).
TEST_F(SchedulerTest, MoeRoutingForManyExpertsIsCheapAtSubmit) {
  auto s = Make();
  pb::BenchJobSpec spec;
  spec.set_op(pb::OP_MOE_GATEUP);
  auto* m = spec.mutable_moe();
  m->set_tokens(524288);
  m->set_experts(262144);
  m->set_top_k(1);
  m->set_hidden(32);
  m->set_inter(1);
  spec.add_variants("cpu");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = s->Submit(spec);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 5.0);
  if (r.ok()) {
    EXPECT_TRUE(s->Cancel(r->id(), "test").ok());
  }
}

TEST_F(SchedulerTest, HardTimeLimitFailsTheJob) {
  auto s = Make();
  pb::BenchJobSpec spec = LongSpec(60.0);
  spec.set_time_limit_s(0.5);
  auto job = s->Submit(spec);
  ASSERT_TRUE(job.ok());
  pb::BenchJob j = WaitFinal(*s, job->id(), 5);
  EXPECT_EQ(j.state(), pb::JOB_FAILED);
  EXPECT_EQ(j.error_code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(j.error(), HasSubstr("time limit of 0.5 s"));
  EXPECT_LT(j.finished_unix_ms() - j.started_unix_ms(), 2000);
}

TEST_F(SchedulerTest, SustainedReportsNoClocksOnCpu) {
  auto s = Make();
  auto job = s->Submit(LongSpec(0.1));
  pb::BenchJob j = WaitFinal(*s, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  const auto& r = j.results(0);
  EXPECT_FALSE(r.clocks().available());
  EXPECT_THAT(r.clocks().note(), HasSubstr("no clock telemetry on backend cpu"));
  EXPECT_GT(r.time().count(), 1);
  EXPECT_THAT(r.method(), HasSubstr("sustained"));
}

TEST_F(SchedulerTest, RestartKeepsResultsRequeuesRunningAndInterruptsRepeatOffenders) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  BenchOptions o;
  o.data_dir = dir;
  std::string done_id;
  {
    auto s = Make(o);
    EXPECT_EQ(s->journal_mode(), "wal");
    auto job = s->Submit(AttentionSpec({"cpu", "test.wrong"}));
    ASSERT_TRUE(job.ok());
    done_id = job->id();
    ASSERT_EQ(WaitFinal(*s, done_id).state(), pb::JOB_DONE);
  }
  // Two jobs the "previous server" left RUNNING, as a SIGKILL would.
  {
    auto store = JobStore::Open(dir + "/bench.db");
    ASSERT_TRUE(store.ok());
    for (int attempts : {1, 2}) {
      pb::BenchJob j;
      j.set_id(absl::StrCat("job-crashed-", attempts));
      *j.mutable_spec() = AttentionSpec({"cpu"});
      j.mutable_spec()->set_submitter("anonymous");
      j.set_state(pb::JOB_RUNNING);
      j.set_attempts(attempts);
      j.set_created_unix_ms(1);
      ASSERT_TRUE((*store)->PutJob(j).ok());
    }
  }
  auto s = Make(o);
  pb::BenchJob done = s->Get(done_id).value();
  EXPECT_EQ(done.state(), pb::JOB_DONE);
  ASSERT_EQ(done.results_size(), 2);
  EXPECT_TRUE(done.results(0).correct());
  EXPECT_FALSE(done.results(1).correct());
  EXPECT_GT(done.results(0).time().value_ms(), 0);
  std::vector<pb::BenchEvent> ev;
  bool fin;
  ASSERT_TRUE(s->WaitEvents(done_id, 0, absl::Seconds(1), &ev, &fin).ok());
  EXPECT_TRUE(fin);
  EXPECT_EQ(ev.back().phase(), pb::PHASE_DONE);

  pb::BenchJob requeued = WaitFinal(*s, "job-crashed-1");
  EXPECT_EQ(requeued.state(), pb::JOB_DONE) << requeued.error();
  EXPECT_EQ(requeued.attempts(), 2);
  pb::BenchJob interrupted = s->Get("job-crashed-2").value();
  EXPECT_EQ(interrupted.state(), pb::JOB_INTERRUPTED);
  EXPECT_THAT(interrupted.error(), HasSubstr("2 times"));
}

// A second scheduler (a second server) on the same data dir would serve stale
// state over the same database: it fails to start, naming the lock.
TEST_F(SchedulerTest, SecondSchedulerOnTheSameDataDirFailsNamingTheLock) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  BenchOptions o;
  o.data_dir = dir;
  {
    auto first = Make(o);
    ASSERT_NE(first, nullptr);
    auto second = BenchScheduler::Create(backend_.get(), o, InlineRunner(), nullptr);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(second.status().message()), HasSubstr(dir + "/bench.lock is locked"));
    EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use by another kernelserve"));
    // The first one is unaffected.
    auto job = first->Submit(AttentionSpec({"cpu"}));
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(WaitFinal(*first, job->id()).state(), pb::JOB_DONE);
  }
  // Once the first is gone, the lock is free again.
  auto third = BenchScheduler::Create(backend_.get(), o, InlineRunner(), nullptr);
  EXPECT_TRUE(third.ok()) << third.status();
}

// A spec whose tensors exceed --bench_max_job_mb is refused at Submit, before
// anything is allocated (a huge shape used to end the server with bad_alloc).
TEST_F(SchedulerTest, JobsLargerThanMaxJobBytesAreRefusedAtSubmit) {
  BenchOptions o;
  o.max_job_bytes = 1 << 20;
  auto s = Make(o);
  pb::BenchJobSpec big = AttentionSpec({"cpu"});
  big.mutable_attention()->set_heads_q(8);
  big.mutable_attention()->set_seq_q(1024);  // q, k, v: 3 MiB of bf16
  auto r = s->Submit(big);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("--bench_max_job_mb"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("inputs"));
  // A hostile shape (petabytes) is refused the same way, without allocating.
  pb::BenchJobSpec huge = big;
  huge.mutable_attention()->set_batch(1 << 20);
  huge.mutable_attention()->set_seq_q(1 << 20);
  r = s->Submit(huge);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("--bench_max_job_mb"));
  pb::ListBenchRequest all;
  EXPECT_TRUE(s->List(all).empty()) << "nothing was queued";
  // Jobs within the limit still run.
  auto small = s->Submit(AttentionSpec({"cpu"}));
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(WaitFinal(*s, small->id()).state(), pb::JOB_DONE);
}

TEST_F(SchedulerTest, GracefulShutdownRequeuesTheRunningJob) {
  const std::string dir = TempDir();
  BenchOptions o;
  o.data_dir = dir;
  std::string id;
  {
    auto s = Make(o);
    auto job = s->Submit(LongSpec(60.0));
    id = job->id();
    WaitState(*s, id, [](const pb::BenchJob& j) { return j.state() == pb::JOB_RUNNING; });
    s->Shutdown();
    EXPECT_EQ(s->Get(id)->state(), pb::JOB_QUEUED);
  }
  auto s = Make(o);
  pb::BenchJob j = WaitState(*s, id, [](const pb::BenchJob& j) { return j.state() == pb::JOB_RUNNING; });
  EXPECT_EQ(j.attempts(), 1);  // the graceful stop did not count
  ASSERT_TRUE(s->Cancel(id, "").ok());
}

// What a GPU backend reports (kernels/gpu/gpu_backend.cc), with a 50 MiB L2.
BackendCapabilities GpuLikeCapabilities() {
  BackendCapabilities c;
  c.device_timer = true;
  c.graph_replay = true;
  c.cache_bytes = int64_t{50} << 20;
  c.timer = "test events";
  return c;
}

// The real cpu backend under another name, with the optional device timers
// implemented the only way a host can: the real launches, timed on the host
// clock. What the scheduler does with it follows the capabilities it
// reports, whatever its name: with GpuLikeCapabilities() the device-timer
// and graph paths run here. `fail_capture` makes every capture fail as a
// non-capturable op would.
class TimedCpuBackend : public Backend {
 public:
  TimedCpuBackend(std::string name, BackendCapabilities caps)
      : cpu_(CreateCpuBackend(2)), name_(std::move(name)), caps_(std::move(caps)) {}
  std::string Name() const override { return name_; }
  BackendCapabilities Capabilities() const override { return caps_; }
  int DeviceCount() const override { return cpu_->DeviceCount(); }
  DeviceInfo GetDeviceInfo(int device) const override { return cpu_->GetDeviceInfo(device); }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int device, size_t bytes) override {
    // Small "device": the copy ceiling's buffers (8x a 50 MiB cache: 512 MiB) do not fit.
    if (bytes >= (size_t{128} << 20)) return absl::ResourceExhaustedError("test device: 128 MiB at most");
    return cpu_->Allocate(device, bytes);
  }
  absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) override {
    return cpu_->CopyToDevice(device, dst, src, bytes);
  }
  absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) override {
    return cpu_->CopyToHost(device, dst, src, bytes);
  }
  absl::Status CopyOnDevice(int device, void* dst, const void* src, size_t bytes) override {
    return cpu_->CopyOnDevice(device, dst, src, bytes);
  }
  absl::Status Synchronize(int device) override { return cpu_->Synchronize(device); }
  absl::Status Attention(int device, const AttentionParams& p, const TensorView& q, const TensorView& k,
                         const TensorView& v, TensorView& out) override {
    return cpu_->Attention(device, p, q, k, v, out);
  }
  absl::Status Fp8Attention(int device, const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                            TensorView& out) override {
    return cpu_->Fp8Attention(device, p, in, out);
  }
  absl::Status MlaDecode(int device, const MlaDecodeParams& p, const MlaDecodeInputs& in,
                         TensorView& out) override {
    return cpu_->MlaDecode(device, p, in, out);
  }
  absl::Status Moe(int device, const MoeParams& p, const MoeInputs& in, TensorView& out) override {
    return cpu_->Moe(device, p, in, out);
  }
  absl::StatusOr<double> TimeLaunches(int device, const std::function<absl::Status()>& launch, int n) override {
    ++time_launches_calls;
    return HostTime(device, launch, n);
  }
  absl::StatusOr<double> TimeGraphReplays(int device, const std::function<absl::Status()>& launch,
                                          int replays) override {
    ++graph_calls;
    KS_RETURN_IF_ERROR(launch());  // the "capture"
    if (fail_capture) return absl::FailedPreconditionError("graph capture on test device: not capturable");
    return HostTime(device, launch, replays);
  }

  std::atomic<int> time_launches_calls{0};
  std::atomic<int> graph_calls{0};
  std::atomic<bool> fail_capture{false};

 private:
  absl::StatusOr<double> HostTime(int device, const std::function<absl::Status()>& launch, int n) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) KS_RETURN_IF_ERROR(launch());
    KS_RETURN_IF_ERROR(cpu_->Synchronize(device));
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / n;
  }

  std::unique_ptr<Backend> cpu_;
  std::string name_;
  BackendCapabilities caps_;
};

// The cpu backend as `n` devices, all of them its one device: enough for the
// scheduler's per-device runners and queues (a multi-GPU server's shape).
class MultiCpuBackend : public Backend {
 public:
  explicit MultiCpuBackend(int n) : cpu_(CreateCpuBackend(2)), n_(n) {}
  std::string Name() const override { return cpu_->Name(); }
  int DeviceCount() const override { return n_; }
  DeviceInfo GetDeviceInfo(int device) const override {
    DeviceInfo info = cpu_->GetDeviceInfo(0);
    info.index = device;
    return info;
  }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int, size_t bytes) override {
    return cpu_->Allocate(0, bytes);
  }
  absl::Status CopyToDevice(int, void* dst, const void* src, size_t bytes) override {
    return cpu_->CopyToDevice(0, dst, src, bytes);
  }
  absl::Status CopyToHost(int, void* dst, const void* src, size_t bytes) override {
    return cpu_->CopyToHost(0, dst, src, bytes);
  }
  absl::Status CopyOnDevice(int, void* dst, const void* src, size_t bytes) override {
    return cpu_->CopyOnDevice(0, dst, src, bytes);
  }
  absl::Status Synchronize(int) override { return cpu_->Synchronize(0); }
  absl::Status Attention(int, const AttentionParams& p, const TensorView& q, const TensorView& k,
                         const TensorView& v, TensorView& out) override {
    return cpu_->Attention(0, p, q, k, v, out);
  }
  absl::Status Fp8Attention(int, const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                            TensorView& out) override {
    return cpu_->Fp8Attention(0, p, in, out);
  }
  absl::Status MlaDecode(int, const MlaDecodeParams& p, const MlaDecodeInputs& in, TensorView& out) override {
    return cpu_->MlaDecode(0, p, in, out);
  }
  absl::Status Moe(int, const MoeParams& p, const MoeInputs& in, TensorView& out) override {
    return cpu_->Moe(0, p, in, out);
  }

 private:
  std::unique_ptr<Backend> cpu_;
  int n_;
};

// One task at a time per device, devices in parallel, like one worker each.
DeviceRunner PerDeviceRunner(int n) {
  auto mus = std::make_shared<std::vector<absl::Mutex>>(static_cast<size_t>(n));
  return [mus](int device, std::function<absl::Status()> fn) {
    absl::MutexLock l(&(*mus)[static_cast<size_t>(device)]);
    return fn();
  };
}

// max_running_jobs on a two-device server: a tenant at its limit keeps its
// next job queued (told why), another tenant's later job on that device runs
// meanwhile, and once the tenant's running job ends its queued jobs start in
// priority order, still one at a time.
TEST_F(SchedulerTest, RunningJobLimitHoldsTheTenantsJobsAndStartsOthers) {
  MultiCpuBackend be(2);
  security::LimitsConfig limits;
  limits.per_tenant["alice"].max_running_jobs = 1;
  security::TenantLimiter limiter(limits);
  BenchOptions o;
  o.min_warmin_s = 0.02;
  o.min_window_s = 0.05;
  o.start_check = [&limiter](const std::string& tenant, int64_t running) {
    return limiter.CheckStartJob(security::Tenant{tenant, false}, running);
  };
  auto made = BenchScheduler::Create(&be, o, PerDeviceRunner(2), nullptr);
  ASSERT_TRUE(made.ok()) << made.status();
  BenchScheduler& s = **made;
  auto on = [](pb::BenchJobSpec spec, int device, int priority) {
    spec.set_device(device);
    spec.set_priority(priority);
    return spec;
  };

  auto a = s.Submit(on(LongSpec(60), 0, 0), "alice");
  ASSERT_TRUE(a.ok()) << a.status();
  WaitState(s, a->id(), [](const pb::BenchJob& j) { return j.state() == pb::JOB_RUNNING; });
  auto low = s.Submit(on(AttentionSpec({"cpu"}), 1, 0), "alice");
  auto high = s.Submit(on(AttentionSpec({"cpu"}), 1, 5), "alice");
  auto bob = s.Submit(on(AttentionSpec({"cpu"}), 1, 0), "bob");
  ASSERT_TRUE(low.ok() && high.ok() && bob.ok());

  // bob's job, submitted last at the lowest priority, runs on device 1 while alice's wait.
  EXPECT_EQ(WaitFinal(s, bob->id()).state(), pb::JOB_DONE);
  EXPECT_EQ(s.Get(a->id())->state(), pb::JOB_RUNNING);
  EXPECT_EQ(s.Get(low->id())->state(), pb::JOB_QUEUED);
  EXPECT_EQ(s.Get(high->id())->state(), pb::JOB_QUEUED);
  std::vector<pb::BenchEvent> ev;
  bool fin = false;
  ASSERT_TRUE(s.WaitEvents(high->id(), 0, absl::Seconds(1), &ev, &fin).ok());
  std::string said;
  for (const auto& e : ev) {
    if (e.phase() == pb::PHASE_QUEUED) said += e.message() + "\n";
  }
  EXPECT_THAT(said, HasSubstr("waiting in the queue: tenant \"alice\" at limit max_running_jobs: 1 running, limit 1"));

  // alice's running job ends: her queued jobs start by priority, one at a time.
  ASSERT_TRUE(s.Cancel(a->id(), "").ok());
  const pb::BenchJob h = WaitFinal(s, high->id());
  const pb::BenchJob l = WaitFinal(s, low->id());
  EXPECT_EQ(h.state(), pb::JOB_DONE) << h.error();
  EXPECT_EQ(l.state(), pb::JOB_DONE) << l.error();
  EXPECT_LE(h.finished_unix_ms(), l.started_unix_ms());
  EXPECT_GE(h.started_unix_ms(), WaitFinal(s, a->id()).finished_unix_ms());
  EXPECT_EQ(limiter.rejections().count("max_running_jobs"), 0u) << "held, not refused";
}

// device unset (`any`, the default) on three simulated cpu devices
// (--cpu_devices): jobs go to whichever device is free, three run at once,
// none overlaps another on its device, a pinned job waits for its own device
// although others are free, and an out-of-range device is refused.
TEST_F(SchedulerTest, AnyDeviceJobsRunOnTheFirstFreeDeviceOnePerDevice) {
  std::unique_ptr<Backend> be = CreateCpuBackend(1, 3);
  ASSERT_EQ(be->DeviceCount(), 3);
  BenchOptions o;
  o.min_warmin_s = 0.02;
  o.min_window_s = 0.05;
  o.max_jobs_per_submitter = 100;
  auto made = BenchScheduler::Create(be.get(), o, PerDeviceRunner(3), nullptr);
  ASSERT_TRUE(made.ok()) << made.status();
  BenchScheduler& s = **made;

  pb::BenchJobSpec bad = AttentionSpec({"cpu"});
  bad.set_device(3);
  auto refused = s.Submit(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("spec.device: this server has devices 0..2"));

  // Three long `any` jobs hold all three devices at once.
  std::vector<std::string> longs;
  for (int i = 0; i < 3; ++i) {
    auto j = s.Submit(LongSpec(60));
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_FALSE(j->spec().has_device());
    longs.push_back(j->id());
  }
  std::set<int> held;
  for (const std::string& id : longs) {
    held.insert(WaitState(s, id, [](const pb::BenchJob& j) { return j.state() == pb::JOB_RUNNING; }).device());
  }
  EXPECT_EQ(held, (std::set<int>{0, 1, 2}));

  // All busy: new `any` jobs queue; one pinned to device 1 waits for device 1
  // even when device 0 frees first.
  pb::BenchJobSpec pinned = AttentionSpec({"cpu"});
  pinned.set_device(1);
  auto p = s.Submit(pinned);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<std::string> shorts;
  for (int i = 0; i < 9; ++i) {
    auto j = s.Submit(AttentionSpec({"cpu"}));
    ASSERT_TRUE(j.ok()) << j.status();
    shorts.push_back(j->id());
  }
  EXPECT_EQ(s.Get(shorts.back())->queue_position(), 10) << "every queued job is ahead of an any job";
  std::string free0;
  for (const std::string& id : longs) {
    if (s.Get(id)->device() == 0) free0 = id;
  }
  ASSERT_TRUE(s.Cancel(free0, "").ok());
  for (const std::string& id : shorts) {
    const pb::BenchJob j = WaitFinal(s, id);
    EXPECT_EQ(j.state(), pb::JOB_DONE) << j.error();
    EXPECT_EQ(j.device(), 0) << "devices 1 and 2 are still held";
  }
  EXPECT_EQ(s.Get(p->id())->state(), pb::JOB_QUEUED) << "its device is still held";
  for (const std::string& id : longs) ASSERT_TRUE(s.Cancel(id, "").ok());
  const pb::BenchJob pj = WaitFinal(s, p->id());
  EXPECT_EQ(pj.state(), pb::JOB_DONE) << pj.error();
  EXPECT_EQ(pj.device(), 1);

  // Per device, no two jobs' runs overlap.
  std::vector<pb::BenchJob> all = s.List(pb::ListBenchRequest());
  ASSERT_EQ(all.size(), 13u);
  for (const pb::BenchJob& a : all) {
    for (const pb::BenchJob& b : all) {
      if (a.id() == b.id() || a.device() != b.device() || a.started_unix_ms() == 0 || b.started_unix_ms() == 0) {
        continue;
      }
      EXPECT_TRUE(a.finished_unix_ms() <= b.started_unix_ms() || b.finished_unix_ms() <= a.started_unix_ms())
          << a.id() << " and " << b.id() << " overlap on device " << a.device();
    }
  }
}

TEST_F(SchedulerTest, CpuBackendHasNoDeviceTimersAndTimesOnTheHostClock) {
  int calls = 0;
  auto count = [&]() -> absl::Status {
    ++calls;
    return absl::OkStatus();
  };
  absl::StatusOr<double> t = backend_->TimeLaunches(0, count, 3);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented) << t.status();
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("backend cpu"));
  t = backend_->TimeGraphReplays(0, count, 3);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented) << t.status();
  EXPECT_EQ(calls, 0);

  auto s = Make();
  pb::BenchJobSpec spec = AttentionSpec({"cpu", "oracle"});
  auto job = s->Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  pb::BenchJob j = WaitFinal(*s, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  for (const auto& r : j.results()) {
    EXPECT_TRUE(r.timed()) << r.variant();
    EXPECT_THAT(r.method(), HasSubstr("timer: host clock")) << r.variant();
    EXPECT_GT(r.time().value_ms(), 0) << r.variant();
  }
}

TEST_F(SchedulerTest, DeviceTimersArePreferredAndGraphCaptureFailuresLeaveTheVariantUntimed) {
  TimedCpuBackend be("gpu", GpuLikeCapabilities());
  BenchOptions o;
  o.test_variants = true;
  o.server_version = "test";
  auto made = BenchScheduler::Create(&be, o, InlineRunner(), nullptr);
  ASSERT_TRUE(made.ok()) << made.status();
  BenchScheduler& s = **made;

  // Kernel and passes: TimeLaunches, once per batch; the oracle stays on the host clock.
  pb::BenchJobSpec spec = AttentionSpec({"gpu", "oracle"});
  auto job = s.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  pb::BenchJob j = WaitFinal(s, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  ASSERT_EQ(j.results_size(), 2);
  EXPECT_THAT(j.results(0).method(), HasSubstr("timer: device events"));
  EXPECT_THAT(j.results(1).method(), HasSubstr("timer: host clock"));
  EXPECT_EQ(be.time_launches_calls.load(), 5);  // 5 timed launches in 5 batches of one
  EXPECT_EQ(be.graph_calls.load(), 0);
  // No GEMM of its own and no --bench_gemm_tflops: "not measured", not a rate of 0.
  EXPECT_EQ(j.ceilings().gemm_tflops(), 0);
  EXPECT_EQ(j.ceilings().gemm_desc(), "not measured");
  EXPECT_THAT(j.ceilings().note(), HasSubstr("GEMM ceiling not measured"));
  EXPECT_THAT(j.ceilings().note(), HasSubstr("--bench_gemm_tflops"));
  EXPECT_EQ(j.results(0).frac_gemm_ceiling(), 0);
  EXPECT_TRUE(j.results(0).ceiling_note().empty());

  // Graph: replays in batches, each its own capture.
  spec.mutable_method()->set_method(pb::METHOD_GRAPH);
  spec.mutable_method()->set_graph_replays(20);
  job = s.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  j = WaitFinal(s, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  ASSERT_EQ(j.results_size(), 2);
  const pb::VariantResult& g = j.results(0);
  EXPECT_TRUE(g.timed());
  EXPECT_THAT(g.method(), HasSubstr("graph ("));
  EXPECT_THAT(g.method(), HasSubstr("20 replays"));
  EXPECT_THAT(g.method(), HasSubstr("CUDA-graph replays"));
  EXPECT_EQ(g.time().count(), 20);
  EXPECT_GT(g.time().value_ms(), 0);
  EXPECT_EQ(g.rank() > 0, true);
  EXPECT_EQ(be.graph_calls.load(), 10);
  EXPECT_THAT(j.results(1).method(), HasSubstr("timer: host clock"));  // host code has no graph

  // A variant that cannot be captured is reported, not timed; the job still finishes.
  be.fail_capture = true;
  job = s.Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  j = WaitFinal(s, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  EXPECT_TRUE(j.results(0).correct());
  EXPECT_FALSE(j.results(0).timed());
  EXPECT_EQ(j.results(0).rank(), 0);
  EXPECT_THAT(j.results(0).error_message(), HasSubstr("not capturable"));
  EXPECT_THAT(absl::StrJoin(j.notes(), ";"), HasSubstr("gpu not timed: method graph could not capture it"));
  EXPECT_TRUE(j.results(1).timed());
  EXPECT_EQ(j.results(1).rank(), 1);

  // Graph replays are counted like launches.
  spec.mutable_method()->set_graph_replays(-1);
  EXPECT_EQ(s.Submit(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

// What the server derives from a backend's capabilities: the flush covers
// the cache it reports, and the copy ceiling streams well past it.
TEST(BackendCapabilitiesTest, FlushAndCopySizesFollowTheReportedCache) {
  const BackendCapabilities cpu = CreateCpuBackend(1)->Capabilities();
  EXPECT_FALSE(cpu.device_timer);
  EXPECT_FALSE(cpu.graph_replay);
  EXPECT_EQ(cpu.cache_bytes, int64_t{64} << 20);
  EXPECT_THAT(cpu.timer, HasSubstr("host clock"));
  EXPECT_EQ(FlushBytes(cpu), int64_t{64} << 20);
  EXPECT_EQ(CeilingCopyPlan(cpu).bytes, int64_t{64} << 20);
  EXPECT_EQ(CeilingCopyPlan(cpu).per_batch, 2);

  const BackendCapabilities gpu = GpuLikeCapabilities();
  EXPECT_EQ(FlushBytes(gpu), int64_t{50} << 20);
  EXPECT_EQ(CeilingCopyPlan(gpu).bytes, int64_t{512} << 20);  // 8 x 50 MiB, rounded up to a power of two
  EXPECT_EQ(CeilingCopyPlan(gpu).per_batch, 10);

  EXPECT_EQ(FlushBytes(BackendCapabilities{}), 0);  // no cache, nothing to flush
}

// A backend's name decides nothing: one called "cuda" that reports no device
// timer and no graph replay is timed on the host clock (its TimeLaunches is
// never called), gets no clock telemetry, and is refused method graph with
// a message naming it.
TEST_F(SchedulerTest, CapabilitiesNotNamesDecideTimersGraphsAndClocks) {
  TimedCpuBackend be("cuda", BackendCapabilities{});
  BenchOptions o;
  o.min_warmin_s = 0.02;
  o.min_window_s = 0.05;
  auto made = BenchScheduler::Create(&be, o, InlineRunner(), nullptr);
  ASSERT_TRUE(made.ok()) << made.status();
  BenchScheduler& s = **made;

  auto job = s.Submit(AttentionSpec({"cuda"}));
  ASSERT_TRUE(job.ok()) << job.status();
  pb::BenchJob j = WaitFinal(s, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  EXPECT_THAT(j.results(0).method(), HasSubstr("timer: host clock"));
  EXPECT_EQ(be.time_launches_calls.load(), 0);

  pb::BenchJobSpec graph = AttentionSpec({"cuda"});
  graph.mutable_method()->set_method(pb::METHOD_GRAPH);
  const absl::Status refused = s.Submit(graph).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("method graph"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("needs a backend with graph capture"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("backend cuda"));
  EXPECT_EQ(be.graph_calls.load(), 0);

  pb::BenchJobSpec sustained = LongSpec(0.05);
  sustained.set_variants(0, "cuda");
  job = s.Submit(sustained);
  ASSERT_TRUE(job.ok()) << job.status();
  j = WaitFinal(s, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  EXPECT_FALSE(j.results(0).clocks().available());
  EXPECT_THAT(j.results(0).clocks().note(), HasSubstr("no clock telemetry on backend cuda"));
}

// A hip backend's sustained window is sampled through ROCm SMI. This machine
// has no AMD GPU: with Debian's librocm-smi64-1 installed rsmi_init fails,
// without it the library is missing; either way the job finishes, its
// clocks unavailable with a note saying why.
TEST_F(SchedulerTest, HipClocksWithoutAnAmdGpuAreANoteNotAFailure) {
  TimedCpuBackend be("hip", GpuLikeCapabilities());
  BenchOptions o;
  o.min_warmin_s = 0.02;
  o.min_window_s = 0.05;
  auto made = BenchScheduler::Create(&be, o, InlineRunner(), nullptr);
  ASSERT_TRUE(made.ok()) << made.status();
  pb::BenchJobSpec sustained = LongSpec(0.05);
  sustained.set_variants(0, "hip");
  auto job = (*made)->Submit(sustained);
  ASSERT_TRUE(job.ok()) << job.status();
  const pb::BenchJob j = WaitFinal(**made, job->id());
  ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
  const pb::ClockStats& c = j.results(0).clocks();
  EXPECT_FALSE(c.available());
  EXPECT_EQ(c.samples(), 0);
  EXPECT_THAT(c.note(), EndsWith(": no clock, power or temperature samples"));
  EXPECT_THAT(c.note(), AnyOf(StartsWith("rsmi_init failed (RSMI status "), StartsWith("cannot load ROCm SMI"),
                              HasSubstr(") sees no AMD GPU")));
}

// With l2_flush a job reserves (and allocates) two flush buffers of the
// cache size the backend reports; a backend reporting no cache flushes
// nothing and the job says so.
TEST_F(SchedulerTest, TheL2FlushCoversTheCacheTheBackendReports) {
  const int64_t io_bytes = 4 * (2 * 48 * 64 * 2);  // q, k, v and the output: bf16 [1,2,48,64]
  for (const int64_t cache : {int64_t{0}, int64_t{1} << 20, int64_t{3} << 20}) {
    SCOPED_TRACE(cache);
    BackendCapabilities caps;
    caps.cache_bytes = cache;
    TimedCpuBackend be("test", caps);
    std::atomic<int64_t> reserved{0};
    BenchOptions o;
    o.reserve_memory = [&reserved](int, const std::string&, int64_t bytes,
                                   const std::string&) -> absl::StatusOr<std::shared_ptr<void>> {
      reserved = bytes;
      return std::make_shared<int>(0);
    };
    auto made = BenchScheduler::Create(&be, o, InlineRunner(), nullptr);
    ASSERT_TRUE(made.ok()) << made.status();
    pb::BenchJobSpec spec = AttentionSpec({"test"});
    spec.mutable_method()->set_l2_flush(true);
    auto job = (*made)->Submit(spec);
    ASSERT_TRUE(job.ok()) << job.status();
    const pb::BenchJob j = WaitFinal(**made, job->id());
    ASSERT_EQ(j.state(), pb::JOB_DONE) << j.error();
    EXPECT_TRUE(j.results(0).timed());
    EXPECT_EQ(reserved.load(), io_bytes + 2 * cache);
    EXPECT_EQ(absl::StrContains(absl::StrJoin(j.notes(), ";"), "reports no cache to flush"), cache == 0);
  }
}

}  // namespace
}  // namespace bench
}  // namespace kernelserve
