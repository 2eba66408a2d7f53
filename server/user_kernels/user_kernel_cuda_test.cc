// Users' CUDA kernels. Without a GPU, the examples are built with the
// node's nvcc exactly as the server builds a submission (builder.h), and
// the rest skips, saying so. On a GPU (the H200): a real KernelServer on the
// cuda backend on a real port runs every example beside the built-in "cuda"
// variant, and a kernel that faults on the device, one that hangs and one
// that writes past its output each fail their job while the server's own
// kernel calls keep working. Prebuilt device code: the examples' cubins and
// PTX (//kernels/api/examples:cuda_device_code, built by nvcc) pass the
// submit checks here; on a GPU they pass the gate beside "cuda", and a
// faulting cubin and a block too large for its kernel fail their jobs.
#include <cuda_runtime.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/bench_client.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/numerics/test_inputs.h"
#include "server/server.h"
#include "server/user_kernels/background_calls.h"
#include "server/user_kernels/builder.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;

const char* const kOps[] = {"attention", "fp8_attention", "mla_decode", "moe_gateup", "moe_down", "moe_layer"};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Example(const std::string& op) { return ReadFile("kernels/api/examples/cuda/" + op + ".cu"); }

// The example's cubin or PTX, as nvcc built it for the test.
std::string DeviceCode(const std::string& op, bool cubin) {
  return ReadFile(absl::StrCat("kernels/api/examples/cuda_", op, cubin ? ".cubin" : ".ptx"));
}

pb::BenchOp OpOf(const std::string& op) {
  if (op == "attention") return pb::OP_ATTENTION;
  if (op == "fp8_attention") return pb::OP_FP8_ATTENTION;
  if (op == "mla_decode") return pb::OP_MLA_DECODE;
  if (op == "moe_layer") return pb::OP_MOE_LAYER;
  return op == "moe_gateup" ? pb::OP_MOE_GATEUP : pb::OP_MOE_DOWN;
}

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

pb::UserKernel Kernel(const std::string& name, const std::string& source) {
  pb::UserKernel k;
  k.set_name(name);
  k.set_filename(name + ".cu");
  k.set_backend("cuda");
  k.set_source(source);
  return k;
}

TEST(UserKernelCudaTest, ExamplesBuildWithTheServersCommand) {
  user_kernels::UserKernelOptions o;
  o.cache_dir = absl::StrCat(::testing::TempDir(), "/cuda_cache_", getpid());
  o.work_dir = ::testing::TempDir();
  o.compile_timeout_s = 300;
  auto b = user_kernels::KernelBuilder::Create(o, "");
  ASSERT_FALSE(b->toolchain("cuda").path.empty()) << b->Describe();
  for (const char* op : kOps) {
    pb::UserKernel k = Kernel(op, Example(op));
    k.add_flags("-lineinfo");
    ASSERT_TRUE(b->Check(k, OpOf(op), "cuda", "k").ok());
    auto built = b->Build(k, "cuda", nullptr);
    ASSERT_TRUE(built.ok()) << op << ": " << built.status();
    EXPECT_THAT(built->log, HasSubstr("sm_90a"));
  }
  auto bad = b->Build(Kernel("bad", "__global__ void k() { undeclared(); }"), "cuda", nullptr);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("undeclared"));
}

// Item 6's refusals at submit, on the cuda backend's rules (no GPU needed):
// a 100 MB source and flags off nvcc's allow-list, each INVALID_ARGUMENT
// naming the field, before anything is compiled.
TEST(UserKernelCudaTest, HugeSourcesAndDisallowedNvccFlagsAreRefusedAtSubmit) {
  user_kernels::UserKernelOptions o;
  o.cache_dir = absl::StrCat(::testing::TempDir(), "/cuda_refuse_cache_", getpid());
  o.work_dir = ::testing::TempDir();
  auto b = user_kernels::KernelBuilder::Create(o, "");
  absl::Status st = b->Check(Kernel("huge", std::string(100 << 20, ' ')), pb::OP_ATTENTION, "cuda",
                             "spec.user_kernels[0]");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("spec.user_kernels[0].source: 104857600 bytes, larger than the limit of "
                                      "1048576 bytes"));
  for (const char* flag : {"-ccbin=/tmp/evil", "-Xcompiler=-fplugin=/tmp/evil.so", "--output-directory=/tmp",
                           "-Xlinker=-rpath=/tmp", "--keep"}) {
    pb::UserKernel k = Kernel("flags", Example("attention"));
    k.add_flags("-lineinfo");
    k.add_flags(flag);
    st = b->Check(k, pb::OP_ATTENTION, "cuda", "spec.user_kernels[0]");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << flag << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("spec.user_kernels[0].flags[1]: \"", flag,
                                                     "\" is not an allowed cuda compile flag")));
  }
}

// The examples' launch geometry (their host entry points compute the same):
// one thread per output row (attention) or element (MoE) in blocks of 128 or
// 256, one block per (request, position, head) for MLA with its scores in
// dynamic shared memory.
pb::CudaLaunch LaunchFor(const pb::BenchJobSpec& s) {
  pb::CudaLaunch l;
  auto blocks = [](int64_t n, uint32_t per) { return static_cast<uint32_t>((n + per - 1) / per); };
  if (s.has_attention()) {
    const auto& a = s.attention();
    l.set_block_x(128);
    l.set_grid_x(blocks(a.batch() * a.heads_q() * a.seq_q(), 128));
  } else if (s.has_mla()) {
    const auto& m = s.mla();
    l.set_block_x(128);
    l.set_grid_x(static_cast<uint32_t>(m.batch() * m.q_len() * m.heads()));
    l.set_dynamic_shared_bytes(static_cast<uint32_t>(m.seq_len() * sizeof(float)));
  } else {
    const auto& m = s.moe();
    const int64_t n = s.op() == pb::OP_MOE_LAYER  ? m.tokens() * m.out_dim()
                      : s.op() == pb::OP_MOE_GATEUP ? m.tokens() * m.top_k() * (m.swiglu() ? m.inter() : 2 * m.inter())
                                                    : (m.weighted_sum() ? m.tokens() : m.tokens() * m.top_k()) * m.hidden();
    l.set_block_x(256);
    l.set_grid_x(blocks(n, 256));
  }
  return l;
}

TEST(UserKernelCudaTest, ExamplesCubinsAndPtxPassTheSubmitChecks) {
  user_kernels::UserKernelOptions o;
  o.cache_dir = absl::StrCat(::testing::TempDir(), "/cuda_dev_cache_", getpid());
  o.work_dir = ::testing::TempDir();
  auto b = user_kernels::KernelBuilder::Create(o, "");
  for (const char* op : kOps) {
    for (bool cubin : {true, false}) {
      pb::UserKernel k;
      k.set_name(op);
      if (cubin) {
        k.set_cubin(DeviceCode(op, true));
      } else {
        k.set_ptx(DeviceCode(op, false));
      }
      k.mutable_launch()->set_grid_x(1);
      k.mutable_launch()->set_block_x(128);
      const absl::Status st = b->Check(k, OpOf(op), "cuda", "spec.user_kernels[0]");
      EXPECT_TRUE(st.ok()) << op << (cubin ? " cubin: " : " ptx: ") << st;
      // Another op's kernel is not this op's entry.
      const absl::Status other = b->Check(k, OpOf(op) == pb::OP_MOE_DOWN ? pb::OP_ATTENTION : pb::OP_MOE_DOWN, "cuda",
                                          "spec.user_kernels[0]");
      EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument) << op;
    }
  }
}

class UserKernelGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device here: the GPU cases run on the H200";
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.backend = "cuda";
    o.bench.user_kernels.worker_cuda = "server/user_kernels/kernel_worker_cuda";
    o.bench.user_kernels.cache_dir = absl::StrCat(::testing::TempDir(), "/gpu_cache_", getpid());
    o.bench.user_kernels.work_dir = ::testing::TempDir();
    o.bench.user_kernels.launch_deadline_s = 10;
    o.bench.user_kernels.compile_timeout_s = 300;
    o.max_message_mb = 256;  // so that a 100 MB source reaches the server's own check, not gRPC's
    auto s = KernelServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    opts_.target = absl::StrCat("127.0.0.1:", server_->port());
    opts_.default_timeout = absl::Seconds(600);
    opts_.max_message_mb = 256;
    auto c = BenchClient::Connect(opts_);
    ASSERT_TRUE(c.ok());
    client_ = std::move(*c);
  }

  static pb::BenchJobSpec Spec(const std::string& op, const std::string& name, const std::string& source,
                               bool baseline) {
    pb::BenchJobSpec s;
    s.set_name(name);
    if (op == "attention" || op == "fp8_attention") {
      s.set_op(op == "attention" ? pb::OP_ATTENTION : pb::OP_FP8_ATTENTION);
      auto* a = s.mutable_attention();
      a->set_batch(1);
      a->set_heads_q(8);
      a->set_seq_q(512);
      a->set_head_dim(128);
      a->set_causal(true);
    } else if (op == "mla_decode") {
      s.set_op(pb::OP_MLA_DECODE);
      auto* m = s.mutable_mla();
      m->set_batch(4);
      m->set_q_len(1);
      m->set_heads(16);
      m->set_seq_len(1024);
    } else if (op == "moe_layer") {
      // The example recomputes the intermediate per output element: a small layer.
      s.set_op(pb::OP_MOE_LAYER);
      auto* m = s.mutable_moe();
      m->set_tokens(4);
      m->set_experts(8);
      m->set_top_k(2);
      m->set_hidden(256);
      m->set_inter(128);
      m->set_out_dim(256);
    } else {
      s.set_op(op == "moe_gateup" ? pb::OP_MOE_GATEUP : pb::OP_MOE_DOWN);
      auto* m = s.mutable_moe();
      m->set_tokens(8);
      m->set_experts(16);
      m->set_top_k(4);
      m->set_hidden(512);
      m->set_inter(256);
      m->set_swiglu(op == "moe_gateup");
      m->set_weighted_sum(op == "moe_down");
    }
    if (baseline) s.add_variants("cuda");
    s.mutable_method()->set_warmup(10);
    s.mutable_method()->set_iters(50);
    *s.add_user_kernels() = Kernel(name, source);
    return s;
  }

  pb::BenchJob Run(const pb::BenchJobSpec& spec) {
    auto job = client_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    auto done = client_->Watch(job->id(), [](const pb::BenchEvent&) {}, absl::Seconds(600));
    EXPECT_TRUE(done.ok()) << done.status();
    return done.ok() ? *done : pb::BenchJob{};
  }

  // The server's own cuda kernel calls still work and are right.
  void ExpectServerCallsWork() {
    auto c = Client::Connect(opts_);
    ASSERT_TRUE(c.ok());
    AttentionArgs args;
    args.q = numerics::GaussianBf16({1, 4, 256, 128}, 1);
    args.k = numerics::GaussianBf16({1, 4, 256, 128}, 2);
    args.v = numerics::GaussianBf16({1, 4, 256, 128}, 3);
    args.causal = true;
    args.report_error = true;
    auto r = (*c)->Attention(args);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->error.has_value());
    EXPECT_LT(r->error->rel_rms, 0.01);
  }

  std::unique_ptr<KernelServer> server_;
  ClientOptions opts_;
  std::unique_ptr<BenchClient> client_;
};

TEST_F(UserKernelGpuTest, ExamplesPassBesideTheBuiltInVariant) {
  for (const char* op : kOps) {
    pb::BenchJob job = Run(Spec(op, op, Example(op), true));
    ASSERT_EQ(job.state(), pb::JOB_DONE) << op << ": " << job.error();
    for (const auto& r : job.results()) {
      EXPECT_TRUE(r.correct()) << op << " " << r.variant() << ": " << r.gate_message();
      EXPECT_TRUE(r.timed()) << op << " " << r.variant();
      std::cout << op << " " << r.variant() << " " << r.time().value_ms() << " ms rel_rms " << r.error().rel_rms()
                << " rank " << r.rank() << " (" << r.method() << ")\n";
    }
  }
  ExpectServerCallsWork();
}

std::string AttentionKernel(const std::string& device_body) {
  return absl::StrCat("#include \"kernels/api/user_kernel_abi.h\"\n__global__ void K(ks_attention_args_v1 a) {\n",
                      device_body,
                      "\n}\nextern \"C\" {\nKS_USER_ABI_DEFINE_VERSION();\n"
                      "int ks_user_attention_v1(const ks_attention_args_v1* a, void* s) {\n"
                      "  K<<<1, 1, 0, (cudaStream_t)s>>>(*a);\n  return 0;\n}\n}\n");
}

TEST_F(UserKernelGpuTest, DeviceFaultHangAndOutOfBoundsFailOnlyTheirJob) {
  pb::BenchJob fault = Run(Spec("attention", "fault", AttentionKernel("*(volatile int*)8 = 1;"), false));
  EXPECT_EQ(fault.state(), pb::JOB_FAILED);
  EXPECT_THAT(fault.error(), HasSubstr("cudaErrorIllegalAddress"));
  ExpectServerCallsWork();
  // A spin on a volatile local was compiled away (the job finished): the asm
  // statement is a side effect nvcc must keep.
  pb::BenchJob hang =
      Run(Spec("attention", "hang", AttentionKernel("for (;;) asm volatile(\"nanosleep.u32 1000;\");"), false));
  EXPECT_EQ(hang.state(), pb::JOB_FAILED);
  EXPECT_EQ(hang.error_code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded)) << hang.error();
  ExpectServerCallsWork();
  pb::BenchJob past = Run(Spec(
      "attention", "past",
      AttentionKernel("a.out[a.batch * a.heads_q * a.seq_q * a.head_dim + 5] = 1;"), false));
  EXPECT_EQ(past.state(), pb::JOB_FAILED);
  EXPECT_THAT(past.error(), HasSubstr("outside its output"));
  ExpectServerCallsWork();
}

// The same spec with the example's cubin or PTX instead of its source.
pb::BenchJobSpec WithDeviceCode(pb::BenchJobSpec s, const std::string& code, bool cubin) {
  pb::UserKernel* k = s.mutable_user_kernels(0);
  k->set_filename(absl::StrCat(k->name(), cubin ? ".cubin" : ".ptx"));
  if (cubin) {
    k->set_cubin(code);
  } else {
    k->set_ptx(code);
  }
  *k->mutable_launch() = LaunchFor(s);
  return s;
}

TEST_F(UserKernelGpuTest, ExamplesCubinsAndPtxPassBesideTheBuiltInVariant) {
  for (const char* op : kOps) {
    for (bool cubin : {true, false}) {
      const std::string name = absl::StrCat(op, cubin ? "_cubin" : "_ptx");
      pb::BenchJob job = Run(WithDeviceCode(Spec(op, name, "", true), DeviceCode(op, cubin), cubin));
      ASSERT_EQ(job.state(), pb::JOB_DONE) << name << ": " << job.error();
      for (const auto& r : job.results()) {
        EXPECT_TRUE(r.correct()) << name << " " << r.variant() << ": " << r.gate_message();
        EXPECT_TRUE(r.timed()) << name << " " << r.variant();
        std::cout << name << " " << r.variant() << " " << r.time().value_ms() << " ms rel_rms " << r.error().rel_rms()
                  << " (" << r.method() << ")\n";
      }
    }
  }
  ExpectServerCallsWork();
}

// A cubin built here with nvcc from `source`.
std::string BuildCubin(const std::string& name, const std::string& source) {
  const std::string dir = ::testing::TempDir();
  const std::string cu = absl::StrCat(dir, "/", name, ".cu"), out = absl::StrCat(dir, "/", name, ".cubin");
  {
    std::ofstream f(cu);
    f << source;
  }
  const std::string cmd = absl::StrCat("PATH=/usr/local/cuda/bin:$PATH nvcc -cubin -gencode=arch=compute_90a,code=sm_90a ",
                                       "-I. ", cu, " -o ", out);
  EXPECT_EQ(system(cmd.c_str()), 0) << cmd;
  return ReadFile(out);
}

TEST_F(UserKernelGpuTest, AFaultingCubinAndATooLargeBlockFailTheirJobs) {
  const std::string header = "#include \"kernels/api/user_kernel_abi.h\"\n";
  const std::string fault = BuildCubin(
      "fault", header + "KS_USER_DEVICE_KERNEL(attention)(ks_attention_args_v1 a) { *(volatile int*)8 = 1; }\n");
  pb::BenchJob faulted = Run(WithDeviceCode(Spec("attention", "fault", "", false), fault, true));
  EXPECT_EQ(faulted.state(), pb::JOB_FAILED);
  EXPECT_THAT(faulted.error(), HasSubstr("cudaErrorIllegalAddress"));
  ExpectServerCallsWork();
  const std::string bounded = BuildCubin(
      "bounded", header + "extern \"C\" __global__ void __launch_bounds__(128) "
                          "ks_user_attention_v1_kernel(ks_attention_args_v1 a) { }\n");
  pb::BenchJobSpec big = WithDeviceCode(Spec("attention", "bounded", "", false), bounded, true);
  big.mutable_user_kernels(0)->mutable_launch()->set_block_x(1024);
  pb::BenchJob refused = Run(big);
  EXPECT_EQ(refused.state(), pb::JOB_FAILED);
  EXPECT_EQ(refused.error_code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << refused.error();
  EXPECT_THAT(refused.error(), HasSubstr("launch.block_x: 1024 threads per block, but ks_user_attention_v1_kernel "
                                         "allows at most 128"));
  ExpectServerCallsWork();
}

// Item 6 on the GPU, with another tenant's cuda calls running beside every
// case: each bad kernel ends in its own status (code and message), the
// calls all succeed and are right, its buffer and KV pool on the device keep
// their bytes and the pool its stats, and the server's own calls work after.
TEST_F(UserKernelGpuTest, EveryBadInputFailsAloneWhileAnotherTenantsCallsRun) {
  auto bob = Client::Connect(opts_);
  ASSERT_TRUE(bob.ok()) << bob.status();
  auto kept = KeptData::Store(bob->get());
  ASSERT_TRUE(kept.ok()) << kept.status();
  BackgroundCalls calls(bob->get(), {1, 4, 256, 128});
  struct Bad {
    std::string what;
    pb::BenchJobSpec spec;
    absl::StatusCode code;
    std::vector<std::string> parts;
  };
  const std::string abi = "#include \"kernels/api/user_kernel_abi.h\"\n";
  std::vector<Bad> bad = {
      {"does not compile", Spec("attention", "nocompile", abi + "__global__ void k() { undeclared(); }\n", false),
       absl::StatusCode::kInvalidArgument, {"user:nocompile: nocompile.cu does not compile", "undeclared"}},
      {"no entry point",
       Spec("attention", "noentry", abi + "extern \"C\" { KS_USER_ABI_DEFINE_VERSION(); }\n", false),
       absl::StatusCode::kInvalidArgument, {"user:noentry", "exports no ks_user_attention_v1"}},
      {"wrong ABI version",
       Spec("attention", "abi99",
            abi + "extern \"C\" {\nconst int32_t ks_user_abi_version = 99;\n"
                  "int ks_user_attention_v1(const ks_attention_args_v1*, void*) { return 0; }\n}\n",
            false),
       absl::StatusCode::kInvalidArgument, {"user:abi99", "ABI version 99", "this server speaks version 1"}},
      {"writes past its output",
       Spec("attention", "past", AttentionKernel("a.out[a.batch * a.heads_q * a.seq_q * a.head_dim + 5] = 1;"), false),
       absl::StatusCode::kAborted, {"user:past", "outside its output"}},
      {"faults on the device", Spec("attention", "fault", AttentionKernel("*(volatile int*)8 = 1;"), false),
       absl::StatusCode::kAborted, {"user:fault", "cudaErrorIllegalAddress"}},
      {"never returns",
       Spec("attention", "hang", AttentionKernel("for (;;) asm volatile(\"nanosleep.u32 1000;\");"), false),
       absl::StatusCode::kDeadlineExceeded, {"user:hang", "did not finish within", "killed with SIGKILL"}},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    pb::BenchJob job = Run(b.spec);
    EXPECT_EQ(job.state(), pb::JOB_FAILED) << job.DebugString();
    EXPECT_EQ(job.error_code(), static_cast<int>(b.code)) << job.error();
    for (const std::string& p : b.parts) EXPECT_THAT(job.error(), HasSubstr(p));
  }
  // Refused at submit: no job is made.
  absl::Status st = client_->Submit(Spec("attention", "huge", std::string(100 << 20, ' '), false)).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("spec.user_kernels[0].source: 104857600 bytes"));
  pb::BenchJobSpec flag = Spec("attention", "flag", Example("attention"), false);
  flag.mutable_user_kernels(0)->add_flags("-Xcompiler=-fplugin=/tmp/evil.so");
  st = client_->Submit(flag).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("is not an allowed cuda compile flag"));
  // Returns NaN: DONE, the kernel failed the gate, unranked; cuda beside it ranked.
  pb::BenchJob nan = Run(Spec(
      "attention", "nan",
      AttentionKernel("for (int64_t i = 0; i < a.batch * a.heads_q * a.seq_q * a.head_dim; ++i) a.out[i] = 0x7FC0;"),
      true));
  ASSERT_EQ(nan.state(), pb::JOB_DONE) << nan.error();
  for (const auto& r : nan.results()) {
    if (r.variant() == "user:nan") {
      EXPECT_FALSE(r.correct());
      EXPECT_THAT(r.gate_message(), HasSubstr("NaN"));
      EXPECT_EQ(r.rank(), 0);
    } else {
      EXPECT_TRUE(r.correct()) << r.variant() << ": " << r.gate_message();
      EXPECT_EQ(r.rank(), 1);
    }
  }
  calls.Stop();
  EXPECT_GT(calls.calls(), 10);
  EXPECT_EQ(calls.failures(), 0) << calls.first_failure();
  const absl::Status unchanged = (*kept)->Unchanged();
  EXPECT_TRUE(unchanged.ok()) << unchanged;
  ExpectServerCallsWork();
}

// Item 4 on the GPU: graph, l2_flush, sustained and passes time the user
// kernel in its worker beside the built-in "cuda" variant; a kernel that
// synchronises inside its launch cannot be captured and is reported
// untimed, as a built-in variant would be, while the job is DONE.
TEST_F(UserKernelGpuTest, TimingMethodsApplyToUserKernels) {
  struct Case {
    std::string name;
    std::function<void(pb::MethodOptions*)> set;
    std::string method;  // in each result's method
  };
  const std::vector<Case> cases = {
      {"graph", [](pb::MethodOptions* m) { m->set_method(pb::METHOD_GRAPH); }, "graph ("},
      {"l2_flush", [](pb::MethodOptions* m) { m->set_l2_flush(true); }, "kernel ("},
      {"passes",
       [](pb::MethodOptions* m) {
         m->set_method(pb::METHOD_PASSES);
         m->set_passes(3);
       },
       "passes (3 x 50)"},
      {"sustained",
       [](pb::MethodOptions* m) {
         m->set_method(pb::METHOD_SUSTAINED);
         m->set_warmin_s(1);
         m->set_window_s(3);
       },
       "sustained"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    pb::BenchJobSpec spec = Spec("attention", "attention", Example("attention"), true);
    c.set(spec.mutable_method());
    pb::BenchJob job = Run(spec);
    ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
    ASSERT_EQ(job.results_size(), 2);
    for (const auto& r : job.results()) {
      EXPECT_TRUE(r.correct()) << r.variant() << ": " << r.gate_message();
      EXPECT_TRUE(r.timed()) << r.variant() << ": " << r.error_message();
      EXPECT_GT(r.time().value_ms(), 0) << r.variant();
      EXPECT_THAT(r.method(), HasSubstr(c.method)) << r.variant();
      std::cout << c.name << " " << r.variant() << " " << r.time().value_ms() << " ms (" << r.method() << ")\n";
    }
    const pb::VariantResult& user = job.results(0).variant() == "user:attention" ? job.results(0) : job.results(1);
    if (c.name == "graph") {
      EXPECT_THAT(user.method(), HasSubstr("graph replays in the user kernel's worker process"));
    }
    if (c.name == "l2_flush") {
      EXPECT_THAT(absl::StrJoin(job.notes(), "\n"), HasSubstr("l2_flush: each user kernel's worker copies"));
    }
    if (c.name == "sustained") {
      EXPECT_TRUE(user.clocks().available()) << user.clocks().note();
    }
  }
  const std::string syncs = Example("attention");
  const std::string launch_end = "return cudaGetLastError() == cudaSuccess ? 0 : 2;";
  ASSERT_NE(syncs.find(launch_end), std::string::npos);
  std::string sync_source = syncs;
  sync_source.replace(sync_source.find(launch_end), launch_end.size(),
                      "cudaStreamSynchronize((cudaStream_t)stream);\n  return 0;");
  pb::BenchJobSpec spec = Spec("attention", "syncs", sync_source, true);
  spec.mutable_method()->set_method(pb::METHOD_GRAPH);
  pb::BenchJob job = Run(spec);
  ASSERT_EQ(job.state(), pb::JOB_DONE) << job.error();
  for (const auto& r : job.results()) {
    EXPECT_TRUE(r.correct()) << r.variant() << ": " << r.gate_message();
    if (r.variant() == "user:syncs") {
      EXPECT_FALSE(r.timed());
      EXPECT_THAT(r.error_message(), HasSubstr("FAILED_PRECONDITION"));
    } else {
      EXPECT_TRUE(r.timed()) << r.variant();
    }
  }
  ExpectServerCallsWork();
}

}  // namespace
}  // namespace kernelserve
