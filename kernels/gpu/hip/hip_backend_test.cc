// The HIP backend's start-up and dispatch. No AMD GPU exists on these
// machines, so the real runtime (where installed) only answers "no device";
// the device paths run against a stand-in for the runtime: a table of test
// functions in Runtime's shape, one device that accepts or refuses a code
// object. What it proves is the backend's own logic (which code objects it
// loads, health, the UNIMPLEMENTED and NOT_FOUND answers), not ROCm's.
#include "kernels/gpu/hip/hip_backend.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/fp8_attention/fp8_attention_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/mla/mla_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"
#include "kernels/gpu/fp8_attention/fp8_quantize_args.h"
#include "kernels/gpu/launch_test_fixtures.h"
#include "kernels/gpu/moe/moe_params.h"
#include "kernels/gpu/moe/moe_plan.h"

namespace kernelserve {
namespace gpu {
namespace hip {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(CreateHipBackend, ARuntimeThatDidNotLoadIsTheAnswer) {
  const absl::StatusOr<Runtime> none = absl::UnavailableError("cannot load the HIP runtime: tried x");
  auto b = CreateHipBackendWith(none, {});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status(), none.status());
}

TEST(CreateHipBackend, TheRealRuntimeHereFindsNoDevice) {
  const absl::StatusOr<Runtime>& rt = SharedRuntime();
  auto b = CreateHipBackendWith(rt, {});
  ASSERT_FALSE(b.ok()) << "an AMD GPU answers on a machine documented to have none";
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable);
  if (rt.ok()) {
    EXPECT_THAT(std::string(b.status().message()), StartsWith("no HIP device: hipGetDeviceCount: "));
    EXPECT_THAT(b.status().message(), HasSubstr(rt->library));
    // The answer says what to look at next on this host.
    EXPECT_THAT(b.status().message(), HasSubstr(KfdHint("/dev/kfd")));
  } else {
    EXPECT_THAT(std::string(b.status().message()), StartsWith("cannot load the HIP runtime"));
  }
}

// A file under the test's temporary directory, created empty with `mode`.
std::string TempNode(const char* name, mode_t mode) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr) << path;
  if (f != nullptr) std::fclose(f);
  EXPECT_EQ(chmod(path.c_str(), mode), 0) << path;
  return path;
}

TEST(KfdHint, AMissingNodeNamesTheDriverAndTheContainerDevices) {
  EXPECT_EQ(KfdHint("/nonexistent/kfd"),
            "; /nonexistent/kfd does not exist: this machine has no amdgpu kernel driver, or the container was "
            "started without --device=/dev/kfd --device=/dev/dri");
  EXPECT_EQ(KfdHint(TempNode("kfd_open", 0600).c_str()), "");
}

TEST(KfdHint, ANodeThisUserCannotOpenNamesTheGroups) {
  const std::string node = TempNode("kfd_closed", 0);
  if (geteuid() == 0) GTEST_SKIP() << "running as root, which opens a file of mode 0: this case needs another user";
  EXPECT_EQ(KfdHint(node.c_str()),
            "; " + node + " exists but this user cannot open it (it belongs to the render or video group)");
}

// The stand-in's one device: the architecture whose code objects it takes.
std::string g_device_arch;
int g_loads = 0;
constexpr Error kNoBinary = kErrorNoBinaryForGpu;

Runtime StandIn() {
  Runtime r;
  r.library = "stand-in";
  r.runtime_version = 60000000;
  r.GetDeviceCount = [](int* n) { *n = 1; return kSuccess; };
  r.SetDevice = [](int d) { return d == 0 ? kSuccess : 101; };
  r.DeviceGetAttribute = [](int* v, int attr, int) {
    *v = attr == kAttrMultiprocessorCount ? 304 : attr == kAttrClockRateKhz ? 2100000 : 0;
    return kSuccess;
  };
  r.DeviceGetName = [](char* name, int len, int) {
    std::strncpy(name, "stand-in device", len);
    return kSuccess;
  };
  r.DeviceTotalMem = [](size_t* b, int) { *b = size_t{192} << 30; return kSuccess; };
  r.DriverGetVersion = [](int* v) { *v = 1; return kSuccess; };
  r.StreamCreate = [](Stream* s) { *s = reinterpret_cast<Stream>(0x10); return kSuccess; };
  r.StreamDestroy = [](Stream) { return kSuccess; };
  // The "code object" bytes are its architecture's name.
  r.ModuleLoadData = [](Module* m, const void* data) {
    ++g_loads;
    if (g_device_arch != static_cast<const char*>(data)) return kNoBinary;
    *m = reinterpret_cast<Module>(0x20);
    return kSuccess;
  };
  r.ModuleUnload = [](Module) { return kSuccess; };
  r.GetErrorName = [](Error e) { return e == kNoBinary ? "hipErrorNoBinaryForGpu" : "hipErrorOther"; };
  r.GetErrorString = [](Error e) { return e == kNoBinary ? "no kernel image is available" : "other"; };
  return r;
}

const unsigned char kGfx942[] = "gfx942";
const unsigned char kGfx950[] = "gfx950";
std::vector<CodeObject> Objects() {
  return {{"mla_gfx950", "gfx950", kGfx950, sizeof(kGfx950), {"K"}},
          {"mla_gfx942", "gfx942", kGfx942, sizeof(kGfx942), {"KsMlaDecodeA16w8Gfx942"}}};
}

TEST(HipBackendStandIn, TakesTheArchitectureWhoseCodeObjectsLoad) {
  g_device_arch = "gfx942";
  const absl::StatusOr<Runtime> rt = StandIn();
  auto b = CreateHipBackendWith(rt, Objects());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->Name(), "hip");
  ASSERT_EQ((*b)->DeviceCount(), 1);
  const DeviceInfo info = (*b)->GetDeviceInfo(0);
  EXPECT_TRUE(info.healthy) << info.health_reason;
  EXPECT_EQ(info.backend, "hip");
  EXPECT_EQ(info.name, "stand-in device");
  EXPECT_EQ(info.compute_units, 304);
  EXPECT_EQ(info.clock_mhz, 2100);
  EXPECT_EQ(info.driver, "HIP runtime 60000000, driver 1 (stand-in); code objects gfx942");
  EXPECT_FALSE((*b)->GetDeviceInfo(1).healthy);

  // Calls no gfx942 kernel serves say why, and leave the device healthy.
  TensorView out;
  auto s = (*b)->Fp8Attention(0, Fp8AttentionParams{}, Fp8AttentionInputs{}, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "hip backend has no gfx942 kernel for fp8_attention (mfma_fp8: format e4m3fn (serves "
                         "e4m3fnuz))");
  AttentionParams att;
  att.head_dim = 96;
  s = (*b)->Attention(0, att, TensorView{}, TensorView{}, TensorView{}, out);
  EXPECT_EQ(s.message(), "hip backend has no gfx942 kernel for attention (mfma_bf16: attention: the hip backend serves "
                         "head_dim 64, 128 or 256 (got 96))");
  s = (*b)->Fp8Attention(0, Fp8AttentionParams{}, Fp8AttentionInputs{}, out);
  EXPECT_EQ(s.message(), "hip backend has no gfx942 kernel for fp8_attention (mfma_fp8: format e4m3fn (serves "
                         "e4m3fnuz))");
  MoeParams moe;
  moe.stage = MoeStage::kDown;
  moe.inter = 100;
  s = (*b)->Moe(0, moe, MoeInputs{}, out);
  EXPECT_EQ(s.message(), "hip backend has no gfx942 kernel for moe_down (mfma_mxfp4: moe: the hip backend needs I % 32 "
                         "== 0 for down)");
  MlaDecodeParams mla;
  mla.kv_dtype = DType::kFp8E4M3Fn;
  s = (*b)->MlaDecode(0, mla, MlaDecodeInputs{}, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("mfma_a16w8: KV fp8_e4m3fn (serves fp8_e4m3fnuz)"));
  EXPECT_TRUE((*b)->GetDeviceInfo(0).healthy);

  // The table by name.
  ASSERT_EQ((*b)->KernelVariants().size(), 4u);
  EXPECT_EQ((*b)->KernelVariants()[0].name, "mfma_bf16");
  EXPECT_EQ((*b)->KernelVariants()[1].name, "mfma_fp8");
  EXPECT_EQ((*b)->KernelVariants()[2].name, "mfma_a16w8");
  EXPECT_EQ((*b)->KernelVariants()[3].name, "mfma_mxfp4");
  OpCall call;
  call.op = BenchOp::kMlaDecode;
  s = (*b)->RunKernelVariant(0, "wgmma_roles", call, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "hip backend has no mla_decode kernel variant \"wgmma_roles\" (it has: mfma_a16w8)");
  call.mla.kv_dtype = DType::kFp8E4M3Fn;
  s = (*b)->RunKernelVariant(0, "mfma_a16w8", call, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "hip.mfma_a16w8 does not serve this call: KV fp8_e4m3fn (serves fp8_e4m3fnuz)");
  s = (*b)->Synchronize(3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "device: expected 0..0 on backend hip, got 3");
}

// rocBLAS as the backend finds it: absent (this machine), or present with
// a handle it cannot create.
const absl::StatusOr<Rocblas>& NoRocblas() {
  static const auto* b = new absl::StatusOr<Rocblas>(LoadRocblas({"librocblas-absent.so.9"}));
  return *b;
}
const absl::StatusOr<Rocblas>& RocblasWithoutHandles() {
  static const auto* b = [] {
    Rocblas r;
    r.library = "librocblas-stand-in.so";
    r.CreateHandle = [](Rocblas::Handle*) { return 15; };  // rocblas_status_arch_mismatch
    r.DestroyHandle = [](Rocblas::Handle) { return 0; };
    return new absl::StatusOr<Rocblas>(r);
  }();
  return *b;
}

TEST(HipBackendStandIn, TheGemmCeilingIsRocblasOrWhyNot) {
  g_device_arch = "gfx942";
  absl::StatusOr<Runtime> rt = StandIn();
  rt->Malloc = [](void** p, size_t bytes) {
    *p = std::malloc(bytes);
    return kSuccess;
  };
  rt->Free = [](void* p) {
    std::free(p);
    return kSuccess;
  };
  rt->MemcpyAsync = [](void*, const void*, size_t, int, Stream) { return kSuccess; };
  rt->StreamSynchronize = [](Stream) { return kSuccess; };
  auto b = CreateHipBackendWith(rt, Objects(), NoRocblas);
  ASSERT_TRUE(b.ok()) << b.status();
  auto c = (*b)->MeasureGemmCeiling(0, {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(c.status().message()),
              StartsWith("cannot load rocBLAS for the GEMM ceiling (install ROCm's rocBLAS"));
  EXPECT_TRUE((*b)->GetDeviceInfo(0).healthy);
  EXPECT_EQ((*b)->MeasureGemmCeiling(4, {}).status().code(), absl::StatusCode::kInvalidArgument);

  b = CreateHipBackendWith(rt, Objects(), RocblasWithoutHandles);
  ASSERT_TRUE(b.ok()) << b.status();
  c = (*b)->MeasureGemmCeiling(0, {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(c.status().message(), "rocblas_create_handle: rocblas_status 15");
  EXPECT_TRUE((*b)->GetDeviceInfo(0).healthy);  // a library's refusal is no device fault
  EXPECT_EQ((*b)->MeasureGemmCeiling(4, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HipBackendStandIn, ADeviceNoCodeObjectLoadsOnIsListedUnhealthyWithWhy) {
  g_device_arch = "gfx90a";
  const absl::StatusOr<Runtime> rt = StandIn();
  auto b = CreateHipBackendWith(rt, Objects());
  ASSERT_TRUE(b.ok()) << b.status();
  const DeviceInfo info = (*b)->GetDeviceInfo(0);
  EXPECT_FALSE(info.healthy);
  EXPECT_EQ(info.health_reason,
            "no code object of this build loads on it: gfx942: mla_gfx942: hipErrorNoBinaryForGpu (no kernel image is "
            "available) (not this device's architecture); gfx950: mla_gfx950: hipErrorNoBinaryForGpu (no kernel "
            "image is available) (not this device's architecture)");
  TensorView out;
  const absl::Status s = (*b)->MlaDecode(0, MlaDecodeParams{}, MlaDecodeInputs{}, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), StartsWith("hip device 0 is unhealthy: no code object of this build loads on it"));
}

TEST(HipBackendStandIn, ABuildWithoutCodeObjectsSaysSo) {
  g_device_arch = "gfx942";
  g_loads = 0;
  const absl::StatusOr<Runtime> rt = StandIn();
  auto b = CreateHipBackendWith(rt, {});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(g_loads, 0);
  EXPECT_EQ((*b)->GetDeviceInfo(0).health_reason, "this build embeds no AMD code objects");
}

// What the stand-in records of a call's launches: the kernels by symbol,
// their grids and copies of their one argument struct; and the memsets.
struct Launched {
  std::string symbol;
  unsigned gx, gy, gz, threads;
  std::vector<unsigned char> args;
  bool captured;  // queued while the stream was being captured
};
// The stand-in stream's capture state, and what its graph API saw.
bool g_capturing = false;
int g_mallocs = 0, g_graph_launches = 0, g_graphs_alive = 0, g_capture_mode = -1;
std::vector<std::string> g_symbols;
std::vector<Launched> g_launches;
struct Memset {
  void* p;
  int value;
  size_t bytes;
};
std::vector<Memset> g_memsets;

Runtime RecordingStandIn() {
  Runtime r = StandIn();
  r.Malloc = [](void** p, size_t bytes) {
    if (g_capturing) return 900;  // hipErrorStreamCaptureUnsupported: no allocation in a capture
    ++g_mallocs;
    *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    return kSuccess;
  };
  r.Free = [](void* p) { std::free(p); return kSuccess; };
  r.StreamSynchronize = [](Stream) { return g_capturing ? 900 : kSuccess; };
  r.EventCreate = [](Event* e) {
    *e = reinterpret_cast<Event>(0x30);
    return kSuccess;
  };
  r.EventDestroy = [](Event) { return kSuccess; };
  r.EventRecord = [](Event, Stream) { return kSuccess; };
  r.EventSynchronize = [](Event) { return kSuccess; };
  r.EventElapsedTime = [](float* ms, Event, Event) {
    *ms = 0.5f * static_cast<float>(g_graph_launches);  // 0.5 ms a replay, counted from the warm-ups
    return kSuccess;
  };
  r.StreamBeginCapture = [](Stream, int mode) {
    g_capture_mode = mode;
    g_capturing = true;
    return kSuccess;
  };
  r.StreamEndCapture = [](Stream, Graph* graph) {
    g_capturing = false;
    ++g_graphs_alive;
    *graph = reinterpret_cast<Graph>(0x40);
    return kSuccess;
  };
  r.StreamIsCapturing = [](Stream, int* status) {
    *status = g_capturing ? 1 : kCaptureStatusNone;
    return kSuccess;
  };
  r.GraphInstantiate = [](GraphExec* exec, Graph, void*, char*, size_t) {
    ++g_graphs_alive;
    *exec = reinterpret_cast<GraphExec>(0x50);
    return kSuccess;
  };
  r.GraphLaunch = [](GraphExec, Stream) {
    ++g_graph_launches;
    return kSuccess;
  };
  r.GraphExecDestroy = [](GraphExec) {
    --g_graphs_alive;
    return kSuccess;
  };
  r.GraphDestroy = [](Graph) {
    --g_graphs_alive;
    return kSuccess;
  };
  r.GetLastError = []() { return kSuccess; };
  r.MemsetAsync = [](void* p, int v, size_t bytes, Stream) {
    g_memsets.push_back({p, v, bytes});
    return kSuccess;
  };
  r.ModuleGetFunction = [](Function* f, Module, const char* symbol) {
    g_symbols.push_back(symbol);
    *f = reinterpret_cast<Function>(g_symbols.size());
    return kSuccess;
  };
  r.ModuleLaunchKernel = [](Function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned, unsigned,
                            unsigned, Stream, void** args, void**) {
    const std::string& symbol = g_symbols[reinterpret_cast<size_t>(f) - 1];
    // The MoE routing and weighted-sum kernels take several arguments, of
    // which none is recorded.
    const size_t size = symbol.find("KsAttention") == 0 ? sizeof(attention::gfx942::Gfx942AttnParams)
                        : symbol.find("KsFp8Attn") == 0 ? sizeof(fp8_attention::Fp8KernelParams)
                        : symbol.find("KsMoe") == 0     ? sizeof(moe::GemmParams)
                        : symbol.find("KsMla") == 0 || symbol == "MlaMergeKernel" ? sizeof(mla::KParams)
                        : symbol.find("Moe") == 0       ? 0
                                                        : sizeof(fp8_attention::QuantizeArgs);
    const auto* a = static_cast<const unsigned char*>(args[0]);
    g_launches.push_back({symbol, gx, gy, gz, bx, std::vector<unsigned char>(a, a + size), g_capturing});
    return kSuccess;
  };
  return r;
}

template <class T>
T ArgsOf(const Launched& l) {
  T t;
  EXPECT_EQ(l.args.size(), sizeof(T)) << l.symbol;
  std::memcpy(&t, l.args.data(), sizeof(T));
  return t;
}

// The gfx942 FP8 attention object as the embedded registry names its kernels.
std::vector<CodeObject> Fp8Objects() {
  std::vector<std::string> names = {"_ZN11kernelserve3gpu12fp8_attention12_GLOBAL__N_110AmaxKernelENS1_12QuantizeArgsE",
                                    "_ZN11kernelserve3gpu12fp8_attention12_GLOBAL__N_114QuantizeKernelENS1_12QuantizeArgsE",
                                    "_ZN11kernelserve3gpu12fp8_attention12_GLOBAL__N_113DescaleKernelENS1_12QuantizeArgsE"};
  for (const auto& by_dqk : fp8_attention::gfx942::kKernels) {
    for (const auto& by_mask : by_dqk) {
      for (const char* k : by_mask) names.push_back(k);
    }
  }
  return {{"fp8_gfx942", "gfx942", kGfx942, sizeof(kGfx942), names}};
}

// A recording stand-in over `objects`, from empty records.
class RecordingFixture : public ::testing::Test {
 protected:
  explicit RecordingFixture(std::vector<CodeObject> objects) : objects_(std::move(objects)) {}
  void SetUp() override {
    g_device_arch = "gfx942";
    g_symbols.clear();
    g_launches.clear();
    g_memsets.clear();
    b_ = CreateHipBackendWith(rt_, objects_);
    ASSERT_TRUE(b_.ok()) << b_.status();
  }
  const absl::StatusOr<Runtime> rt_ = RecordingStandIn();
  const std::vector<CodeObject> objects_;  // the backend keeps pointers to them
  absl::StatusOr<std::unique_ptr<Backend>> b_;
};

// Over the FP8 attention object.
class Fp8StandIn : public RecordingFixture {
 protected:
  Fp8StandIn() : RecordingFixture(Fp8Objects()) {}
};

TEST_F(Fp8StandIn, Fp8AttentionOnBf16InputsQuantizesThenLaunchesTheKernelOfTheCall) {
  auto& b = b_;

  Fp8AttentionParams p;
  p.layout = Layout::kBshd;
  p.causal = true;
  p.format = Fp8Format::kE4M3Fnuz;
  p.p_mode = PMode::kLean;
  p.hadamard = true;
  p.descale_mode = DescaleMode::kPerHead;
  const TensorDesc q{DType::kBf16, {2, 100, 4, 192}}, k{DType::kBf16, {2, 130, 2, 192}},
      v{DType::kBf16, {2, 130, 2, 128}};
  ASSERT_TRUE(p.Validate(q, k, v, nullptr, nullptr, nullptr).ok());
  Fp8AttentionInputs in;
  in.q = {q, reinterpret_cast<void*>(0x1000)};
  in.k = {k, reinterpret_cast<void*>(0x2000)};
  in.v = {v, reinterpret_cast<void*>(0x3000)};
  TensorView out{p.OutputDesc(), reinterpret_cast<void*>(0x4000)};
  const absl::Status s = (*b)->Fp8Attention(0, p, in, out);
  ASSERT_TRUE(s.ok()) << s;

  // amax zeroed: one word per (batch, head) of q, k and v.
  ASSERT_EQ(g_memsets.size(), 1u);
  EXPECT_EQ(g_memsets[0].value, 0);
  EXPECT_EQ(g_memsets[0].bytes, (2u * 4 + 2 * 2 * 2) * 4);
  ASSERT_EQ(g_launches.size(), 10u);
  const void* x[3] = {in.q.data, in.k.data, in.v.data};
  fp8_attention::QuantizeArgs qa[3];
  for (int t = 0; t < 3; ++t) {
    const char* pass[3] = {"10AmaxKernel", "14QuantizeKernel", "13DescaleKernel"};
    for (int i = 0; i < 3; ++i) {
      const Launched& l = g_launches[3 * t + i];
      EXPECT_NE(l.symbol.find(pass[i]), std::string::npos) << l.symbol;
      EXPECT_EQ(l.threads, 256u);
      const auto a = ArgsOf<fp8_attention::QuantizeArgs>(l);
      EXPECT_EQ(a.x, x[t]);
      EXPECT_TRUE(a.fnuz && a.per_head && a.bshd);
      EXPECT_EQ(a.hadamard, t < 2);  // Q and K rotated, V not
      EXPECT_EQ(a.dim, t < 2 ? 192 : 128);
      EXPECT_EQ(a.amax, static_cast<unsigned int*>(g_memsets[0].p) + (t == 0 ? 0 : t == 1 ? 8 : 12));
      qa[t] = a;
    }
  }
  EXPECT_EQ(g_launches[0].gx, (qa[0].rows + 7) / 8);  // 8 rows per block
  const Launched& attn = g_launches[9];
  EXPECT_EQ(attn.symbol, "KsFp8AttnGfx942D192CausalLean");
  EXPECT_EQ(attn.gx, 2u);  // 100 rows in blocks of 64
  EXPECT_EQ(attn.gy, 4u);
  EXPECT_EQ(attn.gz, 2u);
  EXPECT_EQ(attn.threads, 256u);
  const auto kp = ArgsOf<fp8_attention::Fp8KernelParams>(attn);
  EXPECT_EQ(kp.q, qa[0].codes);
  EXPECT_EQ(kp.k, qa[1].codes);
  EXPECT_EQ(kp.v, qa[2].codes);
  EXPECT_EQ(kp.k_ds, qa[1].descale);
  EXPECT_EQ(kp.q_ds_per_head + kp.k_ds_per_head + kp.v_ds_per_head, 3);
  EXPECT_EQ(kp.out, out.data);
  EXPECT_EQ(kp.seq_q, 100);
  EXPECT_EQ(kp.seq_kv, 130);
  EXPECT_EQ(kp.heads_kv, 2);
  EXPECT_EQ(kp.bshd, 1);
  EXPECT_TRUE((*b)->GetDeviceInfo(0).healthy);
}

TEST_F(Fp8StandIn, Fp8AttentionOnFnuzInputsLaunchesOnlyTheKernel) {
  auto& b = b_;
  Fp8AttentionParams p;
  p.causal = false;
  p.format = Fp8Format::kE4M3Fnuz;
  p.p_mode = PMode::kExact;
  const TensorDesc t{DType::kFp8E4M3Fnuz, {1, 2, 65, 128}}, ds{DType::kFp32, {1}};
  ASSERT_TRUE(p.Validate(t, t, t, &ds, &ds, &ds).ok());
  Fp8AttentionInputs in;
  in.q = {t, reinterpret_cast<void*>(0x1000)};
  in.k = {t, reinterpret_cast<void*>(0x2000)};
  in.v = {t, reinterpret_cast<void*>(0x3000)};
  in.q_descale = {ds, reinterpret_cast<void*>(0x5000)};
  in.k_descale = {ds, reinterpret_cast<void*>(0x5004)};
  in.v_descale = {ds, reinterpret_cast<void*>(0x5008)};
  TensorView out{p.OutputDesc(), reinterpret_cast<void*>(0x4000)};
  ASSERT_TRUE((*b)->RunKernelVariant(0, "mfma_fp8", MakeOpCall(p, in), out).ok());
  EXPECT_TRUE(g_memsets.empty());
  ASSERT_EQ(g_launches.size(), 1u);
  EXPECT_EQ(g_launches[0].symbol, "KsFp8AttnGfx942D128FullExact");
  EXPECT_EQ(g_launches[0].gx, 2u);
  const auto kp = ArgsOf<fp8_attention::Fp8KernelParams>(g_launches[0]);
  EXPECT_EQ(kp.q, in.q.data);
  EXPECT_EQ(kp.v_ds, in.v_descale.data);
  EXPECT_EQ(kp.q_ds_per_head, 0);
  EXPECT_EQ(kp.bshd, 0);
}

// A recording stand-in over the bf16 attention objects (304 CUs).
class AttentionStandIn : public RecordingFixture {
 protected:
  // One forward and one aux object per head dim, as embedded.
  AttentionStandIn() : RecordingFixture([] {
    std::vector<CodeObject> o;
    for (const attention::gfx942::HdimKernels& k : attention::gfx942::kKernels) {
      o.push_back({"attention_fwd_gfx942", "gfx942", kGfx942, sizeof(kGfx942), {k.fwd, k.causal}});
      o.push_back({"attention_aux_gfx942", "gfx942", kGfx942, sizeof(kGfx942), {k.v_transpose, k.merge}});
    }
    return o;
  }()) {}
};

TEST_F(AttentionStandIn, SmallGridTransposesVSplitsEveryItemAlongKvAndMerges) {
  // 1 x 2 heads x 3 blocks of 384 rows = 6 items on 304 CUs, 32 K tiles
  // each: 8 chunks per item (kMinTilesPerSplit), merged.
  AttentionParams p;
  p.layout = Layout::kBshd;
  p.rounding = Rounding::kRtna;
  const TensorDesc t{DType::kBf16, {1, 1024, 2, 128}};
  ASSERT_TRUE(p.Validate(t, t, t).ok());
  const TensorView q{t, reinterpret_cast<void*>(0x1000)}, k{t, reinterpret_cast<void*>(0x2000)},
      v{t, reinterpret_cast<void*>(0x3000)};
  TensorView out{p.OutputDesc(), reinterpret_cast<void*>(0x4000)};
  const absl::Status s = (*b_)->Attention(0, p, q, k, v, out);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(g_launches.size(), 3u);
  EXPECT_EQ(g_launches[0].symbol, attention::gfx942::KernelsOf(128).v_transpose);
  EXPECT_EQ(g_launches[0].gx, 1024u / 64);
  EXPECT_EQ(g_launches[0].gy, 2u);
  EXPECT_EQ(g_launches[0].threads, 256u);
  EXPECT_EQ(g_launches[1].symbol, attention::gfx942::KernelsOf(128).fwd);
  EXPECT_EQ(g_launches[1].gx, 6u * 8);
  EXPECT_EQ(g_launches[1].gy, 1u);
  EXPECT_EQ(g_launches[1].threads, 512u);
  EXPECT_EQ(g_launches[2].symbol, attention::gfx942::KernelsOf(128).merge);
  EXPECT_EQ(g_launches[2].gx, 6u * 384 / 2);
  const auto a = ArgsOf<attention::gfx942::Gfx942AttnParams>(g_launches[1]);
  EXPECT_EQ(a.f.q, q.data);
  EXPECT_EQ(a.f.v, v.data);
  EXPECT_EQ(a.f.o, out.data);
  EXPECT_EQ(a.f.rounding, attention::kFlashRtna);
  EXPECT_EQ(a.splits, 8);
  EXPECT_EQ(a.full_items, 0);
  EXPECT_EQ(a.tail_items, 6);
  ASSERT_NE(a.vt, nullptr);
  // The partials follow V^T in the one workspace.
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(a.part_o), reinterpret_cast<const uint8_t*>(a.vt) + 2 * 128 * 1024 * 2);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(a.part_ml),
            reinterpret_cast<const uint8_t*>(a.part_o) + size_t{6} * 8 * 384 * 128 * 4);
  // Every kernel of the call reads the same arguments.
  EXPECT_EQ(g_launches[0].args, g_launches[1].args);
  EXPECT_EQ(g_launches[2].args, g_launches[1].args);
  EXPECT_TRUE((*b_)->GetDeviceInfo(0).healthy);
}

TEST_F(AttentionStandIn, HeadDim64LaunchesItsOwnInstantiations) {
  // d64: 1 x 8 heads x 11 blocks of 384 rows = 88 items on 304 CUs at two
  // CTAs per CU: 6 chunks each, merged 4 rows per block.
  AttentionParams p;
  const TensorDesc t64{DType::kBf16, {1, 8, 4096, 64}};
  ASSERT_TRUE(p.Validate(t64, t64, t64).ok());
  const TensorView q{t64, reinterpret_cast<void*>(0x1000)};
  TensorView out{p.OutputDesc(), reinterpret_cast<void*>(0x4000)};
  ASSERT_TRUE((*b_)->Attention(0, p, q, q, q, out).ok());
  ASSERT_EQ(g_launches.size(), 3u);
  EXPECT_EQ(g_launches[0].symbol, "KsAttentionVTransposeHdim64Gfx942");
  EXPECT_EQ(g_launches[0].gx, 4096u / 64);
  EXPECT_EQ(g_launches[1].symbol, "KsAttentionFwdBf16Hdim64Gfx942");
  EXPECT_EQ(g_launches[1].gx, 88u * 6);
  EXPECT_EQ(g_launches[1].threads, 512u);
  EXPECT_EQ(g_launches[2].symbol, "KsAttentionMergeHdim64Gfx942");
  EXPECT_EQ(g_launches[2].gx, 88u * 384 / 4);
  const auto a = ArgsOf<attention::gfx942::Gfx942AttnParams>(g_launches[1]);
  EXPECT_EQ(a.head_dim, 64);
  EXPECT_EQ(a.splits, 6);
  EXPECT_EQ(a.vt_head_stride, 64 * 4096);
}

TEST_F(AttentionStandIn, HeadDim256LaunchesItsOwnInstantiations) {
  // d256 causal: 1 x 4 heads x 16 blocks of 256 rows = 64 items on 304 CUs,
  // the longest (block 15) 128 K tiles: 4 chunks each, one row per merge
  // block.
  AttentionParams p;
  p.causal = true;
  const TensorDesc t256{DType::kBf16, {1, 4, 4096, 256}};
  ASSERT_TRUE(p.Validate(t256, t256, t256).ok());
  const TensorView q{t256, reinterpret_cast<void*>(0x1000)};
  TensorView out{p.OutputDesc(), reinterpret_cast<void*>(0x4000)};
  const absl::Status s = (*b_)->Attention(0, p, q, q, q, out);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(g_launches.size(), 3u);
  EXPECT_EQ(g_launches[0].symbol, "KsAttentionVTransposeHdim256Gfx942");
  EXPECT_EQ(g_launches[1].symbol, "KsAttentionFwdBf16CausalHdim256Gfx942");
  EXPECT_EQ(g_launches[2].symbol, "KsAttentionMergeHdim256Gfx942");
  const auto a = ArgsOf<attention::gfx942::Gfx942AttnParams>(g_launches[1]);
  EXPECT_EQ(a.head_dim, 256);
  EXPECT_EQ(a.q_blocks, 16);
  EXPECT_EQ(a.tail_items, 64);
  EXPECT_EQ(a.splits, 4);
  EXPECT_EQ(g_launches[1].gx, 64u * 4);
  EXPECT_EQ(g_launches[2].gx, 64u * 256);
  EXPECT_TRUE((*b_)->GetDeviceInfo(0).healthy);
}

TEST_F(AttentionStandIn, EvenGridRunsWithoutMerge) {
  // 1 x 38 heads x 8 blocks = 304 items: one full round, causal.
  AttentionParams p;
  p.causal = true;
  const TensorDesc q{DType::kBf16, {1, 38, 3072, 128}}, kv{DType::kBf16, {1, 2, 3072, 128}};
  ASSERT_TRUE(p.Validate(q, kv, kv).ok());
  const TensorView qv{q, reinterpret_cast<void*>(0x1000)}, kvv{kv, reinterpret_cast<void*>(0x2000)};
  TensorView out{p.OutputDesc(), reinterpret_cast<void*>(0x4000)};
  ASSERT_TRUE((*b_)->Attention(0, p, qv, kvv, kvv, out).ok());
  ASSERT_EQ(g_launches.size(), 2u);
  EXPECT_EQ(g_launches[1].symbol, attention::gfx942::KernelsOf(128).causal);
  EXPECT_EQ(g_launches[1].gx, 304u);
  const auto a = ArgsOf<attention::gfx942::Gfx942AttnParams>(g_launches[1]);
  EXPECT_EQ(a.splits, 1);
  EXPECT_EQ(a.part_o, nullptr);
  EXPECT_EQ(a.f.group, 19);
}

// Over the MLA object as embedded: both CTAs and the merge.
class MlaStandIn : public RecordingFixture {
 protected:
  MlaStandIn()
      : RecordingFixture({{"mla_gfx942", "gfx942", kGfx942, sizeof(kGfx942),
                           {mla::gfx942::kDecodeKernel, mla::gfx942::kDecodePosKernel, mla::gfx942::kMergeKernel}}}) {}

  // A contiguous call of `batch` requests of 150000 tokens on stand-in addresses.
  absl::Status Call(int64_t batch, int64_t q_len) {
    const TensorDesc q{DType::kBf16, {batch, q_len, 16, kMlaLatentDim}}, pe{DType::kBf16, {batch, q_len, 16, kMlaRopeDim}};
    const TensorDesc kv{DType::kFp8E4M3Fnuz, {batch, 150000, kMlaRowDim}};
    MlaDecodeParams p;
    KS_RETURN_IF_ERROR(p.Validate(q, pe, kv, false, 1, nullptr, nullptr, nullptr, nullptr));
    MlaDecodeInputs in;
    in.q_lat = TensorView{q, reinterpret_cast<void*>(0x1000)};
    in.q_pe = TensorView{pe, reinterpret_cast<void*>(0x2000)};
    in.kv = TensorView{kv, reinterpret_cast<void*>(0x3000)};
    TensorView out{p.OutputDesc(), reinterpret_cast<void*>(0x4000)};
    g_launches.clear();
    return (*b_)->MlaDecode(0, p, in, out);
  }
};

// The CTA is chosen at plan time from the shape and the CU count (304 on
// the stand-in): q_len 1 takes the position CTA, q_len 4 the window CTA;
// each long request is split and merged.
TEST_F(MlaStandIn, EachShapeLaunchesItsCtaThenTheMerge) {
  ASSERT_TRUE(Call(1, 1).ok());
  ASSERT_EQ(g_launches.size(), 2u);
  EXPECT_EQ(g_launches[0].symbol, mla::gfx942::kDecodePosKernel);
  EXPECT_EQ(g_launches[1].symbol, mla::gfx942::kMergeKernel);
  const auto k = ArgsOf<mla::KParams>(g_launches[0]);
  EXPECT_EQ(g_launches[0].threads, 512u);
  EXPECT_EQ(g_launches[0].gx, static_cast<unsigned>(k.splits));
  EXPECT_GT(k.splits, 1);
  EXPECT_LE(k.splits, 304);
  EXPECT_EQ(g_launches[0].gy, 1u);  // 16 rows
  EXPECT_EQ(k.row_groups, 1);
  EXPECT_NE(k.part_o, nullptr);
  EXPECT_EQ(g_launches[1].gx, 16u);  // a merge block per row

  ASSERT_TRUE(Call(2, 4).ok());
  ASSERT_EQ(g_launches.size(), 2u);
  EXPECT_EQ(g_launches[0].symbol, mla::gfx942::kDecodeKernel);
  EXPECT_EQ(g_launches[0].gy, 1u);  // 64 rows
  EXPECT_EQ(g_launches[0].gz, 2u);
  EXPECT_EQ(g_launches[1].gx, 64u);
  EXPECT_TRUE((*b_)->GetDeviceInfo(0).healthy);
}

// Over the MoE objects as embedded: the routing, the GEMM kernels' (decode
// and prefill tiles, down) epilogues, the weighted sum.
class MoeStandIn : public RecordingFixture {
 protected:
  MoeStandIn()
      : RecordingFixture({{"moe_routing_gfx942", "gfx942", kGfx942, sizeof(kGfx942),
                           {"MoeCountKernel", "MoeScanKernel", "MoeScatterKernel"}},
                          {"moe_gemm_gfx942", "gfx942", kGfx942, sizeof(kGfx942),
                           {moe::gfx942::kGemmBf16, moe::gfx942::kGemmSwiglu, moe::gfx942::kGemmF32}},
                          {"moe_gemm_m64_gfx942", "gfx942", kGfx942, sizeof(kGfx942),
                           {moe::gfx942::kPrefillBf16, moe::gfx942::kPrefillSwiglu, moe::gfx942::kPrefillF32}},
                          {"moe_down_gfx942", "gfx942", kGfx942, sizeof(kGfx942),
                           {moe::gfx942::kDownBf16, moe::gfx942::kDownF32}},
                          {"moe_sum_gfx942", "gfx942", kGfx942, sizeof(kGfx942), {"MoeWeightedSumKernel"}}}) {}

  // One call on stand-in device addresses.
  absl::Status Call(const MoeParams& p) {
    MoeInputs in;
    in.x.data = reinterpret_cast<void*>(0x1000);
    in.topk_ids.data = reinterpret_cast<void*>(0x2000);
    in.topk_weights.data = reinterpret_cast<void*>(0x3000);
    in.w13.data = reinterpret_cast<void*>(0x4000);
    in.w13_scales.data = reinterpret_cast<void*>(0x5000);
    in.w2.data = reinterpret_cast<void*>(0x6000);
    in.w2_scales.data = reinterpret_cast<void*>(0x7000);
    TensorView out;
    out.data = reinterpret_cast<void*>(0x8000);
    return (*b_)->Moe(0, p, in, out);
  }

  // The call's launches by symbol.
  absl::StatusOr<std::vector<std::string>> Run(const MoeParams& p) {
    g_launches.clear();
    KS_RETURN_IF_ERROR(Call(p));
    std::vector<std::string> symbols;
    for (const Launched& l : g_launches) symbols.push_back(l.symbol);
    return symbols;
  }
};

TEST_F(MoeStandIn, DownAtAShortExpertWidthTakesTheDownKernel) {
  MoeParams p = gpu_test::KimiMoeParams(MoeStage::kDown, 8);  // I = 384
  auto launched = Run(p);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(*launched, (std::vector<std::string>{"MoeCountKernel", "MoeScanKernel", "MoeScatterKernel",
                                                 moe::gfx942::kDownBf16}));
  const Launched& l = g_launches.back();
  EXPECT_EQ(l.gx, 14u);  // 3584 columns in blocks of 256
  EXPECT_EQ(l.threads, 256u);
  const auto g = ArgsOf<moe::GemmParams>(l);
  EXPECT_EQ(g.k, 384);
  EXPECT_EQ(g.out_cols, 3584);
  EXPECT_EQ(g.a, reinterpret_cast<const uint16_t*>(0x1000));
  EXPECT_EQ(g.w, reinterpret_cast<const uint8_t*>(0x6000));
  EXPECT_EQ(l.gy, static_cast<unsigned>(moe::MoeWorkspaceLayout(p, moe::gfx942::Plan(p)).max_tiles));

  // Another I (a multiple of 32, not of 128): the slab-walking kernel.
  p.inter = 416;
  launched = Run(p);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->back(), moe::gfx942::kGemmBf16);
  EXPECT_EQ(g_launches.back().gx, 56u);  // blocks of 64
  EXPECT_EQ(ArgsOf<moe::GemmParams>(g_launches.back()).k, 416);
}

TEST_F(MoeStandIn, TheLayerRunsGateUpSwigluThenDownIntoFp32ThenTheSum) {
  MoeParams p = gpu_test::KimiMoeParams(MoeStage::kLayer, 32);
  auto launched = Run(p);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(*launched, (std::vector<std::string>{"MoeCountKernel", "MoeScanKernel", "MoeScatterKernel",
                                                 moe::gfx942::kGemmSwiglu, moe::gfx942::kDownF32,
                                                 "MoeWeightedSumKernel"}));
  const auto up = ArgsOf<moe::GemmParams>(g_launches[3]);
  const auto down = ArgsOf<moe::GemmParams>(g_launches[4]);
  EXPECT_EQ(up.k, 3584);
  EXPECT_EQ(down.k, 384);
  EXPECT_EQ(down.a, static_cast<const uint16_t*>(up.out));  // the intermediate h
  EXPECT_EQ(down.a_row_div, 1);
  EXPECT_TRUE((*b_)->GetDeviceInfo(0).healthy);
}

// Chunked prefill (146 rows per expert): the routing takes 64-row tiles and
// every GEMM runs on the prefill CTA, down too (the down kernel reads
// 16-row tiles).
TEST_F(MoeStandIn, PrefillRoutesSixtyFourRowTilesAndTakesThePrefillKernels) {
  const MoeParams p = gpu_test::KimiMoeParams(MoeStage::kLayer, 8192);
  auto launched = Run(p);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(*launched, (std::vector<std::string>{"MoeCountKernel", "MoeScanKernel", "MoeScatterKernel",
                                                 moe::gfx942::kPrefillSwiglu, moe::gfx942::kPrefillF32,
                                                 "MoeWeightedSumKernel"}));
  const int64_t max_tiles = (8192 * 16 + 63) / 64 + 896;
  // The routing: its tile rows (the scan's and scatter's bm) and the padded
  // sorted list's memset are the prefill tile's.
  ASSERT_GE(g_memsets.size(), 2u);
  EXPECT_EQ(g_memsets[g_memsets.size() - 1].bytes, static_cast<size_t>(max_tiles) * 64 * 4);
  const Launched& up = g_launches[3];
  EXPECT_EQ(up.gx, 6u);  // I = 384 output columns, 64 per SwiGLU CTA
  EXPECT_EQ(up.gy, static_cast<unsigned>(max_tiles));
  EXPECT_EQ(up.threads, 256u);
  EXPECT_EQ(ArgsOf<moe::GemmParams>(up).k, 3584);
  EXPECT_EQ(ArgsOf<moe::GemmParams>(up).nw, 768);
  EXPECT_EQ(ArgsOf<moe::GemmParams>(up).inter, 384);
  const Launched& down = g_launches[4];
  EXPECT_EQ(down.gx, 28u);  // 3584 columns, 128 per CTA
  EXPECT_EQ(down.gy, static_cast<unsigned>(max_tiles));
  const auto d = ArgsOf<moe::GemmParams>(down);
  EXPECT_EQ(d.k, 384);
  EXPECT_EQ(d.out_cols, 3584);
  EXPECT_EQ(d.a, static_cast<const uint16_t*>(ArgsOf<moe::GemmParams>(up).out));
  EXPECT_EQ(d.sorted, ArgsOf<moe::GemmParams>(up).sorted);  // one routing for both halves
  EXPECT_EQ(moe::gfx942::Plan(p).TileRows(), 64);

  // Gate/up alone, no SwiGLU: 2 I = 768 columns in blocks of 128.
  MoeParams g = gpu_test::KimiMoeParams(MoeStage::kGateUp, 8192);
  launched = Run(g);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->back(), moe::gfx942::kPrefillBf16);
  EXPECT_EQ(g_launches.back().gx, 6u);
  EXPECT_EQ(ArgsOf<moe::GemmParams>(g_launches.back()).out_cols, 768);
  EXPECT_TRUE((*b_)->GetDeviceInfo(0).healthy);
}

// Graph timing: one call captured, replayed, timed by events.
TEST_F(MoeStandIn, GraphReplaysCaptureOneCallAndTimeTheReplays) {
  EXPECT_TRUE((*b_)->Capabilities().graph_replay);
  const MoeParams p = gpu_test::KimiMoeParams(MoeStage::kLayer, 8);
  ASSERT_TRUE(Call(p).ok());  // sizes the workspace outside the capture
  g_launches.clear();
  g_graph_launches = 0;
  g_graphs_alive = 0;
  const int mallocs = g_mallocs;
  int calls = 0;
  auto ms = (*b_)->TimeGraphReplays(0, [&] { ++calls; return Call(p); }, 20);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(g_capture_mode, kCaptureModeThreadLocal);
  ASSERT_EQ(g_launches.size(), 6u);  // routing, the two GEMMs, the sum: all into the graph
  for (const Launched& l : g_launches) EXPECT_TRUE(l.captured) << l.symbol;
  EXPECT_EQ(g_graph_launches, 3 + 20);  // warm-up, then the timed replays
  EXPECT_DOUBLE_EQ(*ms, 0.5 * (3 + 20) / 20);  // the stand-in's elapsed time over the replays
  EXPECT_EQ(g_mallocs, mallocs);
  EXPECT_EQ(g_graphs_alive, 0);  // graph and executable destroyed
  EXPECT_FALSE(g_capturing);
  EXPECT_TRUE((*b_)->GetDeviceInfo(0).healthy);
}

TEST_F(MoeStandIn, AWorkspaceThatMustGrowInACaptureIsFailedPrecondition) {
  ASSERT_TRUE(Call(gpu_test::KimiMoeParams(MoeStage::kLayer, 8)).ok());
  g_graphs_alive = 0;
  const int mallocs = g_mallocs;
  auto ms = (*b_)->TimeGraphReplays(0, [&] { return Call(gpu_test::KimiMoeParams(MoeStage::kLayer, 4096)); }, 5);
  ASSERT_FALSE(ms.ok());
  EXPECT_EQ(ms.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ms.status().message()),
              StartsWith("graph capture on hip device 0: the launch failed while being captured"));
  EXPECT_THAT(std::string(ms.status().message()), HasSubstr("the kernel workspace must grow to "));
  EXPECT_EQ(g_mallocs, mallocs);
  EXPECT_EQ(g_graphs_alive, 0);
  EXPECT_FALSE(g_capturing);
  EXPECT_TRUE((*b_)->GetDeviceInfo(0).healthy);
  // Outside a capture the same call grows it.
  EXPECT_TRUE(Call(gpu_test::KimiMoeParams(MoeStage::kLayer, 4096)).ok());
  EXPECT_EQ(g_mallocs, mallocs + 1);
}

TEST(HipBackendStandIn, WithoutTheGraphApiThereIsNoGraphTiming) {
  g_device_arch = "gfx942";
  const absl::StatusOr<Runtime> rt = StandIn();  // no graph entry points
  auto b = CreateHipBackendWith(rt, Objects());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE((*b)->Capabilities().graph_replay);
  int calls = 0;
  auto ms = (*b)->TimeGraphReplays(0, [&] { ++calls; return absl::OkStatus(); }, 5);
  EXPECT_EQ(ms.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(ms.status().message()), StartsWith("backend hip has no graph capture here: stand-in lacks"));
  EXPECT_EQ(calls, 0);
  EXPECT_EQ((*b)->TimeGraphReplays(0, [] { return absl::OkStatus(); }, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
