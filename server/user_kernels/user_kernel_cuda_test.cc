// Users' CUDA kernels. Without a GPU, the examples are built with the
// node's nvcc exactly as the server builds a submission (builder.h), and
// the rest skips, saying so. On a GPU (the H200): a real KernelServer on the
// cuda backend on a real port runs every example beside the built-in "cuda"
// variant, and a kernel that faults on the device, one that hangs and one
// that writes past its output each fail their job while the server's own
// kernel calls keep working.
#include <cuda_runtime.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/bench_client.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/numerics/test_inputs.h"
#include "server/server.h"
#include "server/user_kernels/builder.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;

const char* const kOps[] = {"attention", "fp8_attention", "mla_decode", "moe_gateup", "moe_down"};

std::string Example(const std::string& op) {
  std::ifstream f("kernels/api/examples/cuda/" + op + ".cu");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
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
    ASSERT_TRUE(b->Check(k, "cuda", "k").ok());
    auto built = b->Build(k, "cuda", nullptr);
    ASSERT_TRUE(built.ok()) << op << ": " << built.status();
    EXPECT_THAT(built->log, HasSubstr("sm_90a"));
  }
  auto bad = b->Build(Kernel("bad", "__global__ void k() { undeclared(); }"), "cuda", nullptr);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("undeclared"));
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
    auto s = KernelServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    opts_.target = absl::StrCat("127.0.0.1:", server_->port());
    opts_.default_timeout = absl::Seconds(600);
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

}  // namespace
}  // namespace kernelserve
