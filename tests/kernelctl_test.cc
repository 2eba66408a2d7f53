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
#include "kernels/numerics/test_inputs.h"
#include "tests/test_util.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;
using testutil::ExpectBf16MatchesOracle;
using testutil::FreshSeed;
using testutil::RelRms;

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

// Writes a tensor with the client's own .npy rules (bf16 as exact float32,
// packed fp4 as uint8 [..., K/2], e8m0 and fp8 as uint8).
std::string Save(const std::string& name, const HostTensor& t) {
  const std::string path = TmpDir() + "/" + name;
  EXPECT_TRUE(WriteNpyTensor(path, t).ok());
  return path;
}

HostTensor Ints(const std::vector<int32_t>& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  HostTensor t(DType::kInt32, shape);
  std::memcpy(t.bytes(), v.data(), v.size() * 4);
  return t;
}

std::string FirstWord(const std::string& s) { return s.substr(0, s.find_first_of(" \n")); }

TEST_F(KernelctlTest, Fp8AttentionMatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  HostTensor q = numerics::GaussianBf16({1, 2, 40, 128}, seed);
  HostTensor k = numerics::GaussianBf16({1, 2, 140, 128}, seed + 1);
  HostTensor v = numerics::GaussianBf16({1, 2, 140, 128}, seed + 2, 0.5);
  RunResult r = Kernelctl({"fp8-attention", "--q=" + Save("fq.npy", q), "--k=" + Save("fk.npy", k),
                           "--v=" + Save("fv.npy", v), "--out=" + Path("fo.npy"), "--p-mode=lean",
                           "--format=e4m3fnuz", "--report-split"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("input_quant="));
  HostTensor out = ReadOutput("fo.npy");
  Fp8AttentionParams p;
  p.causal = true;
  p.p_mode = PMode::kLean;
  p.format = Fp8Format::kE4M3Fnuz;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc(), nullptr, nullptr, nullptr).ok());
  auto quant = oracle::QuantizeAttentionInputs(p, Fp8AttentionInputs{q.view(), k.view(), v.view(), {}, {}, {}});
  ASSERT_TRUE(quant.ok());
  auto ref = oracle::Fp8Attention(p, *quant, oracle::PQuant::kAsParams);
  ASSERT_TRUE(ref.ok());
  testutil::ExpectFp8AttentionMatchesOracle(out, *ref, 128);
  EXPECT_LT(RelRms(out, *ref), 5e-3);
  // FP8 codes and descales as files: uint8 arrays plus float32 [1] descales.
  Fp8AttentionParams pe;
  pe.causal = false;
  ASSERT_TRUE(pe.Validate(q.desc(), k.desc(), v.desc(), nullptr, nullptr, nullptr).ok());
  auto qe = oracle::QuantizeAttentionInputs(pe, Fp8AttentionInputs{q.view(), k.view(), v.view(), {}, {}, {}});
  ASSERT_TRUE(qe.ok());
  auto descale = [&](const std::string& name, float d) {
    HostTensor t(DType::kFp32, {1});
    t.data<float>()[0] = d;
    return Save(name, t);
  };
  r = Kernelctl({"fp8-attention", "--q=" + Save("q8.npy", qe->q), "--k=" + Save("k8.npy", qe->k),
                 "--v=" + Save("v8.npy", qe->v), "--q-descale=" + descale("qd.npy", qe->q_descale[0]),
                 "--k-descale=" + descale("kd.npy", qe->k_descale[0]),
                 "--v-descale=" + descale("vd.npy", qe->v_descale[0]), "--no-causal", "--out=" + Path("fo8.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  HostTensor out8 = ReadOutput("fo8.npy");
  auto ref8 = oracle::Fp8Attention(pe, *qe, oracle::PQuant::kAsParams);
  ASSERT_TRUE(ref8.ok());
  EXPECT_LT(RelRms(out8, *ref8), 5e-3);
  // Bad enum values are usage errors.
  r = Kernelctl({"fp8-attention", "--q=a", "--k=b", "--v=c", "--out=d", "--p-mode=fast"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--p-mode"));
}

TEST_F(KernelctlTest, PoolLifecycleAndMlaDecode) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::mt19937_64 rng(seed);
  RunResult r = Kernelctl({"pool", "create", "--kind=mla", "--slots=64", "--kv-scale=0.04", "--label=ctl"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string pool = FirstWord(r.out);
  ASSERT_FALSE(pool.empty());
  // Request 0 has 30 tokens in slots 10..39, request 1 has 12 in slots 50..61.
  std::vector<int32_t> slots;
  for (int32_t s = 10; s < 40; ++s) slots.push_back(s);
  for (int32_t s = 50; s < 62; ++s) slots.push_back(s);
  const int64_t n = static_cast<int64_t>(slots.size());
  HostTensor rows(DType::kFp8E4M3Fn, {n, 576});
  std::normal_distribution<float> nd(0, 2);
  for (int64_t i = 0; i < rows.num_bytes(); ++i) rows.bytes()[i] = numerics::FloatToFp8(nd(rng), DType::kFp8E4M3Fn);
  r = Kernelctl({"pool", "write", "--pool=" + pool, "--rows=" + Save("rows.npy", rows),
                 "--slot-ids=" + Save("slots.npy", Ints(slots)), "--chunk-rows=5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("rows_written=", n)));
  r = Kernelctl({"pool", "stats", "--pool=" + pool});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kind=MLA_FUSED"));
  EXPECT_THAT(r.out, HasSubstr("label=ctl"));
  r = Kernelctl({"pool", "list"});
  EXPECT_THAT(r.out, HasSubstr(pool));
  r = Kernelctl({"pool", "read", "--pool=" + pool, "--slot-ids=" + Path("slots.npy"), "--out=" + Path("rows_back.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto back = ReadNpyFile(Path("rows_back.npy"));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->DescrString(), "|u1");
  EXPECT_EQ(back->data, rows.storage());

  HostTensor pool_rows(DType::kFp8E4M3Fn, {64, 576});
  for (int64_t i = 0; i < n; ++i) std::memcpy(pool_rows.bytes() + slots[i] * 576, rows.bytes() + i * 576, 576);
  HostTensor q_lat = numerics::GaussianBf16({2, 1, 16, 512}, seed + 1);
  HostTensor q_pe = numerics::GaussianBf16({2, 1, 16, 64}, seed + 2);
  HostTensor seq_lens = Ints({30, 12}), kv_indptr = Ints({0, 30, 42}), kv_indices = Ints(slots);
  r = Kernelctl({"mla-decode", "--q-lat=" + Save("ql.npy", q_lat), "--q-pe=" + Save("qp.npy", q_pe),
                 "--pool=" + pool, "--seq-lens=" + Save("sl.npy", seq_lens),
                 "--kv-indices=" + Save("ki.npy", kv_indices), "--kv-indptr=" + Save("kp.npy", kv_indptr),
                 "--out=" + Path("mo.npy"), "--report-error"});
  ASSERT_EQ(r.code, 0) << r.err;
  HostTensor out = ReadOutput("mo.npy");
  MlaDecodeParams p;
  p.kv_scale = 0.04;
  ASSERT_TRUE(p.Validate(q_lat.desc(), q_pe.desc(), pool_rows.desc(), true, 1, &seq_lens, &kv_indices, &kv_indptr,
                         nullptr)
                  .ok());
  auto ref = oracle::MlaDecode(p, MlaDecodeInputs{q_lat.view(), q_pe.view(), pool_rows.view(), seq_lens.view(),
                                                  kv_indices.view(), kv_indptr.view(), {}});
  ASSERT_TRUE(ref.ok()) << ref.status();
  ExpectBf16MatchesOracle(out, *ref, Rounding::kRtne, 1e-4, 0.8);

  r = Kernelctl({"pool", "delete", "--pool=" + pool});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Kernelctl({"mla-decode", "--q-lat=" + Path("ql.npy"), "--q-pe=" + Path("qp.npy"), "--pool=" + pool,
                 "--seq-lens=" + Path("sl.npy"), "--kv-indices=" + Path("ki.npy"), "--kv-indptr=" + Path("kp.npy"),
                 "--out=" + Path("mo.npy")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("error: NOT_FOUND: "));
  // Contiguous KV given as uint8 codes needs its format.
  r = Kernelctl({"mla-decode", "--q-lat=" + Path("ql.npy"), "--q-pe=" + Path("qp.npy"), "--kv=" + Path("rows.npy"),
                 "--out=" + Path("mo.npy")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--kv-format"));
}

// `kernelctl decode` on a per-head bf16 pool of page 4: GQA 4:1, ragged new
// tokens, against the fp64 oracle; usage errors exit 2 naming the flag.
TEST_F(KernelctlTest, DecodeOverAPerHeadPool) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  const int64_t kSlots = 32, Hkv = 2, D = 64, row = 2 * Hkv * D;
  RunResult r = Kernelctl({"pool", "create", "--kind=per-head", "--slots=32", "--page-size=4", "--dtype=bf16",
                           "--heads=2", "--head-dim=64", "--kv-scale=0.5"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string pool = FirstWord(r.out);
  // Request 0: 10 tokens on pages 5, 2, 7; request 1: 3 tokens on page 0.
  std::vector<int32_t> slots;
  for (int32_t page : {5, 2, 7}) {
    for (int32_t i = 0; i < 4 && slots.size() < 10; ++i) slots.push_back(page * 4 + i);
  }
  for (int32_t i = 0; i < 3; ++i) slots.push_back(i);
  const int64_t n = static_cast<int64_t>(slots.size());
  HostTensor rows = numerics::GaussianBf16({n, row}, seed);
  r = Kernelctl({"pool", "write", "--pool=" + pool, "--rows=" + Save("hrows.npy", rows),
                 "--slot-ids=" + Save("hslots.npy", Ints(slots))});
  ASSERT_EQ(r.code, 0) << r.err;
  HostTensor pool_rows(DType::kBf16, {kSlots, row});
  std::memset(pool_rows.bytes(), 0, pool_rows.num_bytes());
  for (int64_t i = 0; i < n; ++i) std::memcpy(pool_rows.bytes() + slots[i] * row * 2, rows.bytes() + i * row * 2, row * 2);
  HostTensor q = numerics::GaussianBf16({2, 2, 8, D}, seed + 1);
  HostTensor seq_lens = Ints({10, 3}), kv_indices = Ints({5, 2, 7, 0}), kv_indptr = Ints({0, 3, 4});
  HostTensor q_lens = Ints({2, 1});
  const std::vector<std::string> call = {"decode", "--q=" + Save("dq.npy", q), "--pool=" + pool,
                                         "--seq-lens=" + Save("dsl.npy", seq_lens),
                                         "--kv-indices=" + Save("dki.npy", kv_indices),
                                         "--kv-indptr=" + Save("dkp.npy", kv_indptr),
                                         "--q-lens=" + Save("dql.npy", q_lens), "--round=rtna"};
  std::vector<std::string> args = call;
  args.push_back("--out=" + Path("do.npy"));
  args.push_back("--report-error");
  r = Kernelctl(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("error_report: "));
  HostTensor out = ReadOutput("do.npy");
  DecodeAttentionParams p;
  p.kv_scale = 0.5;
  p.rounding = Rounding::kRtna;
  ASSERT_TRUE(p.Validate(q.desc(), pool_rows.desc(), Hkv, D, 4, &seq_lens, &kv_indices, &kv_indptr, &q_lens).ok());
  auto ref = oracle::DecodeAttention(p, DecodeAttentionInputs{q.view(), pool_rows.view(), seq_lens.view(),
                                                              kv_indices.view(), kv_indptr.view(), q_lens.view()});
  ASSERT_TRUE(ref.ok()) << ref.status();
  ExpectBf16MatchesOracle(out, *ref, Rounding::kRtna, 1e-4, 0.8);

  // Usage errors: exit 2 naming the flag.
  r = Kernelctl({"decode", "--q=" + Path("dq.npy"), "--pool=" + pool, "--kv-indices=" + Path("dki.npy"),
                 "--kv-indptr=" + Path("dkp.npy"), "--out=" + Path("do.npy")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--seq-lens"));
  args = call;
  r = Kernelctl(args);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--out"));
  args.push_back("--out=" + Path("do.npy"));
  args.push_back("--round=up");
  r = Kernelctl(args);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("round"));
  // A server-side refusal is exit 1 with the field.
  r = Kernelctl({"decode", "--q=" + Save("dq3.npy", numerics::GaussianBf16({2, 2, 3, D}, seed + 2)),
                 "--pool=" + pool, "--seq-lens=" + Path("dsl.npy"), "--kv-indices=" + Path("dki.npy"),
                 "--kv-indptr=" + Path("dkp.npy"), "--out=" + Path("do.npy")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("q.shape[2]: expected a multiple of the pool's num_heads (2)"));
  r = Kernelctl({"help", "decode"}, false);
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--kv-indptr"));
}

TEST_F(KernelctlTest, MoeGateUpSwigluMatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::mt19937_64 rng(seed);
  const int64_t T = 4, K = 64, I = 32, E = 5, top_k = 2;
  HostTensor x = numerics::GaussianBf16({T, K}, seed);
  HostTensor ids = Ints({0, 3, 4, 1, 2, 0, 1, 4}, {T, top_k});
  HostTensor w13(DType::kFp4E2M1, {E, 2 * I, K}), w13s(DType::kE8M0, {E, 2 * I, K / 32});
  std::uniform_int_distribution<int> byte(0, 255), scale(121, 126);
  for (int64_t i = 0; i < w13.num_bytes(); ++i) w13.bytes()[i] = static_cast<uint8_t>(byte(rng));
  for (int64_t i = 0; i < w13s.num_bytes(); ++i) w13s.bytes()[i] = static_cast<uint8_t>(scale(rng));
  const std::string w13_path = Save("w13.npy", w13);
  auto packed = ReadNpyFile(w13_path);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->shape, (Shape{E, 2 * I, K / 2}));  // bytes on disk, elements on the wire
  RunResult r = Kernelctl({"moe", "--stage=gateup", "--swiglu", "--x=" + Save("x.npy", x),
                           "--topk-ids=" + Save("ids.npy", ids), "--w13=" + w13_path,
                           "--w13-scales=" + Save("w13s.npy", w13s), "--out=" + Path("moe_o.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  HostTensor out = ReadOutput("moe_o.npy");
  MoeParams p;
  p.stage = MoeStage::kGateUp;
  p.swiglu = true;
  const TensorDesc w13d = w13.desc(), w13sd = w13s.desc();
  ASSERT_TRUE(p.Validate(x.desc(), ids, nullptr, &w13d, &w13sd, nullptr, nullptr).ok());
  auto ref = oracle::Moe(p, MoeInputs{x.view(), ids.view(), {}, w13.view(), w13s.view(), {}, {}});
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(out.shape(), (Shape{T * top_k, I}));
  ExpectBf16MatchesOracle(out, *ref, Rounding::kRtne, 1e-4, 0.8);
  // The whole layer, with routing weights and the down projection.
  const int64_t N = K;
  HostTensor w2(DType::kFp4E2M1, {E, N, I}), w2s(DType::kE8M0, {E, N, I / 32});
  for (int64_t i = 0; i < w2.num_bytes(); ++i) w2.bytes()[i] = static_cast<uint8_t>(byte(rng));
  for (int64_t i = 0; i < w2s.num_bytes(); ++i) w2s.bytes()[i] = static_cast<uint8_t>(scale(rng));
  HostTensor weights(DType::kFp32, {T, top_k});
  for (int64_t i = 0; i < T * top_k; ++i) weights.data<float>()[i] = 0.25f + 0.125f * static_cast<float>(i % 5);
  r = Kernelctl({"moe", "--stage=layer", "--x=" + Path("x.npy"), "--topk-ids=" + Path("ids.npy"),
                 "--topk-weights=" + Save("tw.npy", weights), "--w13=" + w13_path,
                 "--w13-scales=" + Path("w13s.npy"), "--w2=" + Save("w2.npy", w2), "--w2-scales=" + Save("w2s.npy", w2s),
                 "--out=" + Path("layer_o.npy"), "--report-error"});
  ASSERT_EQ(r.code, 0) << r.err;
  HostTensor layer = ReadOutput("layer_o.npy");
  MoeParams pl;
  pl.stage = MoeStage::kLayer;
  const TensorDesc wd = weights.desc(), w2d = w2.desc(), w2sd = w2s.desc();
  ASSERT_TRUE(pl.Validate(x.desc(), ids, &wd, &w13d, &w13sd, &w2d, &w2sd).ok());
  auto lref = oracle::Moe(pl, MoeInputs{x.view(), ids.view(), weights.view(), w13.view(), w13s.view(), w2.view(),
                                        w2s.view()});
  ASSERT_TRUE(lref.ok()) << lref.status();
  ASSERT_EQ(layer.shape(), (Shape{T, N}));
  EXPECT_LT(RelRms(layer, *lref), 5e-3);
  // Float weights are refused with a message naming the file and the rule.
  r = Kernelctl({"moe", "--stage=gateup", "--x=" + Path("x.npy"), "--topk-ids=" + Path("ids.npy"),
                 "--w13=" + Path("x.npy"), "--w13-scales=" + Path("w13s.npy"), "--out=" + Path("moe_o.npy")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("x.npy"));
  EXPECT_THAT(r.err, HasSubstr("packed fp4_e2m1"));
}

TEST_F(KernelctlTest, PerHeadPoolWithFloatRows) {
  RunResult r = Kernelctl({"pool", "create", "--kind=per-head", "--slots=16", "--dtype=bf16", "--heads=2",
                           "--head-dim=64"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string pool = FirstWord(r.out);
  std::mt19937_64 rng(FreshSeed());
  HostTensor rows = WriteRandom("ph_rows.npy", {3, 2, 2, 64}, rng);  // float32, rounded to bf16 by kernelctl
  r = Kernelctl({"pool", "write", "--pool=" + pool, "--rows=" + Path("ph_rows.npy"),
                 "--slot-ids=" + Save("ph_slots.npy", Ints({5, 1, 15}))});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Kernelctl({"pool", "read", "--pool=" + pool, "--start=5", "--count=1", "--out=" + Path("ph_back.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  HostTensor back = ReadOutput("ph_back.npy");
  ASSERT_EQ(back.shape(), (Shape{1, 256}));
  EXPECT_EQ(0, std::memcmp(back.bytes(), rows.bytes(), 512));
  r = Kernelctl({"pool", "delete", "--pool=" + pool});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Kernelctl({"pool", "stats", "--pool=" + pool});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("error: NOT_FOUND: "));
  r = Kernelctl({"pool", "frobnicate"});
  EXPECT_EQ(r.code, 2);
}

// kernelctl ci --baseline: a baseline that matches no (job name, variant) of
// the suite gates nothing, so it fails (exit 1) instead of passing silently;
// the same baseline against the suite that made it still passes.
TEST_F(KernelctlTest, CiBaselineMatchingNothingFails) {
  auto write_suite = [&](const std::string& file, const std::string& suite, const std::string& job) {
    std::ofstream(Path(file)) << absl::StrCat(
        R"({"name": ")", suite, R"(", "jobs": [{"name": ")", job, R"(", "op": "OP_ATTENTION",)",
        R"( "attention": {"batch": 1, "heads_q": 2, "seq_q": 16, "head_dim": 64, "causal": true},)",
        R"( "variants": ["cpu"], "method": {"method": "METHOD_KERNEL", "warmup": 1, "iters": 2}}]})");
  };
  write_suite("ci_a.json", "ci_a", "ci_a/attention");
  write_suite("ci_b.json", "ci_b", "ci_b/attention");  // the same job under another name
  const std::string baseline = Path("ci_a_results.json");
  RunResult r = Kernelctl({"ci", "--suite=" + Path("ci_a.json"), "--junit=" + Path("ci_a.xml"),
                           "--results=" + baseline});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  ASSERT_THAT(ReadFile(baseline), HasSubstr("ci_a/attention"));

  // Its own results as the baseline (a limit far above timing noise): compared, passes.
  r = Kernelctl({"ci", "--suite=" + Path("ci_a.json"), "--baseline=" + baseline, "--max-regression=100000",
                 "--junit=" + Path("ci_a2.xml")});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("has no timed result")));
  EXPECT_THAT(ReadFile(Path("ci_a2.xml")), HasSubstr("vs baseline"));

  // A differently named suite against it: nothing to compare, exit 1 and why.
  r = Kernelctl({"ci", "--suite=" + Path("ci_b.json"), "--baseline=" + baseline, "--max-regression=100000",
                 "--junit=" + Path("ci_b.xml")});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("FAIL ci_b: the baseline ", baseline,
                                            " has no timed result for any job name and variant of this suite")));
  EXPECT_THAT(r.out, HasSubstr("1 failed"));
  EXPECT_THAT(ReadFile(Path("ci_b.xml")), ::testing::Not(HasSubstr("vs baseline")));
}

// A flag that only some modes need is a usage error (exit 2) naming the flag,
// before any input is read or sent; an op refusing a buffer of the wrong type
// says how to upload it with --dtype; every op prints its wall-time split.
TEST_F(KernelctlTest, UsageErrorsNameTheFlagAndTheFix) {
  const std::string none = Path("does_not_exist.npy");
  const std::vector<std::string> moe = {"moe", "--x=" + none, "--topk-ids=" + none, "--out=" + Path("u.npy")};
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--stage=layer", "--topk-weights=" + none, "--w13=" + none, "--w13-scales=" + none, "--w2-scales=" + none},
       "moe --stage=layer: missing required flag --w2"},
      {{"--stage=gateup", "--w13=" + none}, "moe --stage=gateup: missing required flag --w13-scales"},
      {{"--stage=down", "--weighted-sum", "--w2=" + none, "--w2-scales=" + none},
       "moe --stage=down --weighted-sum: missing required flag --topk-weights"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = moe;
    args.insert(args.end(), c.args.begin(), c.args.end());
    RunResult r = Kernelctl(args);
    EXPECT_EQ(r.code, 2) << c.message << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
  const std::vector<std::string> mla = {"mla-decode", "--q-lat=" + none, "--q-pe=" + none, "--out=" + Path("u.npy")};
  RunResult r = Kernelctl({mla[0], mla[1], mla[2], mla[3], "--pool=pool-x", "--seq-lens=" + none,
                           "--kv-indices=" + none});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("mla-decode --pool: missing required flag --kv-indptr"));
  r = Kernelctl({mla[0], mla[1], mla[2], mla[3], "--kv=" + none, "--kv-format=e4m3fn", "--kv-indptr=" + none});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--kv-indices and --kv-indptr are for --pool only"));

  // FP8 codes need descales; float inputs take none.
  HostTensor codes(DType::kFp8E4M3Fn, {1, 1, 8, 128});
  for (int64_t i = 0; i < codes.num_bytes(); ++i) codes.bytes()[i] = static_cast<uint8_t>(i % 0x70);
  const std::string c = Save("codes.npy", codes);
  HostTensor scale(DType::kFp32, {1});
  scale.data<float>()[0] = 0.5f;
  const std::string s = Save("descale.npy", scale);
  r = Kernelctl({"fp8-attention", "--q=" + c, "--k=" + c, "--v=" + c, "--q-descale=" + s, "--v-descale=" + s,
                 "--out=" + Path("u.npy")});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("with uint8 FP8 code inputs: missing required flag --k-descale"));
  r = Kernelctl({"fp8-attention", "--q=" + c, "--k=" + c, "--v=" + c, "--q-descale=" + s, "--k-descale=" + s,
                 "--v-descale=" + s, "--out=" + Path("u.npy")});
  EXPECT_EQ(r.code, 0) << r.err;
  HostTensor x = numerics::GaussianBf16({1, 1, 8, 128}, 5);
  const std::string xf = Save("float_q.npy", x);
  r = Kernelctl({"fp8-attention", "--q=" + xf, "--k=" + xf, "--v=" + xf, "--q-descale=" + s, "--out=" + Path("u.npy")});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--q-descale is only for uint8 FP8 code inputs"));

  // Packed FP4 weights uploaded without --dtype are a uint8 buffer: the op's
  // error names the buffer and the --dtype to upload it with.
  const int64_t E = 2, I = 32, K = 64;
  HostTensor w13(DType::kFp4E2M1, {E, 2 * I, K}), w13s(DType::kE8M0, {E, 2 * I, K / 32});
  for (int64_t i = 0; i < w13.num_bytes(); ++i) w13.bytes()[i] = static_cast<uint8_t>(i * 37);
  for (int64_t i = 0; i < w13s.num_bytes(); ++i) w13s.bytes()[i] = 125;
  r = Kernelctl({"buffers", "upload", "--in=" + Save("w13_packed.npy", w13)});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string id = FirstWord(r.out);
  r = Kernelctl({"moe", "--stage=gateup", "--x=" + Save("mx.npy", numerics::GaussianBf16({2, K}, 6)),
                 "--topk-ids=" + Save("mids.npy", Ints({0, 1, 1, 0}, {2, 2})), "--w13=buffer:" + id,
                 "--w13-scales=" + Save("w13s_e8m0.npy", w13s), "--out=" + Path("u.npy")});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("error: INVALID_ARGUMENT: w13: expected fp4_e2m1"));
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("buffer ", id, " holds")));
  EXPECT_THAT(r.err, HasSubstr("kernelctl buffers upload --dtype=fp4_e2m1"));
  EXPECT_EQ(Kernelctl({"buffers", "free", "--id=" + id}).code, 0);

  // The wall-time split: the inputs (> 1 MiB in all) travel as temporary
  // buffers, so upload and download are both timed.
  const std::string big = Save("big_q.npy", numerics::GaussianBf16({1, 4, 1100, 128}, 7));
  r = Kernelctl({"attention", "--q=" + big, "--k=" + big, "--v=" + big, "--out=" + Path("u.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  std::smatch m;
  const std::regex wall("wall: wall_ms=([0-9.]+): upload_ms=([0-9.]+) queue_ms=([0-9.]+) run_ms=([0-9.]+) "
                        "transfer_ms=([0-9.]+) download_ms=([0-9.]+)");
  ASSERT_TRUE(std::regex_search(r.out, m, wall)) << r.out;
  double parts = 0;
  for (int i = 2; i <= 6; ++i) parts += std::stod(m[i]);
  EXPECT_GT(std::stod(m[2]), 0) << m[0];
  EXPECT_GT(std::stod(m[6]), 0) << m[0];
  EXPECT_GT(std::stod(m[4]), 0) << m[0];
  EXPECT_LE(parts, std::stod(m[1]) * 1.01 + 0.05) << m[0];
}

TEST_F(KernelctlTest, UnreachableServerExitsOne) {
  RunResult r = Kernelctl({"--server=127.0.0.1:1", "--timeout=1", "devices"}, false);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("error: UNAVAILABLE: "), HasSubstr("error: DEADLINE_EXCEEDED: ")));
}

}  // namespace
}  // namespace kernelserve
