// The cpu GEMM behind the GEMM ceiling, against an fp64 reference, on shapes
// that cross every block edge (k past one KC block, n past one NC block, m in
// several MC blocks), and the backend's MeasureGemmCeiling.
#include "kernels/cpu/cpu_gemm.h"

#include <cmath>
#include <iostream>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace kernelserve {
namespace {

void ExpectMatchesFp64(int64_t m, int64_t n, int64_t k, int threads, cpu::GemmIsa isa) {
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  std::vector<float> c(static_cast<size_t>(m * n), 12345.0f);  // stale values must be overwritten
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
  ASSERT_TRUE(cpu::Sgemm(m, n, k, a.data(), b.data(), c.data(), threads, isa).ok());
  double worst = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        ref += static_cast<double>(a[i * k + p]) * b[p * n + j];
        mag += std::fabs(static_cast<double>(a[i * k + p]) * b[p * n + j]);
      }
      // fp32 accumulation: error grows like k * eps * sum |a b|.
      const double err = std::fabs(c[i * n + j] - ref) / (mag * 1e-7 * static_cast<double>(k) + 1e-30);
      worst = std::max(worst, err);
    }
  }
  EXPECT_LT(worst, 1.0) << m << "x" << n << "x" << k << " threads " << threads << " " << cpu::GemmIsaName(isa);
}

TEST(CpuGemm, MatchesFp64AcrossBlockEdges) {
  for (cpu::GemmIsa isa : {cpu::GemmIsa::kAvx2, cpu::GemmIsa::kAvx512}) {
    if (!cpu::GemmIsaAvailable(isa)) {
      std::cout << "skipping " << cpu::GemmIsaName(isa) << ": not on this CPU\n";
      continue;
    }
    ExpectMatchesFp64(6, 32, 1, 1, isa);
    ExpectMatchesFp64(300, 224, 1000, 2, isa);  // 3 MC blocks, 2 column items, 3 KC blocks (accumulating)
    ExpectMatchesFp64(12, 3104, 7, 2, isa);     // 2 NC blocks
  }
  EXPECT_TRUE(cpu::GemmIsaAvailable(cpu::GemmIsa::kAvx2));
}

TEST(CpuGemm, RefusesShapesItDoesNotTile) {
  std::vector<float> x(1024);
  EXPECT_EQ(cpu::Sgemm(5, 16, 4, x.data(), x.data(), x.data(), 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::Sgemm(6, 15, 4, x.data(), x.data(), x.data(), 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::Sgemm(6, 16, 0, x.data(), x.data(), x.data(), 1).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status wide = cpu::Sgemm(6, 16, 4, x.data(), x.data(), x.data(), 1, cpu::GemmIsa::kAvx512);
  EXPECT_EQ(wide.code(), cpu::GemmIsaAvailable(cpu::GemmIsa::kAvx512) ? absl::StatusCode::kInvalidArgument
                                                                       : absl::StatusCode::kFailedPrecondition);
}

TEST(CpuGemm, BackendMeasuresItsCeiling) {
  std::unique_ptr<Backend> be = CreateCpuBackend(2);
  absl::StatusOr<Backend::GemmCeiling> c = be->MeasureGemmCeiling(0, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT(c->tflops, 0);
  EXPECT_NE(c->desc.find("fp32 GEMM 1152^3"), std::string::npos) << c->desc;
  EXPECT_NE(c->desc.find("2 threads"), std::string::npos) << c->desc;
  EXPECT_EQ(be->MeasureGemmCeiling(1, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  // A cancelled job's measurement stops between runs.
  int polls = 0;
  absl::StatusOr<Backend::GemmCeiling> stopped = be->MeasureGemmCeiling(0, [&] { return ++polls > 2; });
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kCancelled) << stopped.status();
  EXPECT_EQ(polls, 3);
}

}  // namespace
}  // namespace kernelserve
