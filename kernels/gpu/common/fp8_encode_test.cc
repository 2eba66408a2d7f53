// FloatToE4m3fn and FloatToE4m3fnuz against numerics::FloatToFp8: every rounding
// case of every exponent and sign, then a large random sample of all bit
// patterns.
#include "kernels/gpu/common/fp8_encode.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "kernels/api/dtype.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Both formats: e4m3fn and e4m3fnuz.
int64_t Mismatches(uint32_t u, int64_t* checked) {
  const float x = FromBits(u);
  ++*checked;
  int64_t bad = 0;
  for (DType dt : {DType::kFp8E4M3Fn, DType::kFp8E4M3Fnuz}) {
    const uint32_t got = dt == DType::kFp8E4M3Fn ? gpu::FloatToE4m3fn(x) : gpu::FloatToE4m3fnuz(x);
    const uint32_t want = numerics::FloatToFp8(x, dt);
    if (got == want) continue;
    ADD_FAILURE() << DTypeName(dt) << " bits 0x" << std::hex << u << " (" << x << "): got 0x" << got << ", want 0x"
                  << want;
    ++bad;
  }
  return bad;
}

TEST(Fp8EncodeTest, EveryRoundingCaseMatchesNumerics) {
  // The rounding of a normal e4m3 keeps mantissa bits 20-22, rounds at bit
  // 19 and is sticky below; a subnormal rounds at bit 20..23 of the 24-bit
  // significand. So every 8-bit mantissa head (bits 15-22) with the tails
  // (bits 0-14) 0, 1, 0x4000 and 0x7FFF meets every case: exact ties, the
  // values next to them, and rounding by the sticky bits alone.
  int64_t bad = 0, checked = 0;
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t e = 0; e < 256; ++e) {
      for (uint32_t head = 0; head < 256; ++head) {
        for (uint32_t tail : {0u, 1u, 0x4000u, 0x7FFFu}) {
          bad += Mismatches(sign | (e << 23) | (head << 15) | tail, &checked);
        }
      }
      for (uint32_t m = 0; m < (1u << 23); m += 0x7FFu) bad += Mismatches(sign | (e << 23) | m, &checked);
      if (bad > 10) return;
    }
  }
  EXPECT_EQ(bad, 0);
  std::printf("%lld floats checked\n", static_cast<long long>(checked));
}

TEST(Fp8EncodeTest, RandomBitPatternsMatchNumerics) {
  std::mt19937 rng(std::random_device{}());
  int64_t bad = 0, checked = 0;
  for (int i = 0; i < (1 << 24) && bad <= 10; ++i) bad += Mismatches(static_cast<uint32_t>(rng()), &checked);
  EXPECT_EQ(bad, 0);
}

TEST(Fp8EncodeTest, NamedValues) {
  EXPECT_EQ(gpu::FloatToE4m3fn(1.f), 56u);
  EXPECT_EQ(gpu::FloatToE4m3fn(256.f), 120u);
  EXPECT_EQ(gpu::FloatToE4m3fn(448.f), 0x7Eu);
  EXPECT_EQ(gpu::FloatToE4m3fn(1e30f), 0x7Eu);
  EXPECT_EQ(gpu::FloatToE4m3fn(-INFINITY), 0xFEu);
  EXPECT_EQ(gpu::FloatToE4m3fn(NAN), 0x7Fu);
  EXPECT_EQ(gpu::FloatToE4m3fn(-0.f), 0x80u);
  EXPECT_EQ(gpu::FloatToE4m3fn(0x1p-9f), 1u);   // the smallest subnormal
  EXPECT_EQ(gpu::FloatToE4m3fn(0x1p-10f), 0u);  // half of it: to even
  EXPECT_EQ(gpu::FloatToE4m3fn(0x1.8p-9f), 2u);  // 1.5 quanta: to even

  EXPECT_EQ(gpu::FloatToE4m3fnuz(1.f), 64u);
  EXPECT_EQ(gpu::FloatToE4m3fnuz(128.f), 120u);
  EXPECT_EQ(gpu::FloatToE4m3fnuz(240.f), 0x7Fu);
  EXPECT_EQ(gpu::FloatToE4m3fnuz(-1e30f), 0xFFu);
  EXPECT_EQ(gpu::FloatToE4m3fnuz(NAN), 0x80u);
  EXPECT_EQ(gpu::FloatToE4m3fnuz(-0.f), 0u);  // no negative zero
  EXPECT_EQ(gpu::FloatToE4m3fnuz(-0x1p-12f), 0u);
  EXPECT_EQ(gpu::FloatToE4m3fnuz(0x1p-10f), 1u);  // the smallest subnormal
  EXPECT_EQ(gpu::FloatToE4m3fnuz(0x1p-11f), 0u);  // half of it: to even
}

// Every e4m3fnuz code to e4m3fn keeps its value where e4m3fn has it
// (|v| >= 2^-6 and the even multiples of 2^-10 below), rounds the rest to
// nearest even, and maps NaN to NaN.
TEST(Fp8EncodeTest, FnuzCodesToFnKeepTheirValues) {
  int exact = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const uint32_t fn = gpu::E4m3fnuzToE4m3fn(c);
    const float v = numerics::Fp8ToFloat(static_cast<uint8_t>(c), DType::kFp8E4M3Fnuz);
    const float w = numerics::Fp8ToFloat(static_cast<uint8_t>(fn), DType::kFp8E4M3Fn);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(w)) << "code 0x" << std::hex << c;
      continue;
    }
    EXPECT_EQ(fn, numerics::FloatToFp8(v, DType::kFp8E4M3Fn)) << "code 0x" << std::hex << c;
    if (std::fabs(v) >= 0x1p-6f) {
      EXPECT_EQ(w, v) << "code 0x" << std::hex << c;
    }
    exact += w == v;
  }
  // 255 values: all but the 4 odd subnormals and 4 odd normals of the lowest binade, per sign.
  EXPECT_EQ(exact, 255 - 16);
}

}  // namespace
}  // namespace kernelserve
