// Users' kernels through a real KernelServer on a real port (cpu backend),
// submitted with the real client library as two tenants would: the example
// kernels of every op pass the gate beside the built-in variants, and every
// bad input of issue 18 ends in a clear status that leaves the server, and
// the other tenant's calls, untouched.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/bench_client.h"
#include "client/client.h"
#include "client/user_kernels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/numerics/test_inputs.h"
#include "server/security/tokens.h"
#include "server/server.h"
#include "server/user_kernels/background_calls.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Example(const std::string& op) { return ReadFile("kernels/api/examples/cpu/" + op + ".cc"); }

// An attention kernel whose body is `body` (the args are `a`).
std::string AttentionKernel(const std::string& body, const std::string& prelude = "KS_USER_ABI_DEFINE_VERSION();") {
  return absl::StrCat(
      "#include <cmath>\n#include <cstdlib>\n#include \"kernels/api/user_kernel_abi.h\"\n"
      "extern \"C\" {\n",
      prelude, "\nint ks_user_attention_v1(const ks_attention_args_v1* a, void*) {\n", body,
      "\n  return 0;\n}\n}\n");
}

class UserKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = absl::StrCat(::testing::TempDir(), "/uk_", getpid(), "_", counter_++);
    ASSERT_EQ(system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
    const std::string tokens = dir + "/tokens";
    {
      std::ofstream out(tokens);
      out << security::TokenFileLine("alice", "tok-alice", false) << "\n"
          << security::TokenFileLine("bob", "tok-bob", false) << "\n"
          << security::TokenFileLine("ops", "tok-ops", true) << "\n";
    }
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.backend = "cpu";
    o.cpu_threads = 2;
    o.max_message_mb = 256;  // so that a 100 MB source reaches the server's own check
    o.security.tokens_file = tokens;
    o.bench.user_kernels.worker = "server/user_kernels/kernel_worker";
    o.bench.user_kernels.cache_dir = dir + "/cache";
    o.bench.user_kernels.work_dir = dir;
    o.bench.user_kernels.launch_deadline_s = 3;
    Customize(&o);
    options_ = o;
    StartServer();
  }

  void StartServer() {
    auto s = KernelServer::Start(options_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    alice_ = Connect("tok-alice");
    bob_ = Connect("tok-bob");
    ASSERT_NE(alice_, nullptr);
    ASSERT_NE(bob_, nullptr);
  }

  virtual void Customize(ServerOptions*) {}

  std::unique_ptr<BenchClient> Connect(const std::string& token) {
    ClientOptions c = Options(token);
    auto client = BenchClient::Connect(c);
    return client.ok() ? std::move(*client) : nullptr;
  }

  ClientOptions Options(const std::string& token) const {
    ClientOptions c;
    c.target = absl::StrCat("127.0.0.1:", server_->port());
    c.default_timeout = absl::Seconds(120);
    c.max_message_mb = 256;
    c.bearer_token = token;
    return c;
  }

  static pb::BenchJobSpec Spec(pb::BenchOp op, const std::string& name, const std::string& source,
                               std::vector<std::string> baselines = {}) {
    pb::BenchJobSpec s;
    s.set_name(name);
    s.set_op(op);
    if (op == pb::OP_ATTENTION || op == pb::OP_FP8_ATTENTION) {
      auto* a = s.mutable_attention();
      a->set_batch(1);
      a->set_heads_q(2);
      a->set_seq_q(64);
      a->set_head_dim(op == pb::OP_ATTENTION ? 64 : 128);
      a->set_causal(true);
    } else if (op == pb::OP_MLA_DECODE) {
      auto* m = s.mutable_mla();
      m->set_batch(2);
      m->set_q_len(2);
      m->set_heads(4);
      m->set_seq_len(64);
    } else {
      auto* m = s.mutable_moe();
      m->set_tokens(4);
      m->set_experts(4);
      m->set_top_k(2);
      m->set_hidden(64);
      m->set_inter(64);
      m->set_swiglu(op == pb::OP_MOE_GATEUP);
      m->set_weighted_sum(op == pb::OP_MOE_DOWN);
      if (op == pb::OP_MOE_LAYER) m->set_out_dim(64);
    }
    for (auto& b : baselines) s.add_variants(b);
    s.mutable_method()->set_warmup(2);
    s.mutable_method()->set_iters(5);
    pb::UserKernel* k = s.add_user_kernels();
    k->set_name(name);
    k->set_filename(name + ".cc");
    k->set_source(source);
    return s;
  }

  // Submits and waits for the end.
  pb::BenchJob Run(const pb::BenchJobSpec& spec, BenchClient* client = nullptr) {
    client = client != nullptr ? client : alice_.get();
    auto job = client->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    auto done = client->Watch(job->id(), [](const pb::BenchEvent&) {}, absl::Seconds(300));
    EXPECT_TRUE(done.ok()) << done.status();
    return done.ok() ? *done : pb::BenchJob{};
  }

  const pb::VariantResult* Result(const pb::BenchJob& job, const std::string& variant) {
    for (const auto& r : job.results()) {
      if (r.variant() == variant) return &r;
    }
    return nullptr;
  }

  // A job that fails with `code` and a message holding every one of `parts`.
  void ExpectFails(const pb::BenchJobSpec& spec, absl::StatusCode code, const std::vector<std::string>& parts) {
    pb::BenchJob job = Run(spec);
    EXPECT_EQ(job.state(), pb::JOB_FAILED) << job.DebugString();
    EXPECT_EQ(job.error_code(), static_cast<int>(code)) << job.error();
    for (const std::string& p : parts) EXPECT_THAT(job.error(), HasSubstr(p));
    ExpectServerFine();
  }

  // The server still runs jobs and calls after whatever the last kernel did.
  void ExpectServerFine() {
    pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "after", Example("attention"));
    spec.clear_user_kernels();
    spec.add_variants("cpu");
    pb::BenchJob job = Run(spec, bob_.get());
    EXPECT_EQ(job.state(), pb::JOB_DONE) << job.error();
  }

  static int counter_;
  ServerOptions options_;
  std::unique_ptr<KernelServer> server_;
  std::unique_ptr<BenchClient> alice_, bob_;
};
int UserKernelTest::counter_ = 0;

TEST_F(UserKernelTest, ExamplesOfEveryOpPassTheGateBesideTheBuiltInVariant) {
  const std::vector<std::pair<pb::BenchOp, std::string>> ops = {{pb::OP_ATTENTION, "attention"},
                                                                {pb::OP_FP8_ATTENTION, "fp8_attention"},
                                                                {pb::OP_MLA_DECODE, "mla_decode"},
                                                                {pb::OP_MOE_GATEUP, "moe_gateup"},
                                                                {pb::OP_MOE_DOWN, "moe_down"},
                                                                {pb::OP_MOE_LAYER, "moe_layer"}};
  for (const auto& [op, name] : ops) {
    SCOPED_TRACE(name);
    pb::BenchJob job = Run(Spec(op, name, Example(name), {"cpu"}));
    ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
    const pb::VariantResult* user = Result(job, "user:" + name);
    const pb::VariantResult* cpu = Result(job, "cpu");
    ASSERT_NE(user, nullptr);
    ASSERT_NE(cpu, nullptr);
    EXPECT_TRUE(user->correct()) << user->gate_message();
    EXPECT_TRUE(cpu->correct()) << cpu->gate_message();
    EXPECT_LE(user->error().rel_rms(), user->tolerance());
    EXPECT_TRUE(user->timed());
    EXPECT_GT(user->time().value_ms(), 0);
    EXPECT_GE(user->rank(), 1);
    EXPECT_THAT(user->method(), HasSubstr("worker process"));
    EXPECT_EQ(user->source_sha256(), security::Sha256Hex(Example(name)));
    EXPECT_THAT(user->build_log(), HasSubstr("-shared"));
    EXPECT_THAT(absl::StrJoin(job.notes(), "\n"), HasSubstr("secret seed"));
    // The spec's seed is what the user gave; the inputs' seed is never shown.
    EXPECT_EQ(job.spec().inputs().seed(), 0u);
  }
  // JUnit for CI carries the user variants.
  auto listed = alice_->List(pb::ListBenchRequest());
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(ExportJUnit(*listed), HasSubstr("user:attention"));
}

TEST_F(UserKernelTest, SecondBuildComesFromTheCacheAndInputsDifferPerRun) {
  pb::BenchJob first = Run(Spec(pb::OP_ATTENTION, "attention", Example("attention")));
  pb::BenchJob second = Run(Spec(pb::OP_ATTENTION, "attention", Example("attention")));
  ASSERT_EQ(second.state(), pb::JOB_DONE) << second.error();
  EXPECT_THAT(absl::StrJoin(second.notes(), "\n"), HasSubstr("build cache hit"));
  ASSERT_EQ(first.results_size(), 1);
  ASSERT_EQ(second.results_size(), 1);
  EXPECT_TRUE(second.results(0).correct());
  // Fresh secret inputs per run: the same kernel's error differs run to run.
  EXPECT_NE(first.results(0).error().rel_rms(), second.results(0).error().rel_rms());
}

TEST_F(UserKernelTest, PrebuiltSharedObjectRuns) {
  pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "prebuilt", "");
  const std::string so = ReadFile("kernels/api/examples/cpu_attention.so");
  ASSERT_FALSE(so.empty());
  spec.mutable_user_kernels(0)->set_shared_object(so);
  pb::BenchJob job = Run(spec);
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  EXPECT_TRUE(job.results(0).correct()) << job.results(0).gate_message();
  EXPECT_EQ(job.results(0).source_sha256(), security::Sha256Hex(so));
  // Timed and ranked on the same path as a source kernel, on the leaderboard by the object's hash.
  EXPECT_TRUE(job.results(0).timed());
  EXPECT_GT(job.results(0).time().value_ms(), 0);
  EXPECT_EQ(job.results(0).rank(), 1);
  EXPECT_THAT(job.results(0).build_log(), ::testing::Not(HasSubstr("g++")));
  pb::LeaderboardRequest req;
  req.set_op(pb::OP_ATTENTION);
  auto board = alice_->Leaderboard(req);
  ASSERT_TRUE(board.ok()) << board.status();
  ASSERT_EQ(board->entries_size(), 1);
  EXPECT_EQ(board->entries(0).source_sha256(), security::Sha256Hex(so));
  EXPECT_EQ(board->entries(0).kernel_name(), "prebuilt");
  // The object of another machine is refused at submit, naming the field; no job is made.
  std::string foreign = so;
  foreign[18] = 22;  // e_machine: EM_S390
  foreign[19] = 0;
  spec.mutable_user_kernels(0)->set_shared_object(foreign);
  auto refused = alice_->Submit(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("spec.user_kernels[0].shared_object: built for ELF machine 22"));
  // A prebuilt object without the op's entry point fails like a source one.
  spec.set_op(pb::OP_MOE_DOWN);
  spec.clear_attention();
  *spec.mutable_moe() = Spec(pb::OP_MOE_DOWN, "x", "").moe();
  spec.mutable_user_kernels(0)->set_shared_object(so);
  ExpectFails(spec, absl::StatusCode::kInvalidArgument, {"exports no ks_user_moe_down_v1"});
}

TEST_F(UserKernelTest, CodeThatDoesNotCompileReturnsTheLog) {
  ExpectFails(Spec(pb::OP_ATTENTION, "broken", "int f() { return undeclared_name; }\n"),
              absl::StatusCode::kInvalidArgument,
              {"user:broken", "broken.cc does not compile", "undeclared_name", "error"});
}

TEST_F(UserKernelTest, MissingEntryPoint) {
  ExpectFails(Spec(pb::OP_ATTENTION, "noentry",
                   "#include \"kernels/api/user_kernel_abi.h\"\nextern \"C\" { KS_USER_ABI_DEFINE_VERSION(); }\n"),
              absl::StatusCode::kInvalidArgument, {"user:noentry", "exports no ks_user_attention_v1"});
}

TEST_F(UserKernelTest, WrongAbiVersion) {
  ExpectFails(Spec(pb::OP_ATTENTION, "oldabi", AttentionKernel("", "const int32_t ks_user_abi_version = 99;")),
              absl::StatusCode::kInvalidArgument, {"user:oldabi", "ABI version 99", "speaks version 1"});
}

TEST_F(UserKernelTest, WritePastTheOutputIsCaught) {
  const std::string past =
      "const int64_t n = a->batch * a->heads_q * a->seq_q * a->head_dim;\n"
      "volatile uint16_t* o = a->out; o[n + 7] = 1;";
  ExpectFails(Spec(pb::OP_ATTENTION, "past", AttentionKernel(past)), absl::StatusCode::kAborted,
              {"user:past", "SIGSEGV", "outside its output", "past its end"});
}

TEST_F(UserKernelTest, WriteBeforeTheOutputIsCaught) {
  ExpectFails(Spec(pb::OP_ATTENTION, "before", AttentionKernel("volatile uint16_t* o = a->out; o[-3] = 1;")),
              absl::StatusCode::kAborted, {"user:before", "outside its output", "before its start"});
}

TEST_F(UserKernelTest, WriteIntoAnInputIsCaught) {
  ExpectFails(Spec(pb::OP_ATTENTION, "scribble",
                   AttentionKernel("volatile uint16_t* q = const_cast<uint16_t*>(a->q); q[5] = 0;")),
              absl::StatusCode::kAborted, {"user:scribble", "SIGSEGV", "wrote into its input q"});
}

TEST_F(UserKernelTest, KernelThatNeverReturnsIsKilledAtItsDeadline) {
  const absl::Time t0 = absl::Now();
  ExpectFails(Spec(pb::OP_ATTENTION, "hang", AttentionKernel("volatile int spin = 1; while (spin) {}")),
              absl::StatusCode::kDeadlineExceeded, {"user:hang", "did not finish within 3 s", "SIGKILL"});
  EXPECT_LT(absl::Now() - t0, absl::Seconds(60));
}

TEST_F(UserKernelTest, CancelKillsAHangingKernelsWorker) {
  auto job = alice_->Submit(Spec(pb::OP_ATTENTION, "spin", AttentionKernel("volatile int spin = 1; while (spin) {}")));
  ASSERT_TRUE(job.ok()) << job.status();
  // Wait until its gate runs (the worker is spinning), then cancel.
  auto seen = std::make_shared<std::atomic<bool>>(false);
  std::thread watcher([this, id = job->id(), seen] {
    alice_->Watch(id, [&](const pb::BenchEvent& e) {
      if (e.phase() == pb::PHASE_CHECKING && e.variant() == "user:spin") *seen = true;
    }, absl::Seconds(60)).IgnoreError();
  });
  const absl::Time t0 = absl::Now();
  while (!*seen && absl::Now() - t0 < absl::Seconds(30)) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(*seen);
  const absl::Time cancelled = absl::Now();
  ASSERT_TRUE(alice_->Cancel(job->id(), "enough").ok());
  watcher.join();
  auto got = alice_->Get(job->id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state(), pb::JOB_CANCELLED);
  EXPECT_LT(absl::Now() - cancelled, absl::Seconds(2.5));  // well before the 3 s deadline would kill it
  ExpectServerFine();
}

TEST_F(UserKernelTest, AbortKillsOnlyTheWorker) {
  ExpectFails(Spec(pb::OP_ATTENTION, "aborts", AttentionKernel("abort();")), absl::StatusCode::kAborted,
              {"user:aborts", "SIGABRT"});
}

TEST_F(UserKernelTest, NonzeroReturnFailsTheJob) {
  ExpectFails(Spec(pb::OP_ATTENTION, "rc", AttentionKernel("return 7;")), absl::StatusCode::kAborted,
              {"user:rc", "the kernel returned 7"});
}

TEST_F(UserKernelTest, NaNOutputFailsTheGate) {
  const std::string nan =
      "const int64_t n = a->batch * a->heads_q * a->seq_q * a->head_dim;\n"
      "for (int64_t i = 0; i < n; ++i) a->out[i] = 0x3F80;  // 1.0\n"
      "a->out[n / 2] = 0x7FC0;  // NaN";
  pb::BenchJob job = Run(Spec(pb::OP_ATTENTION, "nan", AttentionKernel(nan), {"cpu"}));
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  const pb::VariantResult* user = Result(job, "user:nan");
  ASSERT_NE(user, nullptr);
  EXPECT_FALSE(user->correct());
  EXPECT_FALSE(user->timed());
  EXPECT_EQ(user->rank(), 0);
  EXPECT_THAT(user->gate_message(), HasSubstr("NaN"));
  EXPECT_TRUE(Result(job, "cpu")->correct());
  EXPECT_EQ(Result(job, "cpu")->rank(), 1);
}

TEST_F(UserKernelTest, AKernelThatWritesNothingFailsTheGateOnThePoison) {
  pb::BenchJob job = Run(Spec(pb::OP_ATTENTION, "lazy", AttentionKernel("")));
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  EXPECT_FALSE(job.results(0).correct());
  EXPECT_THAT(job.results(0).gate_message(), HasSubstr("NaN"));
}

// The whole MoE layer: the example passes the gate beside the built-in cpu
// variant (in the examples' test above); one that forgets the routing weights
// runs, is judged against the oracle and fails the gate, unranked.
TEST_F(UserKernelTest, AWrongMoeLayerFailsTheGate) {
  std::string wrong = Example("moe_layer");
  const std::string weighted = "y[n] += a->topk_weights[t * R + r] * Dot(";
  ASSERT_NE(wrong.find(weighted), std::string::npos);
  wrong.replace(wrong.find(weighted), weighted.size(), "y[n] += Dot(");
  pb::BenchJob job = Run(Spec(pb::OP_MOE_LAYER, "unweighted", wrong, {"cpu"}));
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  const pb::VariantResult* user = Result(job, "user:unweighted");
  const pb::VariantResult* cpu = Result(job, "cpu");
  ASSERT_NE(user, nullptr);
  ASSERT_NE(cpu, nullptr);
  EXPECT_FALSE(user->correct());
  EXPECT_THAT(user->gate_message(), HasSubstr("exceeds the tolerance"));
  EXPECT_FALSE(user->timed());
  EXPECT_TRUE(cpu->correct()) << cpu->gate_message();
  // A layer kernel that never touches its workspace's bounds check still
  // has to be given one of the documented size.
  std::string small = Example("moe_layer");
  const std::string check = "if (a->workspace_bytes < a->tokens * R * I * 2) return 2;";
  ASSERT_NE(small.find(check), std::string::npos);
  small.replace(small.find(check), check.size(), "if (a->workspace_bytes != a->tokens * R * I * 2) return 2;");
  pb::BenchJob exact = Run(Spec(pb::OP_MOE_LAYER, "exact", small));
  ASSERT_EQ(exact.state(), pb::JOB_DONE) << exact.error();
  EXPECT_TRUE(exact.results(0).correct()) << exact.results(0).gate_message();
}

TEST_F(UserKernelTest, HugeSourceIsRefusedBeforeCompilingNamingItsSize) {
  pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "huge", std::string(100 << 20, ' '));
  auto job = alice_->Submit(spec);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("spec.user_kernels[0].source: 104857600 bytes"));
  EXPECT_THAT(job.status().message(), HasSubstr("limit of 1048576 bytes"));
  EXPECT_TRUE(alice_->List(pb::ListBenchRequest())->empty());  // no job was made
}

TEST_F(UserKernelTest, DisallowedFlagIsNamed) {
  for (const char* flag : {"-fplugin=/tmp/evil.so", "-o/etc/passwd", "-Xlinker", "-B/tmp"}) {
    pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "flags", Example("attention"));
    spec.mutable_user_kernels(0)->add_flags("-O3");
    spec.mutable_user_kernels(0)->add_flags(flag);
    auto job = alice_->Submit(spec);
    ASSERT_FALSE(job.ok()) << flag;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(job.status().message(), HasSubstr(absl::StrCat("spec.user_kernels[0].flags[1]: \"", flag, "\"")));
    EXPECT_THAT(job.status().message(), HasSubstr("is not an allowed cpu compile flag"));
  }
  // Allowed flags build.
  pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "flags", Example("attention"));
  for (const char* f : {"-O3", "-march=native", "-DTILE=4", "-std=c++20", "-ffast-math"}) {
    spec.mutable_user_kernels(0)->add_flags(f);
  }
  pb::BenchJob job = Run(spec);
  EXPECT_EQ(job.state(), pb::JOB_DONE) << job.error();
  EXPECT_THAT(job.results(0).build_log(), HasSubstr("-march=native"));
}

TEST_F(UserKernelTest, SubmitChecks) {
  pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "x", Example("attention"));
  spec.mutable_user_kernels(0)->set_backend("cuda");
  EXPECT_EQ(alice_->Submit(spec).status().code(), absl::StatusCode::kFailedPrecondition);
  spec = Spec(pb::OP_ATTENTION, "bad name!", Example("attention"));
  EXPECT_THAT(alice_->Submit(spec).status().message(), HasSubstr("spec.user_kernels[0].name"));
  // HIP on a server without a HIP device: refused at submit, naming the backend.
  spec = Spec(pb::OP_ATTENTION, "hip", ReadFile("kernels/api/examples/hip/attention.hip"));
  spec.mutable_user_kernels(0)->set_backend("hip");
  spec.mutable_user_kernels(0)->mutable_launch()->set_grid_x(1);
  spec.mutable_user_kernels(0)->mutable_launch()->set_block_x(128);
  absl::Status hip = alice_->Submit(spec).status();
  EXPECT_EQ(hip.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(hip.message(), HasSubstr("spec.user_kernels[0].backend: a hip kernel, but this server runs the cpu "
                                       "backend and has no HIP (AMD) device"));
  spec.mutable_user_kernels(0)->set_code_object("\x7f" "ELF");
  spec.mutable_user_kernels(0)->clear_backend();  // the server's, but a code object is hip's
  hip = alice_->Submit(spec).status();
  EXPECT_EQ(hip.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(hip.message(), HasSubstr("spec.user_kernels[0].code_object: device code for the hip backend"));
  spec = Spec(pb::OP_ATTENTION, "buffers", Example("attention"));
  spec.mutable_inputs()->set_kind(pb::INPUT_BUFFERS);
  (*spec.mutable_inputs()->mutable_buffers())["q"] = "buf-1";
  EXPECT_THAT(alice_->Submit(spec).status().message(), HasSubstr("secret seed"));
}

// A crashing and a hanging kernel of alice's run while bob calls kernels:
// every one of bob's calls succeeds and is right.
TEST_F(UserKernelTest, AnotherTenantsCallsKeepWorkingBesideACrashingKernel) {
  auto bob = Client::Connect(Options("tok-bob"));
  ASSERT_TRUE(bob.ok()) << bob.status();
  BackgroundCalls calls(bob->get(), {1, 2, 64, 64});
  pb::BenchJob crash = Run(Spec(pb::OP_ATTENTION, "crash", AttentionKernel("*(volatile int*)nullptr = 1;")));
  pb::BenchJob hang = Run(Spec(pb::OP_ATTENTION, "hang", AttentionKernel("volatile int spin = 1; while (spin) {}")));
  calls.Stop();
  EXPECT_EQ(crash.state(), pb::JOB_FAILED);
  EXPECT_THAT(crash.error(), HasSubstr("SIGSEGV"));
  EXPECT_THAT(crash.error(), HasSubstr("null pointer"));
  EXPECT_EQ(hang.state(), pb::JOB_FAILED);
  EXPECT_GT(calls.calls(), 5);
  EXPECT_EQ(calls.failures(), 0) << calls.first_failure();
  // bob does not see alice's jobs.
  EXPECT_TRUE(bob_->List(pb::ListBenchRequest())->empty());
  ExpectServerFine();
}

// The client library's side: a kernel from a file, the leaderboard.
TEST_F(UserKernelTest, ClientApiSubmitsAFileAndRanksTheLeaderboard) {
  auto k = UserKernelFromFile("kernels/api/examples/cpu/attention.cc", "", {"-O3"});
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->name(), "attention");
  pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "lb", "", {"cpu", "oracle"});
  *spec.mutable_user_kernels(0) = *k;
  pb::BenchJob job = Run(spec);
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  auto so = UserKernelFromFile("kernels/api/examples/cpu_attention.so", "prebuilt");
  ASSERT_TRUE(so.ok());
  EXPECT_FALSE(so->shared_object().empty());
  pb::LeaderboardRequest req;
  req.set_op(pb::OP_ATTENTION);
  req.set_include_builtin(true);
  auto board = alice_->Leaderboard(req);
  ASSERT_TRUE(board.ok()) << board.status();
  ASSERT_EQ(board->entries_size(), 3) << board->DebugString();
  for (int i = 0; i < board->entries_size(); ++i) {
    const pb::LeaderboardEntry& e = board->entries(i);
    EXPECT_EQ(e.rank(), i + 1);
    if (i > 0) {
      EXPECT_LE(board->entries(i - 1).time_ms(), e.time_ms());
    }
    EXPECT_EQ(e.tenant(), "alice");
    EXPECT_EQ(e.job_id(), job.id());
  }
  EXPECT_THAT(LeaderboardMarkdown(*board), HasSubstr("user:attention"));
  req.set_include_builtin(false);
  board = alice_->Leaderboard(req);
  ASSERT_TRUE(board.ok());
  ASSERT_EQ(board->entries_size(), 1);
  EXPECT_EQ(board->entries(0).kernel_name(), "attention");
  req.set_op(pb::OP_MOE_DOWN);
  board = alice_->Leaderboard(req);
  ASSERT_TRUE(board.ok());
  EXPECT_EQ(board->entries_size(), 0);
}

// The attention example with `before` run before each launch's work (which
// may return early); `prelude` goes above the entry point.
std::string WrappedAttention(const std::string& prelude, const std::string& before) {
  std::string src = Example("attention");
  const std::string entry = "int ks_user_attention_v1(";
  src.replace(src.find(entry), entry.size(), "static int FastAttention(");
  return absl::StrCat(src, "\n", prelude,
                      "\nextern \"C\" int ks_user_attention_v1(const ks_attention_args_v1* a, void* s) {\n", before,
                      "\n  return FastAttention(a, s);\n}\n");
}

// The attention example made slower by `ms` of sleep per launch.
std::string SlowAttention(int ms) {
  return WrappedAttention("#include <unistd.h>", absl::StrCat("  usleep(", ms * 1000, ");"));
}

// BenchService.Leaderboard over the persisted results: two kernels of
// different speed rank by time, a failed-gate one never appears, other
// shapes and other tenants' jobs are kept apart, bad requests are named.
TEST_F(UserKernelTest, LeaderboardRanksPassingSubmissionsBySpeed) {
  pb::BenchJob fast = Run(Spec(pb::OP_ATTENTION, "fast", Example("attention")));
  ASSERT_EQ(fast.state(), pb::JOB_DONE) << fast.error();
  pb::BenchJob slow = Run(Spec(pb::OP_ATTENTION, "slow", SlowAttention(20)));
  ASSERT_EQ(slow.state(), pb::JOB_DONE) << slow.error();
  pb::BenchJob wrong = Run(Spec(pb::OP_ATTENTION, "wrong", AttentionKernel("a->out[0] = 0x7fc0;")));
  ASSERT_EQ(wrong.state(), pb::JOB_DONE) << wrong.error();
  ASSERT_FALSE(wrong.results(0).correct());
  pb::BenchJobSpec other = Spec(pb::OP_ATTENTION, "othershape", Example("attention"));
  other.mutable_attention()->set_seq_q(32);
  ASSERT_EQ(Run(other).state(), pb::JOB_DONE);

  pb::LeaderboardRequest req;
  req.set_op(pb::OP_ATTENTION);
  *req.mutable_attention() = Spec(pb::OP_ATTENTION, "x", "").attention();
  auto board = alice_->Leaderboard(req);
  ASSERT_TRUE(board.ok()) << board.status();
  ASSERT_EQ(board->entries_size(), 2) << board->DebugString();
  const pb::LeaderboardEntry& first = board->entries(0);
  const pb::LeaderboardEntry& second = board->entries(1);
  EXPECT_EQ(first.rank(), 1);
  EXPECT_EQ(first.variant(), "user:fast");
  EXPECT_EQ(first.kernel_name(), "fast");
  EXPECT_EQ(first.job_id(), fast.id());
  EXPECT_EQ(first.source_sha256(), fast.results(0).source_sha256());
  EXPECT_EQ(first.source_sha256().size(), 64u);
  EXPECT_EQ(first.tenant(), "alice");
  EXPECT_EQ(first.runs(), 1);
  EXPECT_GT(first.finished_unix_ms(), 0);
  EXPECT_EQ(second.rank(), 2);
  EXPECT_EQ(second.variant(), "user:slow");
  EXPECT_GE(second.time_ms(), 20.0);
  EXPECT_LT(first.time_ms(), second.time_ms());
  EXPECT_THAT(first.shape_desc(), HasSubstr("Sq=64"));

  // Every shape: the other shape is its own board; the wrong kernel is nowhere.
  req.clear_attention();
  board = alice_->Leaderboard(req);
  ASSERT_TRUE(board.ok());
  EXPECT_EQ(board->entries_size(), 3);
  for (const auto& e : board->entries()) EXPECT_NE(e.variant(), "user:wrong");
  // Another tenant sees none of alice's.
  board = bob_->Leaderboard(req);
  ASSERT_TRUE(board.ok());
  EXPECT_EQ(board->entries_size(), 0);

  // Bad requests: INVALID_ARGUMENT naming the field.
  pb::LeaderboardRequest bad;
  auto st = alice_->Leaderboard(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("op: expected attention"));
  bad.set_op(pb::OP_ATTENTION);
  *bad.mutable_attention() = Spec(pb::OP_ATTENTION, "x", "").attention();
  bad.mutable_attention()->set_head_dim(0);
  st = alice_->Leaderboard(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("attention.head_dim"));
  EXPECT_THAT(st.message(), ::testing::Not(HasSubstr("spec.")));
  bad.set_op(pb::OP_MLA_DECODE);
  st = alice_->Leaderboard(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  pb::LeaderboardRequest limit;
  limit.set_op(pb::OP_ATTENTION);
  limit.set_limit(-1);
  st = alice_->Leaderboard(limit).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("limit: expected"));
}

// kernelctl submit and leaderboard, the binary as a user runs it.
TEST_F(UserKernelTest, KernelctlSubmitAndLeaderboard) {
  const std::string dir = ::testing::TempDir();
  const std::string ctl = absl::StrCat("client/kernelctl --server=127.0.0.1:", server_->port(), " --token=tok-alice ");
  const std::string out = dir + "/submit.txt", err = dir + "/submit.err";
  const int rc = system((ctl + "submit --op=attention --kernel=kernels/api/examples/cpu/attention.cc --batch=1 "
                               "--heads=2 --seq=64 --head-dim=64 --causal --baseline=cpu --kernel-flags=-O3 "
                               "--warmup=2 --iters=5 >" + out + " 2>" + err).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << ReadFile(err);
  EXPECT_THAT(ReadFile(out), HasSubstr("| user:attention | pass |"));
  EXPECT_THAT(ReadFile(err), HasSubstr("user:attention (sha256 "));
  EXPECT_THAT(ReadFile(err), HasSubstr("passed the gate"));
  ASSERT_EQ(system((ctl + "leaderboard --op=attention >" + out).c_str()), 0);
  EXPECT_THAT(ReadFile(out), HasSubstr("| 1 | user:attention | "));
  EXPECT_THAT(ReadFile(out), HasSubstr("| alice |"));
  ASSERT_EQ(system((ctl + "leaderboard --op=attention --batch=1 --heads=2 --seq=64 --head-dim=64 --causal --json >" +
                    out).c_str()),
            0);
  EXPECT_THAT(ReadFile(out), HasSubstr("\"variant\": \"user:attention\""));
  EXPECT_THAT(ReadFile(out), HasSubstr("\"kernel_name\": \"attention\""));
  ASSERT_EQ(system((ctl + "leaderboard --op=attention --heads=2 --seq=4096 --head-dim=64 >" + out).c_str()), 0);
  EXPECT_THAT(ReadFile(out), HasSubstr("no passing results"));
  const int bad_shape = system((ctl + "leaderboard --op=attention --heads=2 --seq=64 --head-dim=0 >" + out + " 2>" +
                                err).c_str());
  EXPECT_EQ(WEXITSTATUS(bad_shape), 1);
  EXPECT_THAT(ReadFile(err), HasSubstr("INVALID_ARGUMENT: attention.head_dim"));
  // A kernel that does not build: exit 1 and the compile log.
  const std::string bad = dir + "/bad.cc";
  {
    std::ofstream f(bad);
    f << "int broken( {\n";
  }
  const int bad_rc = system((ctl + "submit --op=attention --kernel=" + bad +
                             " --heads=2 --seq=64 --head-dim=64 >" + out + " 2>" + err).c_str());
  EXPECT_EQ(WEXITSTATUS(bad_rc), 1);
  EXPECT_THAT(ReadFile(err), HasSubstr("bad.cc does not compile"));
  // A flag off the allow-list: refused at submit, named.
  const int flag_rc = system((ctl + "submit --op=attention --kernel=kernels/api/examples/cpu/attention.cc "
                                    "--heads=2 --seq=64 --head-dim=64 --kernel-flags=-fplugin=x.so >" +
                              out + " 2>" + err).c_str());
  EXPECT_EQ(WEXITSTATUS(flag_rc), 1);
  EXPECT_THAT(ReadFile(err), HasSubstr("\"-fplugin=x.so\" is not an allowed cpu compile flag"));
  // PTX (by its extension) with its launch: device code, which this cpu server refuses at submit.
  const std::string ptx = dir + "/k.ptx";
  {
    std::ofstream f(ptx);
    f << ".version 9.0\n.target sm_90a\n.address_size 64\n.visible .entry ks_user_attention_v1_kernel(\n"
         "  .param .align 8 .b8 p[200]\n)\n{\n  ret;\n}\n";
  }
  const int ptx_rc = system((ctl + "submit --op=attention --kernel=" + ptx +
                             " --heads=2 --seq=64 --head-dim=64 --grid=1 --block=64 >" + out + " 2>" + err).c_str());
  EXPECT_EQ(WEXITSTATUS(ptx_rc), 1);
  EXPECT_THAT(ReadFile(err), HasSubstr("spec.user_kernels[0].ptx: device code for the cuda backend, but this server "
                                       "runs the cpu backend"));
  // A HIP source (by its extension) goes to the hip backend: this cpu server has no HIP device.
  const int hip_rc = system((ctl + "submit --op=attention --kernel=kernels/api/examples/hip/attention.hip"
                                   " --heads=2 --seq=64 --head-dim=64 --grid=1 --block=128 >" + out + " 2>" + err).c_str());
  EXPECT_EQ(WEXITSTATUS(hip_rc), 1);
  EXPECT_THAT(ReadFile(err), HasSubstr("FAILED_PRECONDITION: "));
  EXPECT_THAT(ReadFile(err), HasSubstr("spec.user_kernels[0].backend: a hip kernel, but this server runs the cpu "
                                       "backend and has no HIP (AMD) device"));
  // The whole MoE layer through kernelctl: the example passes the gate beside cpu.
  const int layer_rc = system((ctl + "submit --op=moe_layer --kernel=kernels/api/examples/cpu/moe_layer.cc "
                                     "--tokens=4 --experts=4 --top-k=2 --hidden=64 --inter=64 --out-dim=64 "
                                     "--baseline=cpu --warmup=1 --iters=2 >" + out + " 2>" + err).c_str());
  EXPECT_EQ(WEXITSTATUS(layer_rc), 0) << ReadFile(err) << ReadFile(out);
  EXPECT_THAT(ReadFile(out), HasSubstr("| user:moe_layer | pass |"));
  EXPECT_THAT(ReadFile(err), HasSubstr("user:moe_layer (sha256 "));
}

// Issue 18 item 6 with another tenant working beside it: each bad input of
// alice's ends in its own status (the code and the message checked) while
// bob's kernel calls run without pause, bob's benchmark jobs run between
// alice's, and bob's buffer and KV pool on the server keep their bytes and
// the pool its stats. Nothing of bob's fails or changes.
TEST_F(UserKernelTest, EveryBadInputFailsAloneWhileAnotherTenantWorks) {
  auto bob = Client::Connect(Options("tok-bob"));
  ASSERT_TRUE(bob.ok()) << bob.status();
  auto kept = KeptData::Store(bob->get());
  ASSERT_TRUE(kept.ok()) << kept.status();
  BackgroundCalls calls(bob->get(), {1, 2, 64, 64});
  std::atomic<bool> done{false};
  std::atomic<int> jobs{0}, job_failures{0};
  std::string first_failure;  // written by the job thread only, read after join
  std::thread benches([&] {
    pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "bob", Example("attention"), {"cpu"});
    spec.clear_user_kernels();
    while (!done.load()) {
      pb::BenchJob job = Run(spec, bob_.get());
      ++jobs;
      const bool ok = job.state() == pb::JOB_DONE && job.results_size() == 1 && job.results(0).correct() &&
                      job.results(0).timed();
      if (!ok && job_failures++ == 0) first_failure = job.DebugString();
    }
  });

  struct Bad {
    std::string what;
    pb::BenchJobSpec spec;
    bool at_submit;  // refused by Submit, no job made
    absl::StatusCode code;
    std::vector<std::string> parts;
  };
  std::vector<Bad> bad = {
      {"does not compile", Spec(pb::OP_ATTENTION, "nocompile", "int f( {\n"), false,
       absl::StatusCode::kInvalidArgument, {"user:nocompile: nocompile.cc does not compile", "compile log"}},
      {"no entry point",
       Spec(pb::OP_ATTENTION, "noentry",
            "#include \"kernels/api/user_kernel_abi.h\"\nextern \"C\" { KS_USER_ABI_DEFINE_VERSION(); }\n"),
       false, absl::StatusCode::kInvalidArgument, {"user:noentry", "exports no ks_user_attention_v1"}},
      {"wrong ABI version",
       Spec(pb::OP_ATTENTION, "abi99", AttentionKernel("", "const int32_t ks_user_abi_version = 99;")), false,
       absl::StatusCode::kInvalidArgument, {"user:abi99", "ABI version 99", "this server speaks version 1"}},
      {"writes outside its output",
       Spec(pb::OP_ATTENTION, "oob",
            AttentionKernel("const int64_t n = a->batch * a->heads_q * a->seq_q * a->head_dim;\n"
                            "volatile uint16_t* o = a->out; o[n + 7] = 1;")),
       false, absl::StatusCode::kAborted, {"user:oob", "SIGSEGV", "wrote outside its output", "past its end"}},
      {"never returns",
       Spec(pb::OP_ATTENTION, "forever", AttentionKernel("volatile int spin = 1; while (spin) {}")), false,
       absl::StatusCode::kDeadlineExceeded, {"user:forever", "did not finish within 3 s", "killed with SIGKILL"}},
      {"100 MB source", Spec(pb::OP_ATTENTION, "huge", std::string(100 << 20, ' ')), true,
       absl::StatusCode::kInvalidArgument,
       {"spec.user_kernels[0].source: 104857600 bytes, larger than the limit of 1048576 bytes"}},
      {"disallowed flag", Spec(pb::OP_ATTENTION, "flag", Example("attention")), true,
       absl::StatusCode::kInvalidArgument,
       {"spec.user_kernels[0].flags[0]: \"-fplugin=/tmp/evil.so\" is not an allowed cpu compile flag"}},
  };
  bad.back().spec.mutable_user_kernels(0)->add_flags("-fplugin=/tmp/evil.so");
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    if (b.at_submit) {
      const absl::Status st = alice_->Submit(b.spec).status();
      EXPECT_EQ(st.code(), b.code) << st;
      for (const std::string& p : b.parts) EXPECT_THAT(st.message(), HasSubstr(p));
      continue;
    }
    pb::BenchJob job = Run(b.spec);
    EXPECT_EQ(job.state(), pb::JOB_FAILED) << job.DebugString();
    EXPECT_EQ(job.error_code(), static_cast<int>(b.code)) << job.error();
    for (const std::string& p : b.parts) EXPECT_THAT(job.error(), HasSubstr(p));
  }
  // Returns NaN: the job is DONE, the kernel failed the gate, unranked, and
  // the built-in variant beside it passed and was ranked.
  pb::BenchJob nan = Run(Spec(pb::OP_ATTENTION, "nan",
                              AttentionKernel("const int64_t n = a->batch * a->heads_q * a->seq_q * a->head_dim;\n"
                                              "for (int64_t i = 0; i < n; ++i) a->out[i] = 0x7FC0;"),
                              {"cpu"}));
  ASSERT_EQ(nan.state(), pb::JOB_DONE) << nan.error();
  const pb::VariantResult* user = Result(nan, "user:nan");
  ASSERT_NE(user, nullptr);
  EXPECT_FALSE(user->correct());
  EXPECT_EQ(user->rank(), 0);
  EXPECT_THAT(user->gate_message(), HasSubstr("8192 of 8192 outputs are NaN or Inf"));
  EXPECT_EQ(Result(nan, "cpu")->rank(), 1);

  // Let bob's job thread finish one more job after alice's last.
  const int jobs_before = jobs.load();
  const absl::Time t0 = absl::Now();
  while (jobs.load() < jobs_before + 1 && absl::Now() - t0 < absl::Seconds(60)) absl::SleepFor(absl::Milliseconds(20));
  done = true;
  calls.Stop();
  benches.join();
  EXPECT_GT(calls.calls(), 10);
  EXPECT_EQ(calls.failures(), 0) << calls.first_failure();
  EXPECT_GE(jobs.load(), 2);
  EXPECT_EQ(job_failures.load(), 0) << first_failure;
  const absl::Status unchanged = (*kept)->Unchanged();
  EXPECT_TRUE(unchanged.ok()) << unchanged;
  // alice's jobs are hers: bob lists only his own.
  auto listed = bob_->List(pb::ListBenchRequest());
  ASSERT_TRUE(listed.ok());
  for (const pb::BenchJob& j : *listed) EXPECT_EQ(j.spec().name(), "bob");
}

// Item 4: the job's timing method applies to user kernels as to the
// built-in variants beside them (cpu here; graph is refused on cpu for
// every variant at submit).
class TimingMethodsTest : public UserKernelTest {
  void Customize(ServerOptions* o) override {
    o->bench.min_warmin_s = 0.05;
    o->bench.min_window_s = 0.2;
  }
};

TEST_F(TimingMethodsTest, PassesTimeUserKernelsInTurnWithTheBuiltInVariants) {
  pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "attention", Example("attention"), {"cpu"});
  spec.mutable_method()->set_method(pb::METHOD_PASSES);
  spec.mutable_method()->set_passes(3);
  pb::BenchJob job = Run(spec);
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  for (const char* v : {"user:attention", "cpu"}) {
    const pb::VariantResult* r = Result(job, v);
    ASSERT_NE(r, nullptr) << v;
    EXPECT_TRUE(r->timed()) << v;
    EXPECT_EQ(r->pass_ms_size(), 3) << v;
    EXPECT_EQ(r->time().count(), 15) << v;  // 3 passes x 5 launches
    EXPECT_THAT(r->method(), HasSubstr("passes (3 x 5)")) << v;
    EXPECT_GE(r->rank(), 1) << v;
  }
  EXPECT_THAT(Result(job, "user:attention")->method(), HasSubstr("worker process"));
  // The same through kernelctl's method flags, with the flush.
  const std::string out = ::testing::TempDir() + "/passes.txt";
  const int rc = system(absl::StrCat("client/kernelctl --server=127.0.0.1:", server_->port(),
                                     " --token=tok-alice submit --op=attention "
                                     "--kernel=kernels/api/examples/cpu/attention.cc --heads=2 --seq=64 --head-dim=64 "
                                     "--causal --baseline=cpu --method=passes --passes=2 --l2-flush --warmup=1 "
                                     "--iters=3 >",
                                     out, " 2>&1")
                            .c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << ReadFile(out);
  EXPECT_THAT(ReadFile(out), HasSubstr("| user:attention | pass |"));
  EXPECT_THAT(ReadFile(out), HasSubstr("passes (2 x 3)"));
  EXPECT_THAT(ReadFile(out), HasSubstr("l2_flush: each user kernel's worker copies 64 MiB"));
}

TEST_F(TimingMethodsTest, SustainedRunsTheWindowInTheWorker) {
  pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "attention", Example("attention"), {"cpu"});
  spec.mutable_method()->set_method(pb::METHOD_SUSTAINED);
  spec.mutable_method()->set_warmin_s(0.05);
  spec.mutable_method()->set_window_s(0.3);
  pb::BenchJob job = Run(spec);
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  const pb::VariantResult* user = Result(job, "user:attention");
  const pb::VariantResult* cpu = Result(job, "cpu");
  ASSERT_NE(user, nullptr);
  ASSERT_NE(cpu, nullptr);
  EXPECT_TRUE(user->timed());
  EXPECT_THAT(user->method(), HasSubstr("sustained"));
  EXPECT_THAT(user->method(), HasSubstr("worker process"));
  // A window of 0.3 s holds many launches of this small kernel.
  EXPECT_GT(user->time().count(), 3);
  EXPECT_GT(user->time().value_ms(), 0);
  EXPECT_LT(user->time().value_ms() * static_cast<double>(user->time().count()), 2000);
  // The clocks were sampled around the worker's window (none on cpu: a note says why).
  EXPECT_FALSE(user->clocks().note().empty());
  EXPECT_THAT(absl::StrJoin(job.notes(), "\n"), HasSubstr("sustained: user kernels run their warm-in and window"));
  EXPECT_TRUE(cpu->timed());
}

// With l2_flush the worker flushes before each launch with buffers of its
// own, as large as the built-in variants' (64 MiB each on cpu): a kernel
// that sees its process hold less than those after its first launch returns
// 9, so it fails without the flush and passes with it.
TEST_F(TimingMethodsTest, L2FlushHappensInTheUserKernelsWorker) {
  const std::string needs_flush = WrappedAttention(
      "#include <cstdio>\n#include <unistd.h>\nstatic int calls = 0;\n"
      "static long RssMiB() {\n  long size = 0, rss = 0;\n  FILE* f = fopen(\"/proc/self/statm\", \"r\");\n"
      "  if (f != nullptr) { if (fscanf(f, \"%ld %ld\", &size, &rss) != 2) rss = 0; fclose(f); }\n"
      "  return rss * sysconf(_SC_PAGESIZE) / (1 << 20);\n}",
      "  if (++calls > 1 && RssMiB() < 120) return 9;");
  pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "flushed", needs_flush, {"cpu"});
  spec.mutable_method()->set_iters(12);
  ExpectFails(spec, absl::StatusCode::kAborted, {"user:flushed", "the kernel returned 9"});
  spec.mutable_method()->set_l2_flush(true);
  pb::BenchJob job = Run(spec);
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  const pb::VariantResult* user = Result(job, "user:flushed");
  ASSERT_NE(user, nullptr);
  EXPECT_TRUE(user->correct()) << user->gate_message();
  EXPECT_TRUE(user->timed());
  EXPECT_EQ(user->time().count(), 12);
  EXPECT_TRUE(Result(job, "cpu")->timed());
  EXPECT_THAT(absl::StrJoin(job.notes(), "\n"),
              HasSubstr("l2_flush: each user kernel's worker copies 64 MiB between two buffers of its own"));
}

TEST_F(TimingMethodsTest, GraphIsRefusedOnCpuForUserKernelsAsForBuiltInOnes) {
  pb::BenchJobSpec spec = Spec(pb::OP_ATTENTION, "attention", Example("attention"));
  spec.mutable_method()->set_method(pb::METHOD_GRAPH);
  const absl::Status st = alice_->Submit(spec).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("spec.method: method graph replays device graphs"));
  EXPECT_THAT(st.message(), HasSubstr("backend cpu of this server has none"));
}

// Item 2's sandbox limits through the real server: a compile that runs
// forever is killed at --user_kernel_compile_timeout_s, a build whose object
// outgrows the output limit (RLIMIT_FSIZE, the object size limit) fails
// with the compiler's log, and a kernel cannot reach the network, not even
// the server's own port on loopback, from its worker.
class SandboxLimitsTest : public UserKernelTest {
  void Customize(ServerOptions* o) override {
    o->bench.user_kernels.compile_timeout_s = 3;
    o->bench.user_kernels.max_object_bytes = 4 << 20;
  }
};

TEST_F(SandboxLimitsTest, ACompileThatNeverEndsIsKilledAtItsTimeout) {
  // Constant evaluation far past what the compiler does in 3 s: 400
  // constants of 7 * 10^5 loop steps each (~0.5 s apiece on the dev VM).
  // One constant of 4 * 10^10 steps is not enough: g++ stops it at
  // -fconstexpr-ops-limit (2^25 operations per evaluation) with a compile
  // error, within 3 s on an idle machine. Each of these stays under that
  // limit and -fconstexpr-loop-limit; different arguments keep g++ from
  // reusing a result.
  std::string forever =
      "constexpr long Spin(long k) {\n  long s = 0;\n  for (long i = 0; i < 700; ++i)\n"
      "    for (long j = 0; j < 1000; ++j) s += (i ^ j) + k;\n  return s;\n}\n";
  for (int k = 0; k < 400; ++k) absl::StrAppend(&forever, "constexpr long kSpin", k, " = Spin(", k, ");\n");
  absl::StrAppend(&forever, "long Get() { return kSpin0 + kSpin399; }\n");
  const absl::Time t0 = absl::Now();
  ExpectFails(Spec(pb::OP_ATTENTION, "slowbuild", forever), absl::StatusCode::kDeadlineExceeded,
              {"slowbuild.cc: the compiler ran past 3 s (--user_kernel_compile_timeout_s) and was killed"});
  EXPECT_LT(absl::Now() - t0, absl::Seconds(60));
}

TEST_F(SandboxLimitsTest, AnObjectPastTheOutputLimitFailsTheBuild) {
  ExpectFails(Spec(pb::OP_ATTENTION, "bigobject", "char big[8 << 20] = {1};\n"), absl::StatusCode::kInvalidArgument,
              {"bigobject.cc does not compile", "compile log"});
}

TEST_F(SandboxLimitsTest, AKernelCannotReachTheNetwork) {
  const std::string probe = WrappedAttention(
      "#include <arpa/inet.h>\n#include <netinet/in.h>\n#include <sys/socket.h>\n#include <unistd.h>",
      absl::StrCat("  int fd = socket(AF_INET, SOCK_STREAM, 0);\n  sockaddr_in to{};\n  to.sin_family = AF_INET;\n"
                   "  to.sin_port = htons(",
                   server_->port(),
                   ");\n  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);\n"
                   "  const bool reached = fd >= 0 && connect(fd, (sockaddr*)&to, sizeof(to)) == 0;\n"
                   "  if (fd >= 0) close(fd);\n  if (reached) return 42;"));
  pb::BenchJob job = Run(Spec(pb::OP_ATTENTION, "netprobe", probe));
  const std::string notes = absl::StrJoin(job.notes(), "\n");
  if (!absl::StrContains(notes, "worker network: isolated")) {
    // The probe is real: sharing the host's network, it reaches the server.
    EXPECT_EQ(job.state(), pb::JOB_FAILED);
    EXPECT_THAT(job.error(), HasSubstr("the kernel returned 42"));
    GTEST_SKIP() << "no network namespace for the worker here (" << notes << "): the kernel shares the host's";
  }
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  EXPECT_TRUE(job.results(0).correct()) << job.results(0).gate_message();
}

// Item 3's quotas: a worker's copy of the inputs and output counts against
// the tenant's max_device_memory like the job's own tensors. alice may hold
// 100 KiB: her built-in job (64 KiB) runs, the same job with her kernel
// (128 KiB with its worker's copies) fails naming the limit, and bob, with
// no limit, runs it.
class TenantQuotaTest : public UserKernelTest {
  void Customize(ServerOptions* o) override {
    const std::string path = absl::StrCat(::testing::TempDir(), "/uk_limits_", getpid(), "_", counter_);
    std::ofstream(path) << "alice max_device_memory=100KiB\n";
    o->security.limits_file = path;
  }
};

TEST_F(TenantQuotaTest, AWorkersCopiesCountAgainstTheTenantsDeviceMemory) {
  pb::BenchJobSpec builtin = Spec(pb::OP_ATTENTION, "builtin", Example("attention"), {"cpu"});
  builtin.clear_user_kernels();
  pb::BenchJob fits = Run(builtin);
  EXPECT_EQ(fits.state(), pb::JOB_DONE) << fits.error();
  const pb::BenchJobSpec with_kernel = Spec(pb::OP_ATTENTION, "attention", Example("attention"), {"cpu"});
  pb::BenchJob over = Run(with_kernel);
  EXPECT_EQ(over.state(), pb::JOB_FAILED) << over.DebugString();
  EXPECT_EQ(over.error_code(), static_cast<int>(absl::StatusCode::kResourceExhausted)) << over.error();
  EXPECT_THAT(over.error(), HasSubstr("user kernel workers' copies"));
  EXPECT_THAT(over.error(), HasSubstr("max_device_memory"));
  pb::BenchJob bobs = Run(with_kernel, bob_.get());
  EXPECT_EQ(bobs.state(), pb::JOB_DONE) << bobs.error();
}

// Item 4's persistence: a user kernel's result (its source hash, build log,
// gate and time) is in the job store, so a server restarted on the same data
// dir returns it and ranks it on the leaderboard.
class RestartTest : public UserKernelTest {
  void Customize(ServerOptions* o) override {
    o->data_dir = absl::StrCat(o->bench.user_kernels.work_dir, "/data");
    ASSERT_EQ(system(absl::StrCat("mkdir -p ", o->data_dir).c_str()), 0);
  }
};

TEST_F(RestartTest, ResultsAndTheLeaderboardSurviveARestart) {
  pb::BenchJob job = Run(Spec(pb::OP_ATTENTION, "kept", Example("attention"), {"cpu"}));
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  const pb::VariantResult* before = Result(job, "user:kept");
  ASSERT_NE(before, nullptr);
  const pb::VariantResult kept = *before;
  alice_.reset();
  bob_.reset();
  server_.reset();
  StartServer();
  auto again = alice_->Get(job.id());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->state(), pb::JOB_DONE);
  const pb::VariantResult* after = Result(*again, "user:kept");
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->source_sha256(), security::Sha256Hex(Example("attention")));
  EXPECT_EQ(after->build_log(), kept.build_log());
  EXPECT_TRUE(after->correct());
  EXPECT_EQ(after->time().value_ms(), kept.time().value_ms());
  EXPECT_EQ(after->rank(), kept.rank());
  pb::LeaderboardRequest req;
  req.set_op(pb::OP_ATTENTION);
  auto board = alice_->Leaderboard(req);
  ASSERT_TRUE(board.ok()) << board.status();
  ASSERT_EQ(board->entries_size(), 1);
  EXPECT_EQ(board->entries(0).job_id(), job.id());
  EXPECT_EQ(board->entries(0).source_sha256(), kept.source_sha256());
}

class NoToolchainTest : public UserKernelTest {
  void Customize(ServerOptions* o) override { o->bench.user_kernels.cxx = "/nonexistent/g++"; }
};

TEST_F(NoToolchainTest, JobFailsNamingTheMissingCompiler) {
  ExpectFails(Spec(pb::OP_ATTENTION, "attention", Example("attention")), absl::StatusCode::kFailedPrecondition,
              {"no C++ compiler on this node", "--user_kernel_cxx=/nonexistent/g++ is not an executable"});
}

class BrokenWorkerTest : public UserKernelTest {
  void Customize(ServerOptions* o) override { o->bench.user_kernels.worker = "/bin/false"; }
};

TEST_F(BrokenWorkerTest, AWorkerThatDiesAtStartFailsTheJobSayingHow) {
  ExpectFails(Spec(pb::OP_ATTENTION, "attention", Example("attention")), absl::StatusCode::kAborted,
              {"user:attention", "worker process ended (exit code 1)"});
}

// Device health after a worker fault, on two simulated cpu devices: the
// operator's probe command fails for device 1 only.
class DeviceHealthTest : public UserKernelTest {
 protected:
  void Customize(ServerOptions* o) override {
    o->cpu_devices = 2;
    o->metrics_listen = "127.0.0.1:0";
    o->bench.user_kernels.health_probe = "echo probing device $KERNELSERVE_DEVICE; test \"$KERNELSERVE_DEVICE\" != 1";
    o->bench.user_kernels.reprobe_interval_s = 0;
  }

  // Device 1 abort()s a user kernel's worker, so that the probe after the
  // fault runs (and, with the probe command above, fails).
  void CrashOn(int device) {
    pb::BenchJobSpec crash = Spec(pb::OP_ATTENTION, "aborts", AttentionKernel("abort();"));
    crash.set_device(device);
    pb::BenchJob crashed = Run(crash);
    EXPECT_EQ(crashed.state(), pb::JOB_FAILED);
    EXPECT_THAT(crashed.error(), HasSubstr("SIGABRT"));
  }

  std::unique_ptr<Client> Admin() {
    auto client = Client::Connect(Options("tok-ops"));
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // A job pinned to `device` runs there.
  void ExpectPinnedJobRuns(int device) {
    pb::BenchJobSpec pinned = Spec(pb::OP_ATTENTION, "attention", Example("attention"), {"cpu"});
    pinned.set_device(device);
    pb::BenchJob job = Run(pinned);
    EXPECT_EQ(job.state(), pb::JOB_DONE) << job.error();
    EXPECT_EQ(job.device(), device);
  }

  pb::Device Device(int index) {
    ClientOptions c = Options("tok-alice");
    auto client = Client::Connect(c);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return {};
    auto devices = (*client)->Devices();
    EXPECT_TRUE(devices.ok()) << devices.status();
    if (!devices.ok() || index >= devices->devices_size()) return {};
    return devices->devices(index);
  }

  std::string Metrics() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->metrics_port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string body;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
      if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
        char buf[4096];
        for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) body.append(buf, static_cast<size_t>(n));
      }
    }
    close(fd);
    return body;
  }

  bool HasNote(const pb::BenchJob& job, const std::string& part) {
    for (const std::string& n : job.notes()) {
      if (absl::StrContains(n, part)) return true;
    }
    return false;
  }
};

TEST_F(DeviceHealthTest, AFailedProbeMarksOnlyThatDeviceUnhealthy) {
  pb::BenchJobSpec crash = Spec(pb::OP_ATTENTION, "aborts", AttentionKernel("abort();"));
  crash.set_device(1);
  pb::BenchJob crashed = Run(crash);
  EXPECT_EQ(crashed.state(), pb::JOB_FAILED);
  EXPECT_EQ(crashed.error_code(), static_cast<int>(absl::StatusCode::kAborted)) << crashed.error();
  EXPECT_THAT(crashed.error(), HasSubstr("SIGABRT"));
  EXPECT_TRUE(HasNote(crashed, "device 1 failed its health probe after the worker's signal")) << crashed.DebugString();

  const pb::Device sick = Device(1);
  EXPECT_EQ(sick.state(), pb::UNHEALTHY);
  EXPECT_THAT(sick.state_reason(), HasSubstr("failed its health probe after a user kernel's worker fault"));
  EXPECT_THAT(sick.state_reason(), HasSubstr("exit code 1"));
  EXPECT_THAT(sick.state_reason(), HasSubstr("probing device 1"));
  EXPECT_THAT(sick.health_probe(), HasSubstr("failed at "));
  EXPECT_EQ(Device(0).state(), pb::HEALTHY);
  EXPECT_EQ(Device(0).health_probe(), "");
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("kernelserve_device_healthy{device=\"1\"} 0"));
  EXPECT_THAT(metrics, HasSubstr("kernelserve_device_healthy{device=\"0\"} 1"));

  // A job placed on the sick device is refused, naming it and why.
  pb::BenchJobSpec pinned = Spec(pb::OP_ATTENTION, "attention", Example("attention"));
  pinned.set_device(1);
  auto refused = alice_->Submit(pinned);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("spec.device: device 1 is unhealthy: failed its health probe"));

  // The other device keeps serving: a job left to `any` and one pinned to 0.
  pb::BenchJob any = Run(Spec(pb::OP_ATTENTION, "attention", Example("attention"), {"cpu"}), bob_.get());
  EXPECT_EQ(any.state(), pb::JOB_DONE) << any.error();
  EXPECT_EQ(any.device(), 0);
  pb::BenchJobSpec on0 = Spec(pb::OP_ATTENTION, "attention", Example("attention"));
  on0.set_device(0);
  pb::BenchJob ran = Run(on0);
  EXPECT_EQ(ran.state(), pb::JOB_DONE) << ran.error();

  // kernelctl devices shows it too.
  const std::string out = ::testing::TempDir() + "/devices.txt";
  ASSERT_EQ(system(absl::StrCat("client/kernelctl --server=127.0.0.1:", server_->port(),
                                " --token=tok-alice devices >", out).c_str()),
            0);
  EXPECT_THAT(ReadFile(out), HasSubstr("UNHEALTHY (failed its health probe"));
  EXPECT_THAT(ReadFile(out), HasSubstr("health probe: failed at "));
}

TEST_F(DeviceHealthTest, ACrashOnAHealthyDeviceLeavesItHealthy) {
  pb::BenchJobSpec crash = Spec(pb::OP_ATTENTION, "aborts", AttentionKernel("abort();"));
  crash.set_device(0);
  pb::BenchJob crashed = Run(crash);
  EXPECT_EQ(crashed.state(), pb::JOB_FAILED);
  EXPECT_THAT(crashed.error(), HasSubstr("SIGABRT"));
  EXPECT_TRUE(HasNote(crashed, "device 0 passed its health probe after the worker's signal")) << crashed.DebugString();
  const pb::Device d = Device(0);
  EXPECT_EQ(d.state(), pb::HEALTHY);
  EXPECT_THAT(d.health_probe(), HasSubstr("passed at "));
  EXPECT_THAT(d.health_probe(), HasSubstr("SIGABRT"));
  pb::BenchJobSpec again = Spec(pb::OP_ATTENTION, "attention", Example("attention"));
  again.set_device(0);
  EXPECT_EQ(Run(again).state(), pb::JOB_DONE);
  // An ordinary failure (a non-zero return) needs no probe.
  pb::BenchJobSpec rc = Spec(pb::OP_ATTENTION, "returns7", AttentionKernel("return 7;"));
  rc.set_device(1);
  pb::BenchJob failed = Run(rc);
  EXPECT_EQ(failed.state(), pb::JOB_FAILED);
  EXPECT_FALSE(HasNote(failed, "health probe"));
  EXPECT_EQ(Device(1).state(), pb::HEALTHY);
}

// Recovery: the probe command fails for device 1 until the test creates a
// file (the operator repaired it), then an admin's re-probe, or the periodic
// one, returns the device to service.
class DeviceRecoveryTest : public DeviceHealthTest {
 protected:
  void Customize(ServerOptions* o) override {
    DeviceHealthTest::Customize(o);
    repaired_ = o->bench.user_kernels.work_dir + "/device1_repaired";
    o->bench.user_kernels.health_probe = absl::StrCat(
        "echo probing device $KERNELSERVE_DEVICE; test \"$KERNELSERVE_DEVICE\" != 1 || test -e ", repaired_);
    o->bench.user_kernels.reprobe_interval_s = ReprobeInterval();
  }
  virtual double ReprobeInterval() const { return 0; }
  void Repair(bool repaired) {
    const std::string cmd = (repaired ? "touch " : "rm -f ") + repaired_;
    ASSERT_EQ(system(cmd.c_str()), 0);
  }

  std::string repaired_;
};

TEST_F(DeviceRecoveryTest, AnAdminsReprobeReturnsTheDeviceToService) {
  CrashOn(1);
  ASSERT_EQ(Device(1).state(), pb::UNHEALTHY);
  std::unique_ptr<Client> ops = Admin();
  ASSERT_NE(ops, nullptr);

  // Admin only, like Drain; a bad index names the field.
  auto alice = Client::Connect(Options("tok-alice"));
  ASSERT_TRUE(alice.ok());
  absl::Status denied = (*alice)->ProbeDevice(1).status();
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied) << denied;
  EXPECT_THAT(denied.message(), HasSubstr("DeviceService.Probe is an admin-only call"));
  for (int bad : {2, -1}) {
    absl::Status st = ops->ProbeDevice(bad).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("index: expected a device index in [0, 2), got ", bad)));
  }
  EXPECT_EQ(Device(1).state(), pb::UNHEALTHY);

  // Not repaired yet: the re-probe fails and says so; the device stays out.
  auto failed = ops->ProbeDevice(1);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_FALSE(failed->passed());
  EXPECT_THAT(failed->verdict(), HasSubstr("failed at "));
  EXPECT_THAT(failed->verdict(), HasSubstr("re-probe requested by tenant \"ops\""));
  EXPECT_THAT(failed->verdict(), HasSubstr("exit code 1"));
  EXPECT_EQ(failed->device().state(), pb::UNHEALTHY);
  EXPECT_THAT(failed->device().state_reason(),
              HasSubstr("failed its health probe (re-probe requested by tenant \"ops\")"));
  EXPECT_THAT(Metrics(), HasSubstr("kernelserve_device_healthy{device=\"1\"} 0"));
  pb::BenchJobSpec pinned = Spec(pb::OP_ATTENTION, "attention", Example("attention"));
  pinned.set_device(1);
  EXPECT_EQ(alice_->Submit(pinned).status().code(), absl::StatusCode::kFailedPrecondition);

  // Repaired: kernelctl probe passes, and the device is back.
  Repair(true);
  const std::string out = ::testing::TempDir() + "/probe.txt", err = ::testing::TempDir() + "/probe.err";
  const std::string ctl = absl::StrCat("client/kernelctl --server=127.0.0.1:", server_->port(), " --token=tok-ops ");
  const int rc = system((ctl + "probe --device=1 >" + out + " 2>" + err).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << ReadFile(out) << ReadFile(err);
  EXPECT_THAT(ReadFile(out), HasSubstr("probe of device 1: passed at "));
  EXPECT_THAT(ReadFile(out), HasSubstr("HEALTHY"));
  const pb::Device back = Device(1);
  EXPECT_EQ(back.state(), pb::HEALTHY) << back.state_reason();
  EXPECT_EQ(back.state_reason(), "");
  EXPECT_THAT(back.health_probe(), HasSubstr("passed at "));
  EXPECT_THAT(Metrics(), HasSubstr("kernelserve_device_healthy{device=\"1\"} 1"));
  ExpectPinnedJobRuns(1);

  // A healthy device may be probed: the verdict, nothing else changes.
  auto healthy = ops->ProbeDevice(0);
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_TRUE(healthy->passed());
  EXPECT_EQ(healthy->device().state(), pb::HEALTHY);
  EXPECT_EQ(healthy->device().index(), 0);
  // ... and one that fails its probe is taken out of service.
  Repair(false);
  auto broke = ops->ProbeDevice(1);
  ASSERT_TRUE(broke.ok());
  EXPECT_FALSE(broke->passed());
  EXPECT_EQ(Device(1).state(), pb::UNHEALTHY);
  const int fail_rc = system((ctl + "probe --device=1 >" + out + " 2>" + err).c_str());
  EXPECT_EQ(WEXITSTATUS(fail_rc), 1);
  EXPECT_THAT(ReadFile(out), HasSubstr("probe of device 1: failed at "));
  const int bad_rc = system((ctl + "probe --device=9 >" + out + " 2>" + err).c_str());
  EXPECT_EQ(WEXITSTATUS(bad_rc), 1);
  EXPECT_THAT(ReadFile(err), HasSubstr("INVALID_ARGUMENT: index: expected a device index in [0, 2), got 9"));
}

class PeriodicReprobeTest : public DeviceRecoveryTest {
  double ReprobeInterval() const override { return 0.3; }
};

TEST_F(PeriodicReprobeTest, ARepairedDeviceReturnsByItself) {
  CrashOn(1);
  // Not repaired: every periodic re-probe fails; the device stays out.
  absl::SleepFor(absl::Seconds(1));
  pb::Device sick = Device(1);
  EXPECT_EQ(sick.state(), pb::UNHEALTHY);
  EXPECT_THAT(sick.health_probe(), HasSubstr("periodic re-probe, every 0.3 s (--user_kernel_reprobe_interval_s)"));
  EXPECT_THAT(sick.state_reason(), HasSubstr("failed its health probe (periodic re-probe"));
  Repair(true);
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (Device(1).state() != pb::HEALTHY && absl::Now() < until) absl::SleepFor(absl::Milliseconds(100));
  const pb::Device back = Device(1);
  ASSERT_EQ(back.state(), pb::HEALTHY) << back.state_reason();
  EXPECT_THAT(back.health_probe(), HasSubstr("passed at "));
  EXPECT_THAT(back.health_probe(), HasSubstr("periodic re-probe"));
  EXPECT_THAT(Metrics(), HasSubstr("kernelserve_device_healthy{device=\"1\"} 1"));
  ExpectPinnedJobRuns(1);
  // A healthy device is not probed periodically.
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(Device(0).health_probe(), "");
}

}  // namespace
}  // namespace kernelserve
