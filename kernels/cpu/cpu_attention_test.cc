// The cpu backend's bf16 attention against the fp64 oracle on fresh random
// inputs. Tolerance: the output is rounded once to bf16 (relative RMS error
// ~1e-3 from that alone) after fp32 accumulation, so rel_rms < 1e-2 and every
// element within one bf16 step of the oracle rounded in the same mode (or
// within 2e-3 of the largest output, for values that cancel to near zero),
// and at least 90% of the elements bit-equal to it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/api/backend.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_test_util.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

using cpu_test::CompareBf16;
using cpu_test::FreshSeed;
using cpu_test::PoisonedBf16;

struct Case {
  int64_t b, hq, hkv, sq, skv, d;
  bool causal;
  Layout layout;
  Rounding rounding;
};

std::string Name(const Case& c) {
  return absl::StrCat("B=", c.b, " Hq=", c.hq, " Hkv=", c.hkv, " Sq=", c.sq, " Skv=", c.skv, " D=", c.d,
                      c.causal ? " causal " : " full ", LayoutName(c.layout), " ", RoundingName(c.rounding));
}

Shape ShapeOf(Layout l, int64_t b, int64_t h, int64_t s, int64_t d) {
  return l == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

struct AttnRun {
  AttentionParams p;
  HostTensor q, k, v, out;
  std::vector<double> ref;
};

// Runs the backend and the oracle on the given inputs.
void RunBoth(Backend& be, AttnRun& r) {
  ASSERT_TRUE(r.p.Validate(r.q.desc(), r.k.desc(), r.v.desc()).ok());
  r.out = PoisonedBf16(r.p.OutputDesc().shape);
  TensorView ov = r.out.view();
  ASSERT_TRUE(be.Attention(0, r.p, r.q.view(), r.k.view(), r.v.view(), ov).ok());
  auto ref = oracle::Attention(r.p, r.q, r.k, r.v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  r.ref = *std::move(ref);
}

AttnRun MakeRun(const Case& c, uint64_t seed) {
  AttnRun r;
  r.p.layout = c.layout;
  r.p.causal = c.causal;
  r.p.rounding = c.rounding;
  r.q = numerics::GaussianBf16(ShapeOf(c.layout, c.b, c.hq, c.sq, c.d), seed);
  r.k = numerics::GaussianBf16(ShapeOf(c.layout, c.b, c.hkv, c.skv, c.d), seed + 1);
  r.v = numerics::GaussianBf16(ShapeOf(c.layout, c.b, c.hkv, c.skv, c.d), seed + 2);
  return r;
}

void CheckAgainstOracle(const Case& c) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat(Name(c), " seed=", seed));
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  AttnRun r = MakeRun(c, seed);
  RunBoth(*be, r);
  if (::testing::Test::HasFatalFailure()) return;
  for (int64_t i = 0; i < r.out.num_elements(); ++i) {
    ASSERT_TRUE(std::isfinite(numerics::Bf16ToFloat(r.out.data<uint16_t>()[i]))) << "element " << i;
  }
  const auto cmp = CompareBf16(r.out, r.ref, c.rounding);
  EXPECT_EQ(cmp.nonfinite, 0);
  EXPECT_LT(cmp.rel_rms, 1e-2);
  EXPECT_EQ(cmp.far, 0) << cmp.first_far;
  EXPECT_GE(cmp.exact, cmp.n * 9 / 10) << "exact " << cmp.exact << " of " << cmp.n;
  if (c.rounding == Rounding::kRtz) {
    // Toward zero: never larger in magnitude than the oracle rounded to
    // nearest, up to fp32 cancellation near zero (the same 2e-3 of the largest
    // output that CompareBf16 allows there).
    double largest = 0;
    for (double x : r.ref) largest = std::max(largest, std::fabs(x));
    for (int64_t i = 0; i < r.out.num_elements(); ++i) {
      const double g = numerics::Bf16ToFloat(r.out.data<uint16_t>()[i]);
      const double n = numerics::Bf16ToFloat(numerics::DoubleToBf16(r.ref[i], Rounding::kRtne));
      ASSERT_LE(std::fabs(g), std::fabs(n) * (1 + 1.0 / 64) + 2e-3 * largest) << "element " << i;
    }
  }
}

TEST(CpuAttention, MatchesOracleAcrossShapes) {
  const Case cases[] = {
      {1, 2, 2, 129, 129, 128, true, Layout::kBhsd, Rounding::kRtne},
      {1, 2, 2, 129, 129, 128, false, Layout::kBshd, Rounding::kRtne},
      {2, 4, 2, 17, 129, 128, true, Layout::kBhsd, Rounding::kRtne},   // GQA, Sq < Skv
      {1, 4, 1, 129, 17, 64, true, Layout::kBshd, Rounding::kRtne},    // MQA, Sq > Skv
      {1, 2, 1, 1, 129, 128, true, Layout::kBhsd, Rounding::kRtne},    // decode row
      {1, 1, 1, 1, 1, 64, false, Layout::kBshd, Rounding::kRtne},
      {1, 3, 3, 70, 200, 256, true, Layout::kBshd, Rounding::kRtne},
      {1, 2, 2, 17, 17, 256, false, Layout::kBhsd, Rounding::kRtne},
      {1, 2, 2, 65, 130, 64, true, Layout::kBhsd, Rounding::kRtna},
      {1, 2, 1, 129, 65, 128, true, Layout::kBshd, Rounding::kRtz},
      {2, 2, 2, 33, 33, 128, false, Layout::kBhsd, Rounding::kRtz},
      {1, 2, 2, 40, 97, 64, false, Layout::kBshd, Rounding::kRtna},
  };
  for (const Case& c : cases) CheckAgainstOracle(c);
}

TEST(CpuAttention, RowsWithoutVisibleKeysAreZero) {
  // Causal with Sq > Skv: query i sees keys j <= i + Skv - Sq, so the first
  // Sq - Skv rows see nothing.
  const Case c{1, 2, 2, 100, 30, 64, true, Layout::kBhsd, Rounding::kRtne};
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::unique_ptr<Backend> be = CreateCpuBackend(2);
  AttnRun r = MakeRun(c, seed);
  RunBoth(*be, r);
  if (::testing::Test::HasFatalFailure()) return;
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 100; ++i) {
      for (int64_t d = 0; d < 64; ++d) {
        const int64_t idx = r.p.Offset(0, h, i, 2, 100, 64) + d;
        const float g = numerics::Bf16ToFloat(r.out.data<uint16_t>()[idx]);
        if (i < 70) {
          ASSERT_EQ(g, 0.0f) << "h=" << h << " i=" << i;
          ASSERT_EQ(r.ref[idx], 0.0);
        } else {
          ASSERT_TRUE(std::isfinite(g));
        }
      }
    }
  }
  EXPECT_LT(CompareBf16(r.out, r.ref, Rounding::kRtne).rel_rms, 1e-2);
}

TEST(CpuAttention, NanAndInfPropagateLikeTheOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::unique_ptr<Backend> be = CreateCpuBackend(2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(absl::StrCat("variant ", variant));
    AttnRun r = MakeRun({1, 2, 2, 80, 80, 64, true, Layout::kBhsd, Rounding::kRtne}, seed + variant);
    uint16_t* q = r.q.data<uint16_t>();
    uint16_t* k = r.k.data<uint16_t>();
    uint16_t* v = r.v.data<uint16_t>();
    auto bf = [](float x) { return numerics::FloatToBf16(x, Rounding::kRtne); };
    const int64_t row = 64;  // elements per row (D)
    if (variant == 0) q[5 * row + 3] = bf(nan);          // head 0, query 5: its row is NaN
    if (variant == 1) k[(80 + 10) * row + 7] = bf(inf);  // head 1, key 10: +-Inf scores
    if (variant == 2) v[70 * row + 2] = bf(nan);         // head 0, key 70: masked for queries < 70
    RunBoth(*be, r);
    if (::testing::Test::HasFatalFailure()) return;
    int64_t nan_count = 0;
    for (int64_t i = 0; i < r.out.num_elements(); ++i) {
      const float g = numerics::Bf16ToFloat(r.out.data<uint16_t>()[i]);
      ASSERT_EQ(std::isnan(g), std::isnan(r.ref[i])) << "element " << i << " got " << g << " ref " << r.ref[i];
      nan_count += std::isnan(g);
    }
    EXPECT_GT(nan_count, 0);
    if (variant == 2) {
      EXPECT_EQ(nan_count, 10);  // column 2 of queries 70..79 of head 0
    }
    const auto cmp = CompareBf16(r.out, r.ref, Rounding::kRtne);
    EXPECT_EQ(cmp.nonfinite, 0);
    EXPECT_LT(cmp.rel_rms, 1e-2);
  }
}

TEST(CpuAttention, UnsupportedHeadDimIsUnimplemented) {
  std::unique_ptr<Backend> be = CreateCpuBackend(1);
  AttentionParams p;
  HostTensor q = numerics::GaussianBf16({1, 1, 4, 96}, 1);
  ASSERT_TRUE(p.Validate(q.desc(), q.desc(), q.desc()).ok());
  HostTensor out = PoisonedBf16(p.OutputDesc().shape);
  TensorView ov = out.view();
  const absl::Status st = be->Attention(0, p, q.view(), q.view(), q.view(), ov);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(st.message(), "attention head_dim=96 is not implemented by the cpu backend (has 64, 128, 256)");
}

TEST(CpuAttention, ExplicitScaleAndSingleThreadMatchOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::unique_ptr<Backend> be = CreateCpuBackend(1);
  AttnRun r = MakeRun({1, 2, 2, 50, 90, 128, true, Layout::kBshd, Rounding::kRtne}, seed);
  r.p.softmax_scale = 0.3;  // sharper than 1/sqrt(D)
  RunBoth(*be, r);
  if (::testing::Test::HasFatalFailure()) return;
  const auto cmp = CompareBf16(r.out, r.ref, Rounding::kRtne);
  EXPECT_EQ(cmp.far, 0) << cmp.first_far;
  EXPECT_LT(cmp.rel_rms, 1e-2);
}

}  // namespace
}  // namespace kernelserve

namespace kernelserve {
namespace {

TEST(CpuAttention, ResultDoesNotDependOnThreadCount) {
  // Each query block is computed start to finish by one thread in a fixed
  // order, so 1 and 3 threads (both work splits) give the same bits.
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  for (const Case& c : {Case{1, 4, 2, 150, 150, 128, true, Layout::kBshd, Rounding::kRtne},
                        Case{3, 2, 1, 1, 77, 64, false, Layout::kBhsd, Rounding::kRtne}}) {
    AttnRun r = MakeRun(c, seed);
    ASSERT_TRUE(r.p.Validate(r.q.desc(), r.k.desc(), r.v.desc()).ok());
    HostTensor a = PoisonedBf16(r.p.OutputDesc().shape), b = PoisonedBf16(r.p.OutputDesc().shape);
    TensorView av = a.view(), bv = b.view();
    ASSERT_TRUE(CreateCpuBackend(1)->Attention(0, r.p, r.q.view(), r.k.view(), r.v.view(), av).ok());
    ASSERT_TRUE(CreateCpuBackend(3)->Attention(0, r.p, r.q.view(), r.k.view(), r.v.view(), bv).ok());
    EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), a.num_bytes()), 0) << Name(c);
  }
}

}  // namespace
}  // namespace kernelserve
