// The CUDA backend's plumbing: creation without a device, device discovery,
// memory and copies, error statuses, and a sticky kernel fault marking the
// device unhealthy. Runs everywhere; the device cases skip without a GPU.
#include "kernels/cuda/cuda_backend.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/backend.h"
#include "kernels/api/ops.h"

namespace kernelserve {
namespace {

TEST(CudaBackendTest, CreatesOrFailsCleanly) {
  auto b = CreateCudaBackend();
  if (!b.ok()) {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
    EXPECT_NE(b.status().message().find("no CUDA device"), absl::string_view::npos)
        << b.status();
    GTEST_SKIP() << "no CUDA device (" << b.status() << ")";
  }
  Backend& be = **b;
  EXPECT_EQ(be.Name(), "cuda");
  ASSERT_GE(be.DeviceCount(), 1);
  const DeviceInfo info = be.GetDeviceInfo(0);
  std::printf("device 0: %s, %d SMs, %lld MiB, %d MHz (memory %d MHz), %s\n", info.name.c_str(),
              info.compute_units, static_cast<long long>(info.memory_total_bytes >> 20),
              info.clock_mhz, info.memory_clock_mhz, info.driver.c_str());
  EXPECT_EQ(info.backend, "cuda");
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.compute_units, 0);
  EXPECT_GT(info.memory_total_bytes, 0);
  EXPECT_GT(info.clock_mhz, 0);
  EXPECT_NE(info.driver.find("CUDA driver"), std::string::npos);
  EXPECT_TRUE(info.healthy);
  EXPECT_FALSE(be.GetDeviceInfo(be.DeviceCount()).healthy);
}

TEST(CudaBackendTest, MemoryCopiesAndErrors) {
  auto b = CreateCudaBackend();
  if (!b.ok()) GTEST_SKIP() << "no CUDA device (" << b.status() << ")";
  Backend& be = **b;
  EXPECT_EQ(be.Allocate(-1, 16).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be.Allocate(be.DeviceCount(), 16).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Far more than any card has: RESOURCE_EXHAUSTED, and the device stays usable.
  auto huge = be.Allocate(0, size_t{1} << 50);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_TRUE(be.GetDeviceInfo(0).healthy);

  const size_t n = 1 << 20;
  std::vector<uint8_t> src(n), dst(n, 0xAB);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  auto a = be.Allocate(0, n);
  auto c = be.Allocate(0, n);
  ASSERT_TRUE(a.ok() && c.ok());
  EXPECT_EQ((*a)->size(), n);
  ASSERT_TRUE(be.CopyToDevice(0, (*a)->data(), src.data(), n).ok());
  ASSERT_TRUE(be.CopyOnDevice(0, (*c)->data(), (*a)->data(), n).ok());
  ASSERT_TRUE(be.Synchronize(0).ok());
  ASSERT_TRUE(be.CopyToHost(0, dst.data(), (*c)->data(), n).ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), n), 0);

  // Every op checks the device index before touching anything.
  MoeParams mp;
  MoeInputs mi;
  MlaDecodeParams lp;
  MlaDecodeInputs li;
  Fp8AttentionParams fp;
  Fp8AttentionInputs fi;
  AttentionParams ap;
  TensorView out;
  const int bad = be.DeviceCount();
  EXPECT_EQ(be.Moe(bad, mp, mi, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be.MlaDecode(bad, lp, li, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be.Fp8Attention(bad, fp, fi, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be.Attention(bad, ap, out, out, out, out).code(), absl::StatusCode::kInvalidArgument);
}

// Last: a kernel reading an unmapped address faults the context for good.
TEST(CudaBackendTest, StickyFaultMarksDeviceUnhealthy) {
  auto b = CreateCudaBackend();
  if (!b.ok()) GTEST_SKIP() << "no CUDA device (" << b.status() << ")";
  Backend& be = **b;
  AttentionParams p;
  TensorDesc qd{DType::kBf16, {1, 1, 256, 128}};
  ASSERT_TRUE(p.Validate(qd, qd, qd).ok());
  auto out_mem = be.Allocate(0, qd.num_bytes());
  ASSERT_TRUE(out_mem.ok());
  void* bogus = reinterpret_cast<void*>(uintptr_t{0x7f0000000000});
  TensorView q{qd, bogus}, k{qd, bogus}, v{qd, bogus}, out{qd, (*out_mem)->data()};
  absl::Status s = be.Attention(0, p, q, k, v, out);
  if (s.ok()) s = be.Synchronize(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  const DeviceInfo info = be.GetDeviceInfo(0);
  EXPECT_FALSE(info.healthy);
  EXPECT_FALSE(info.health_reason.empty());
  std::printf("after the fault: healthy=%d reason=%s\n", info.healthy, info.health_reason.c_str());
  // Later calls answer UNAVAILABLE without touching the device.
  EXPECT_EQ(be.Allocate(0, 16).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(be.Synchronize(0).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kernelserve
