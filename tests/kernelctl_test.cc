// Runs the real kernelctl binary against the real kernelserve binary (started
// here as a subprocess on a free port) with .npy files written by the test,
// and checks outputs against the fp64 oracle and errors by exit code and text.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "tests/test_util.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;
using testutil::ExpectBf16MatchesOracle;
using testutil::FreshSeed;

std::string Runfile(const std::string& rel) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return absl::StrCat(srcdir ? srcdir : ".", "/kernelserve/", rel);
}

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RunResult {
  int code = -1;
  std::string out, err;
};

class KernelctlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string log = TmpDir() + "/kernelserve.log";
    server_pid_ = fork();
    if (server_pid_ == 0) {
      const std::string bin = Runfile("server/kernelserve");
      FILE* f = freopen(log.c_str(), "w", stdout);
      (void)f;
      dup2(fileno(stdout), fileno(stderr));
      execl(bin.c_str(), bin.c_str(), "--listen=127.0.0.1:0", "--backend=cpu", "--cpu_threads=2",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    // The server logs the port it bound.
    const std::regex re("listening on port ([0-9]+)");
    for (int i = 0; i < 300 && port_ == 0; ++i) {
      std::smatch m;
      const std::string text = ReadFile(log);
      if (std::regex_search(text, m, re)) port_ = std::stoi(m[1]);
      if (port_ == 0) absl::SleepFor(absl::Milliseconds(50));
    }
  }
  static void TearDownTestSuite() {
    if (server_pid_ > 0) {
      kill(server_pid_, SIGTERM);
      int status = 0;
      waitpid(server_pid_, &status, 0);
    }
  }

  void SetUp() override { ASSERT_NE(port_, 0) << "kernelserve did not start: " << ReadFile(TmpDir() + "/kernelserve.log"); }

  // Runs kernelctl with the global --server flag and `args`.
  RunResult Kernelctl(const std::vector<std::string>& args, bool with_server = true) {
    const std::string out = TmpDir() + "/kc.out", err = TmpDir() + "/kc.err";
    std::string cmd = Runfile("client/kernelctl");
    if (with_server) absl::StrAppend(&cmd, " --server=127.0.0.1:", port_, " --timeout=60");
    for (const std::string& a : args) absl::StrAppend(&cmd, " '", a, "'");
    absl::StrAppend(&cmd, " >", out, " 2>", err);
    const int rc = std::system(cmd.c_str());
    RunResult r;
    r.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    r.out = ReadFile(out);
    r.err = ReadFile(err);
    return r;
  }

  std::string Path(const std::string& name) { return TmpDir() + "/" + name; }

  // Writes random float32 (or float64) values that are NOT bf16-exact, so the
  // client's rounding is exercised; returns the bf16 tensor the server should
  // see, rounded here with numerics' independent RTNE.
  HostTensor WriteRandom(const std::string& name, const Shape& shape, std::mt19937_64& rng, bool f64 = false,
                         double mean = 0) {
    std::normal_distribution<double> nd(mean, 1.0);
    NpyArray a;
    a.kind = 'f';
    a.itemsize = f64 ? 8 : 4;
    a.shape = shape;
    const int64_t n = NumElements(shape);
    a.data.resize(static_cast<size_t>(n * a.itemsize));
    HostTensor bf(DType::kBf16, shape);
    for (int64_t i = 0; i < n; ++i) {
      const double x = nd(rng);
      if (f64) {
        std::memcpy(a.data.data() + 8 * i, &x, 8);
        bf.data<uint16_t>()[i] = numerics::DoubleToBf16(x, Rounding::kRtne);
      } else {
        const float f = static_cast<float>(x);
        std::memcpy(a.data.data() + 4 * i, &f, 4);
        bf.data<uint16_t>()[i] = numerics::FloatToBf16(f, Rounding::kRtne);
      }
    }
    EXPECT_TRUE(WriteNpyFile(Path(name), a).ok());
    return bf;
  }

  // Reads kernelctl's float32 output back as a bf16 tensor (it must be bf16-exact).
  HostTensor ReadOutput(const std::string& name) {
    auto a = ReadNpyFile(Path(name));
    EXPECT_TRUE(a.ok()) << a.status();
    if (!a.ok()) return HostTensor();
    EXPECT_EQ(a->DescrString(), "<f4");
    HostTensor t(DType::kBf16, a->shape);
    const float* f = reinterpret_cast<const float*>(a->data.data());
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &f[i], 4);
      EXPECT_EQ(bits & 0xFFFF, 0u) << "output element " << i << " is not a bf16 value";
      t.data<uint16_t>()[i] = static_cast<uint16_t>(bits >> 16);
    }
    return t;
  }

  static pid_t server_pid_;
  static int port_;
};

pid_t KernelctlTest::server_pid_ = 0;
int KernelctlTest::port_ = 0;

TEST_F(KernelctlTest, DevicesAndHealth) {
  RunResult r = Kernelctl({"devices"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("cpu"));
  EXPECT_THAT(r.out, HasSubstr("HEALTHY"));
  r = Kernelctl({"health"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("SERVING"));
}

TEST_F(KernelctlTest, AttentionMatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::mt19937_64 rng(seed);
  HostTensor q = WriteRandom("q.npy", {1, 4, 20, 128}, rng);
  HostTensor k = WriteRandom("k.npy", {1, 2, 45, 128}, rng);
  HostTensor v = WriteRandom("v.npy", {1, 2, 45, 128}, rng, /*f64=*/true, 0.3);
  std::remove(Path("o.npy").c_str());
  RunResult r = Kernelctl({"attention", "--q=" + Path("q.npy"), "--k=" + Path("k.npy"), "--v", Path("v.npy"),
                           "--out=" + Path("o.npy"), "--causal", "--report-error"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("out: bf16[1,4,20,128]"));
  EXPECT_THAT(r.out, HasSubstr("error_report: rel_rms="));
  HostTensor out = ReadOutput("o.npy");
  AttentionParams p;
  p.causal = true;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
  auto ref = oracle::Attention(p, q, k, v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ExpectBf16MatchesOracle(out, *ref, Rounding::kRtne);
}

TEST_F(KernelctlTest, AttentionBshdRtzAndScale) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::mt19937_64 rng(seed);
  HostTensor q = WriteRandom("q2.npy", {2, 9, 2, 64}, rng, true);
  HostTensor k = WriteRandom("k2.npy", {2, 30, 2, 64}, rng);
  HostTensor v = WriteRandom("v2.npy", {2, 30, 2, 64}, rng);
  RunResult r = Kernelctl({"attention", "--q=" + Path("q2.npy"), "--k=" + Path("k2.npy"), "--v=" + Path("v2.npy"),
                           "--out=" + Path("o2.npy"), "--layout=bshd", "--round=rtz", "--scale=0.2"});
  ASSERT_EQ(r.code, 0) << r.err;
  HostTensor out = ReadOutput("o2.npy");
  AttentionParams p;
  p.layout = Layout::kBshd;
  p.rounding = Rounding::kRtz;
  p.softmax_scale = 0.2;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
  auto ref = oracle::Attention(p, q, k, v);
  ASSERT_TRUE(ref.ok());
  ExpectBf16MatchesOracle(out, *ref, Rounding::kRtz);
}

TEST_F(KernelctlTest, MalformedNpyIsACallError) {
  {
    std::ofstream bad(Path("bad.npy"), std::ios::binary);
    bad << "\x93NUMPY\x01\x00garbage";
  }
  std::mt19937_64 rng(FreshSeed());
  WriteRandom("k3.npy", {1, 1, 4, 64}, rng);
  RunResult r = Kernelctl({"attention", "--q=" + Path("bad.npy"), "--k=" + Path("k3.npy"), "--v=" + Path("k3.npy"),
                           "--out=" + Path("o3.npy")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("error: INVALID_ARGUMENT: "));
  EXPECT_THAT(r.err, HasSubstr("bad.npy"));
  // Wrong dtype: int32 where floats are expected.
  NpyArray ints;
  ints.kind = 'i';
  ints.itemsize = 4;
  ints.shape = {1, 1, 4, 64};
  ints.data.assign(4 * 256, 0);
  ASSERT_TRUE(WriteNpyFile(Path("ints.npy"), ints).ok());
  r = Kernelctl({"attention", "--q=" + Path("ints.npy"), "--k=" + Path("k3.npy"), "--v=" + Path("k3.npy"),
                 "--out=" + Path("o3.npy")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("ints.npy"));
  EXPECT_THAT(r.err, HasSubstr("int32"));
  EXPECT_THAT(r.err, HasSubstr("float"));
  // A server-side validation error keeps its code.
  WriteRandom("k4.npy", {1, 1, 4, 128}, rng);
  r = Kernelctl({"attention", "--q=" + Path("k3.npy"), "--k=" + Path("k4.npy"), "--v=" + Path("k4.npy"),
                 "--out=" + Path("o3.npy")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("error: INVALID_ARGUMENT: "));
}

TEST_F(KernelctlTest, UsageErrorsExitTwo) {
  RunResult r = Kernelctl({"attention", "--q=a.npy", "--k=b.npy", "--v=c.npy", "--out=o.npy", "--bogus=1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("error: INVALID_ARGUMENT: attention: unknown flag --bogus"));
  r = Kernelctl({"attention", "--q=a.npy"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("missing required flag --k"));
  r = Kernelctl({"attention", "--q=a.npy", "--k=b.npy", "--v=c.npy", "--out=o.npy", "--round=up"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--round"));
  r = Kernelctl({"frobnicate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown subcommand"));
  r = Kernelctl({}, /*with_server=*/false);
  EXPECT_EQ(r.code, 2);
  r = Kernelctl({"--bogus-global", "devices"}, false);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --bogus-global"));
}

TEST_F(KernelctlTest, HelpForEverySubcommand) {
  RunResult r = Kernelctl({"help"}, false);
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"devices", "health", "buffers", "attention", "fp8-attention", "mla-decode", "moe", "pool"}) {
    EXPECT_THAT(r.out, HasSubstr(sub));
    RunResult h = Kernelctl({"help", sub}, false);
    EXPECT_EQ(h.code, 0) << sub;
    EXPECT_THAT(h.out, HasSubstr(absl::StrCat("usage: kernelctl ", sub))) << sub;
  }
  r = Kernelctl({"help", "attention"}, false);
  EXPECT_THAT(r.out, HasSubstr("--causal"));
  EXPECT_THAT(r.out, HasSubstr("--layout=bhsd|bshd"));
  r = Kernelctl({"help", "fp8-attention"}, false);
  EXPECT_THAT(r.out, HasSubstr("--p-mode=exact|lean|naive"));
}

TEST_F(KernelctlTest, BufferRoundTrip) {
  std::mt19937_64 rng(FreshSeed());
  HostTensor t = WriteRandom("buf.npy", {3, 70}, rng);
  RunResult r = Kernelctl({"buffers", "upload", "--in=" + Path("buf.npy"), "--label=mine"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string id = r.out.substr(0, r.out.find(' '));
  ASSERT_FALSE(id.empty());
  r = Kernelctl({"buffers", "list"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(id));
  EXPECT_THAT(r.out, HasSubstr("mine"));
  r = Kernelctl({"buffers", "download", "--id=" + id, "--out=" + Path("buf_back.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  HostTensor back = ReadOutput("buf_back.npy");
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_EQ(back.storage(), t.storage());
  // The buffer feeds an op by id.
  r = Kernelctl({"attention", "--q=buffer:" + id, "--k=buffer:" + id, "--v=buffer:" + id,
                 "--out=" + Path("bo.npy")});
  EXPECT_NE(r.code, 2) << r.err;  // rank-2 tensors are not attention inputs: a call error, not usage
  r = Kernelctl({"buffers", "free", "--id=" + id});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Kernelctl({"buffers", "free", "--id=" + id});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("error: NOT_FOUND: "));
}

TEST_F(KernelctlTest, UnreachableServerExitsOne) {
  RunResult r = Kernelctl({"--server=127.0.0.1:1", "--timeout=1", "devices"}, false);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("error: UNAVAILABLE: "), HasSubstr("error: DEADLINE_EXCEEDED: ")));
}

}  // namespace
}  // namespace kernelserve
