#include "kernels/cpu/cpu_backend.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/backend.h"
#include "kernels/cpu/cpu_test_util.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

TEST(CpuBackend, DescribesOneCpuDevice) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  EXPECT_EQ(be->Name(), "cpu");
  EXPECT_EQ(be->DeviceCount(), 1);
  const DeviceInfo info = be->GetDeviceInfo(0);
  EXPECT_EQ(info.index, 0);
  EXPECT_EQ(info.backend, "cpu");
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.memory_total_bytes, int64_t{1} << 20);
  EXPECT_EQ(info.compute_units, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_TRUE(info.healthy);
  EXPECT_EQ(CreateCpuBackend(3)->GetDeviceInfo(0).compute_units, 3);
  EXPECT_FALSE(be->GetDeviceInfo(1).healthy);
}

TEST(CpuBackend, AllocatesAlignedMemoryAndCopies) {
  std::unique_ptr<Backend> be = CreateCpuBackend(1);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, size_t{1} << 20}) {
    auto mem = be->Allocate(0, bytes);
    ASSERT_TRUE(mem.ok()) << mem.status();
    EXPECT_EQ((*mem)->size(), bytes);
    EXPECT_EQ((*mem)->device(), 0);
    ASSERT_NE((*mem)->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*mem)->data()) % 64, 0u);
  }
  std::vector<uint8_t> src(1000), back(1000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  auto a = be->Allocate(0, 1000);
  auto b = be->Allocate(0, 1000);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(be->CopyToDevice(0, (*a)->data(), src.data(), 1000).ok());
  ASSERT_TRUE(be->CopyOnDevice(0, (*b)->data(), (*a)->data(), 1000).ok());
  ASSERT_TRUE(be->CopyToHost(0, back.data(), (*b)->data(), 1000).ok());
  EXPECT_EQ(back, src);
  EXPECT_TRUE(be->Synchronize(0).ok());
}

// Download staging blocks come back to the backend and are handed out again
// (a fresh block faults in every page); two held at once are distinct, and
// the cache keeps at most 64 MiB.
TEST(CpuBackend, ReusesStagingBlocks) {
  std::unique_ptr<Backend> be = CreateCpuBackend(1);
  for (size_t bytes : {size_t{1}, size_t{5000}, size_t{16} << 20}) {
    SCOPED_TRACE(bytes);
    auto a = be->AllocateStaging(0, bytes);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ((*a)->size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*a)->data()) % 64, 0u);
    std::memset((*a)->data(), 0x5A, bytes);
    auto b = be->AllocateStaging(0, bytes);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_NE((*b)->data(), (*a)->data());
    void* first = (*a)->data();
    a->reset();
    auto c = be->AllocateStaging(0, bytes);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->data(), first) << "a released block is reused";
    EXPECT_EQ(static_cast<uint8_t*>((*c)->data())[bytes - 1], 0x5A);
  }
  // Five 16 MiB blocks released: four fit in the cache (the fifth is freed),
  // so taking five again reuses at least those four.
  std::vector<std::unique_ptr<StagingMemory>> held;
  std::vector<void*> seen;
  for (int i = 0; i < 5; ++i) {
    auto m = be->AllocateStaging(0, size_t{16} << 20);
    ASSERT_TRUE(m.ok()) << m.status();
    seen.push_back((*m)->data());
    held.push_back(*std::move(m));
  }
  held.clear();
  int reused = 0;
  for (int i = 0; i < 5; ++i) {
    auto m = be->AllocateStaging(0, size_t{16} << 20);
    ASSERT_TRUE(m.ok()) << m.status();
    for (void* p : seen) reused += (*m)->data() == p ? 1 : 0;
    held.push_back(*std::move(m));
  }
  EXPECT_GE(reused, 4);
  EXPECT_EQ(be->AllocateStaging(1, 16).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuBackend, RejectsBadDevicesAndPointers) {
  std::unique_ptr<Backend> be = CreateCpuBackend(1);
  EXPECT_EQ(be->Allocate(1, 16).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be->Allocate(-1, 16).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(be->Synchronize(2).code(), absl::StatusCode::kInvalidArgument);
  uint8_t x = 0;
  EXPECT_EQ(be->CopyToDevice(0, nullptr, &x, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(be->CopyToDevice(0, nullptr, nullptr, 0).ok());
  EXPECT_EQ(be->Allocate(0, SIZE_MAX).status().code(), absl::StatusCode::kResourceExhausted);
  // An op with no data or on a missing device returns a status, never aborts.
  AttentionParams p;
  HostTensor q = numerics::GaussianBf16({1, 1, 4, 64}, 1);
  ASSERT_TRUE(p.Validate(q.desc(), q.desc(), q.desc()).ok());
  HostTensor out = cpu_test::PoisonedBf16(p.OutputDesc().shape);
  TensorView ov = out.view();
  EXPECT_EQ(be->Attention(1, p, q.view(), q.view(), q.view(), ov).code(), absl::StatusCode::kInvalidArgument);
  TensorView empty;
  EXPECT_EQ(be->Attention(0, p, q.view(), empty, q.view(), ov).code(), absl::StatusCode::kInvalidArgument);
  // Wrong output size.
  HostTensor small = cpu_test::PoisonedBf16({1, 1, 2, 64});
  TensorView sv = small.view();
  EXPECT_EQ(be->Attention(0, p, q.view(), q.view(), q.view(), sv).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve
