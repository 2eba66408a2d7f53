// The HIP backend's start-up and dispatch. No AMD GPU exists on these
// machines, so the real runtime (where installed) only answers "no device";
// the device paths run against a stand-in for the runtime: a table of test
// functions in Runtime's shape, one device that accepts or refuses a code
// object. What it proves is the backend's own logic (which code objects it
// loads, health, the UNIMPLEMENTED and NOT_FOUND answers), not ROCm's.
#include "kernels/gpu/hip/hip_backend.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/api/ops.h"

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
  } else {
    EXPECT_THAT(std::string(b.status().message()), StartsWith("cannot load the HIP runtime"));
  }
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
  att.head_dim = 256;
  s = (*b)->Attention(0, att, TensorView{}, TensorView{}, TensorView{}, out);
  EXPECT_EQ(s.message(), "hip backend has no gfx942 kernel for attention (mfma_bf16: attention: the hip backend serves "
                         "head_dim 128 (got 256))");
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

}  // namespace
}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
