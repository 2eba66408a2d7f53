// The CUDA backend's plumbing: creation without a device, device discovery,
// memory and copies, error statuses, and a sticky kernel fault marking the
// device unhealthy. Runs everywhere; the device cases skip without a GPU.
#include "kernels/gpu/gpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/backend.h"
#include "kernels/api/ops.h"

namespace kernelserve {
namespace {

TEST(GpuBackendTest, CreatesOrFailsCleanly) {
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

TEST(GpuBackendTest, MemoryCopiesAndErrors) {
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

// Transfer staging: page-locked blocks, reused from the cache after their
// size came back; async copies from two blocks in turn (the server's upload
// pipeline) land byte-exact after Synchronize, and so does an async copy
// back into a block; bad device indices refused.
TEST(GpuBackendTest, PinnedStagingAndAsyncCopies) {
  auto b = CreateCudaBackend();
  if (!b.ok()) GTEST_SKIP() << "no CUDA device (" << b.status() << ")";
  Backend& be = **b;
  EXPECT_FALSE(be.Capabilities().device_memory_is_host);
  EXPECT_EQ(be.AllocateStaging(be.DeviceCount(), 16).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be.CopyToDeviceAsync(-1, nullptr, nullptr, 16).code(), absl::StatusCode::kInvalidArgument);

  constexpr size_t kBlock = size_t{8} << 20, kTotal = 5 * kBlock + 12345;
  std::mt19937_64 rng(::testing::UnitTest::GetInstance()->random_seed());
  std::vector<uint8_t> src(kTotal), dst(kTotal, 0xAB);
  for (auto& x : src) x = static_cast<uint8_t>(rng());
  auto dev = be.Allocate(0, kTotal);
  ASSERT_TRUE(dev.ok()) << dev.status();
  void* seen = nullptr;
  for (int round = 0; round < 2; ++round) {
    auto b0 = be.AllocateStaging(0, kBlock);
    auto b1 = be.AllocateStaging(0, kBlock);
    ASSERT_TRUE(b0.ok() && b1.ok());
    // The second round gets the first round's blocks back.
    if (round == 1) {
      EXPECT_TRUE((*b0)->data() == seen || (*b1)->data() == seen);
    }
    seen = (*b0)->data();
    StagingMemory* blocks[2] = {b0->get(), b1->get()};
    size_t sent = 0;
    for (int i = 0; sent < kTotal; ++i) {
      const size_t n = std::min(kBlock, kTotal - sent);
      ASSERT_TRUE(be.Synchronize(0).ok());  // the block's previous copy is done
      std::memcpy(blocks[i % 2]->data(), src.data() + sent, n);
      uint8_t* to = static_cast<uint8_t*>((*dev)->data()) + sent;
      ASSERT_TRUE(be.CopyToDeviceAsync(0, to, blocks[i % 2]->data(), n).ok());
      sent += n;
    }
    ASSERT_TRUE(be.Synchronize(0).ok());
    std::fill(dst.begin(), dst.end(), 0xAB);
    ASSERT_TRUE(be.CopyToHost(0, dst.data(), (*dev)->data(), kTotal).ok());
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), kTotal), 0) << "round " << round;
    // Back through a block, queued (a small call's inline output): exact after Synchronize.
    std::memset(blocks[0]->data(), 0xAB, kBlock);
    ASSERT_TRUE(be.CopyToHostAsync(0, blocks[0]->data(), static_cast<uint8_t*>((*dev)->data()) + 777, 4099).ok());
    ASSERT_TRUE(be.Synchronize(0).ok());
    EXPECT_EQ(std::memcmp(blocks[0]->data(), src.data() + 777, 4099), 0) << "round " << round;
  }
  EXPECT_EQ(be.CopyToHostAsync(-1, nullptr, nullptr, 16).code(), absl::StatusCode::kInvalidArgument);
}

// Freed blocks are cached for reuse (cudaMalloc per call output and the
// device-wide synchronization of cudaFree cost a remote call 37 %): a block of
// the same size bucket comes back, with its copies working; and a cache full
// of freed blocks never makes an allocation fail that would fit without it.
TEST(GpuBackendTest, FreedBlocksAreReusedAndNeverCauseOutOfMemory) {
  auto b = CreateCudaBackend();
  if (!b.ok()) GTEST_SKIP() << "no CUDA device (" << b.status() << ")";
  Backend& be = **b;
  void* first = nullptr;
  {
    auto m = be.Allocate(0, (size_t{64} << 20) - 1000);
    ASSERT_TRUE(m.ok()) << m.status();
    first = (*m)->data();
  }
  const size_t n = (size_t{64} << 20) - 4096;  // the same 64 MiB bucket
  auto again = be.Allocate(0, n);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->data(), first);
  EXPECT_EQ((*again)->size(), n);
  std::vector<uint8_t> src(n), dst(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_TRUE(be.CopyToDevice(0, (*again)->data(), src.data(), n).ok());
  ASSERT_TRUE(be.CopyToHost(0, dst.data(), (*again)->data(), n).ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), n), 0);
  again->reset();

  // The largest block (in GiB steps) the device gives with nothing cached...
  constexpr size_t kGiB = size_t{1} << 30;
  size_t big = static_cast<size_t>(be.GetDeviceInfo(0).memory_total_bytes) / kGiB * kGiB;
  for (; big >= 2 * kGiB; big -= kGiB) {
    auto m = be.Allocate(0, big);
    if (m.ok()) break;
    ASSERT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted) << m.status();
  }
  ASSERT_GE(big, 2 * kGiB);
  // ... still comes with 4 GiB of freed blocks cached.
  {
    std::vector<std::unique_ptr<DeviceMemory>> held;
    for (int i = 0; i < 4; ++i) {
      auto m = be.Allocate(0, kGiB);
      ASSERT_TRUE(m.ok()) << m.status();
      held.push_back(std::move(*m));
    }
  }
  auto m = be.Allocate(0, big);
  EXPECT_TRUE(m.ok()) << m.status();
  if (m.ok()) m->reset();
  EXPECT_TRUE(be.Allocate(0, 4096).ok());
  EXPECT_TRUE(be.GetDeviceInfo(0).healthy);
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Device timing: events around launches, and a CUDA-graph capture of one
// attention call whose replays must write exactly the output of a plain
// launch. A launch that cannot be captured (a copy to the host inside it)
// comes back FAILED_PRECONDITION and leaves the device healthy and usable.
TEST(GpuBackendTest, GraphReplaysMatchPlainLaunchesAndCaptureFailsCleanly) {
  auto b = CreateCudaBackend();
  if (!b.ok()) GTEST_SKIP() << "no CUDA device (" << b.status() << ")";
  Backend& be = **b;
  AttentionParams p;
  p.causal = true;
  const TensorDesc qd{DType::kBf16, {1, 2, 192, 128}};
  ASSERT_TRUE(p.Validate(qd, qd, qd).ok());
  const size_t bytes = static_cast<size_t>(qd.num_bytes());
  std::mt19937 rng(11);
  std::normal_distribution<float> gauss(0.f, 1.f);
  std::vector<std::unique_ptr<DeviceMemory>> in;
  for (int t = 0; t < 3; ++t) {
    std::vector<uint16_t> h(bytes / 2);
    for (auto& x : h) {
      const float f = gauss(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof(bits));
      x = static_cast<uint16_t>(bits >> 16);
    }
    auto m = be.Allocate(0, bytes);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(be.CopyToDevice(0, (*m)->data(), h.data(), bytes).ok());
    in.push_back(std::move(*m));
  }
  auto out_mem = be.Allocate(0, bytes);
  ASSERT_TRUE(out_mem.ok()) << out_mem.status();
  TensorView q{qd, in[0]->data()}, k{qd, in[1]->data()}, v{qd, in[2]->data()};
  TensorView out{qd, (*out_mem)->data()};
  const std::vector<uint8_t> poison(bytes, 0xFF);  // bf16 NaN
  auto launch = [&]() { return be.Attention(0, p, q, k, v, out); };

  // The plain launch's output is the reference.
  ASSERT_TRUE(be.CopyToDevice(0, out.data, poison.data(), bytes).ok());
  ASSERT_TRUE(launch().ok());
  ASSERT_TRUE(be.Synchronize(0).ok());
  std::vector<uint16_t> plain(bytes / 2), graphed(bytes / 2, 0);
  ASSERT_TRUE(be.CopyToHost(0, plain.data(), out.data, bytes).ok());
  for (uint16_t x : plain) ASSERT_TRUE(std::isfinite(Bf16ToFloat(x)));

  absl::StatusOr<double> ev = be.TimeLaunches(0, launch, 20);
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_GT(*ev, 0.0);
  EXPECT_LT(*ev, 1000.0);

  ASSERT_TRUE(be.CopyToDevice(0, out.data, poison.data(), bytes).ok());
  int calls = 0;
  absl::StatusOr<double> g = be.TimeGraphReplays(
      0,
      [&]() {
        ++calls;
        return launch();
      },
      50);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(calls, 1);  // captured once, replayed from the graph
  EXPECT_GT(*g, 0.0);
  EXPECT_LT(*g, 1000.0);
  ASSERT_TRUE(be.CopyToHost(0, graphed.data(), out.data, bytes).ok());
  EXPECT_EQ(std::memcmp(plain.data(), graphed.data(), bytes), 0);
  std::printf("attention B1 H2 S192 D128 causal: %.4f ms per launch (events), %.4f ms per graph replay\n",
              *ev, *g);

  // A synchronous copy to the host cannot be captured.
  std::vector<uint16_t> scratch(bytes / 2);
  absl::StatusOr<double> bad = be.TimeGraphReplays(
      0,
      [&]() -> absl::Status {
        absl::Status st = launch();
        if (!st.ok()) return st;
        return be.CopyToHost(0, scratch.data(), out.data, bytes);
      },
      5);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition) << bad.status();
  EXPECT_NE(bad.status().message().find("graph capture"), absl::string_view::npos) << bad.status();
  EXPECT_TRUE(be.GetDeviceInfo(0).healthy) << be.GetDeviceInfo(0).health_reason;
  EXPECT_EQ(be.TimeGraphReplays(0, launch, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be.TimeLaunches(0, launch, 0).status().code(), absl::StatusCode::kInvalidArgument);

  // The stream still works: a plain launch reproduces the reference.
  ASSERT_TRUE(be.CopyToDevice(0, out.data, poison.data(), bytes).ok());
  ASSERT_TRUE(launch().ok());
  ASSERT_TRUE(be.Synchronize(0).ok());
  std::fill(graphed.begin(), graphed.end(), 0);
  ASSERT_TRUE(be.CopyToHost(0, graphed.data(), out.data, bytes).ok());
  EXPECT_EQ(std::memcmp(plain.data(), graphed.data(), bytes), 0);
}

// The bf16 GEMM ceiling through cuBLAS loaded at run time: a rate a Hopper
// card can reach, or UNAVAILABLE naming the library where it is missing.
TEST(GpuBackendTest, GemmCeilingThroughCublasOrUnavailable) {
  auto b = CreateCudaBackend();
  if (!b.ok()) GTEST_SKIP() << "no CUDA device (" << b.status() << ")";
  Backend& be = **b;
  EXPECT_EQ(be.MeasureGemmCeiling(be.DeviceCount(), nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  auto g = be.MeasureGemmCeiling(0, nullptr);
  if (!g.ok()) {
    EXPECT_EQ(g.status().code(), absl::StatusCode::kUnavailable) << g.status();
    EXPECT_NE(g.status().message().find("libcublas"), absl::string_view::npos) << g.status();
    GTEST_SKIP() << "no cuBLAS here: " << g.status();
  }
  std::printf("GEMM ceiling: %.1f TFLOP/s (%s)\n", g->tflops, g->desc.c_str());
  EXPECT_GT(g->tflops, 50.0);
  EXPECT_LT(g->tflops, 2000.0);  // above any bf16 dense peak: a timing bug
  EXPECT_NE(g->desc.find("cuBLAS"), std::string::npos);
  EXPECT_TRUE(be.GetDeviceInfo(0).healthy);
}

// The variant tables are what the backend lists and runs by name; an entry
// that does not serve a call declines it before touching anything.
TEST(GpuBackendTest, VariantTablesAreListedAndRunByName) {
  auto b = CreateCudaBackend();
  if (!b.ok()) GTEST_SKIP() << "no CUDA device (" << b.status() << ")";
  Backend& be = **b;
  const std::vector<KernelVariantInfo> all = be.KernelVariants();
  std::set<std::string> names;
  for (const KernelVariantInfo& v : all) {
    EXPECT_FALSE(v.description.empty()) << v.name;
    EXPECT_FALSE(v.serves.empty()) << v.name;
    EXPECT_TRUE(names.insert(BenchOpName(v.op) + "." + v.name).second) << "listed twice: " << v.name;
  }
  for (const char* want : {"attention.wgmma_ws", "fp8_attention.ws", "mla_decode.wgmma_rega",
                           "moe_gateup.mma_sync"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
  OpCall call;
  call.op = BenchOp::kAttention;
  call.attention.head_dim = 96;  // wgmma_ws serves 64, 128 and 256
  TensorView out;
  const absl::Status wrong_shape = be.RunKernelVariant(0, "wgmma_ws", call, out);
  EXPECT_EQ(wrong_shape.code(), absl::StatusCode::kUnimplemented) << wrong_shape;
  EXPECT_NE(wrong_shape.message().find("head_dim 96"), std::string::npos) << wrong_shape;
  const absl::Status unknown = be.RunKernelVariant(0, "no_such_kernel", call, out);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound) << unknown;
  EXPECT_NE(unknown.message().find("wgmma_ws"), std::string::npos) << unknown;  // lists the table
  EXPECT_TRUE(be.GetDeviceInfo(0).healthy);
  const BackendCapabilities caps = be.Capabilities();
  EXPECT_TRUE(caps.device_timer);
  EXPECT_TRUE(caps.graph_replay);
  EXPECT_GT(caps.cache_bytes, 0);
}

// Last: a kernel reading an unmapped address faults the context for good.
TEST(GpuBackendTest, StickyFaultMarksDeviceUnhealthy) {
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
