// The lean P codes by float arithmetic against numerics::LeanPCode (the
// oracle's fp32 formula) for both e4m3 formats: every quarter step of y
// around the codes (ties included), the integers and halves where rounding
// turns, the clamps, and a random sample of floats.
#include "kernels/gpu/common/fp8_lean_code.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

uint32_t Code(float y, Fp8Format f) {
  return f == Fp8Format::kE4M3Fnuz ? gpu::LeanCodeE4m3fnuz(y) : gpu::LeanCodeE4m3fn(y);
}

void ExpectSame(float y, Fp8Format f) {
  ASSERT_EQ(Code(y, f), numerics::LeanPCode(y, f)) << "y = " << y << " format " << static_cast<int>(f);
}

TEST(Fp8LeanCodeTest, StepsTiesAndClampsMatchNumerics) {
  for (Fp8Format f : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    // y in eighths of a code step: 8 y + c1 hits every integer, every tie
    // (x.5: round half to even) and the values one ulp on either side.
    for (int i = -40 * 64; i <= 16 * 64; ++i) {
      const float y = static_cast<float>(i) / 64.f;
      ExpectSame(y, f);
      ExpectSame(std::nextafter(y, -INFINITY), f);
      ExpectSame(std::nextafter(y, INFINITY), f);
    }
    for (float y : {-INFINITY, INFINITY, -1e30f, 1e30f, -3e6f, 3e6f, 0.f, -0.f,
                    std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min()}) {
      ExpectSame(y, f);
    }
  }
  // The codes the design names: 1.0 is c1, the headroom's top is 120 in both.
  EXPECT_EQ(gpu::LeanCodeE4m3fnuz(0.f), 64u);
  EXPECT_EQ(gpu::LeanCodeE4m3fn(0.f), 56u);
  EXPECT_EQ(gpu::LeanCodeE4m3fnuz(7.f), 120u);
  EXPECT_EQ(gpu::LeanCodeE4m3fn(8.f), 120u);
  EXPECT_EQ(gpu::LeanCodeE4m3fnuz(-8.f), 0u);
  EXPECT_EQ(gpu::LeanCodeE4m3fnuz(std::nanf("")), 0u);  // NaN clamps to 0 (the kernels' behaviour)
}

TEST(Fp8LeanCodeTest, RandomFloatsMatchNumerics) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> near(-30.f, 12.f);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float any;
    std::memcpy(&any, &u, sizeof(any));
    for (Fp8Format f : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
      ExpectSame(near(rng), f);
      if (!std::isnan(any)) ExpectSame(any, f);
    }
  }
}

}  // namespace
}  // namespace kernelserve
