#include "kernels/numerics/numerics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve {
namespace numerics {
namespace {

const Rounding kModes[] = {Rounding::kRtne, Rounding::kRtna, Rounding::kRtz};
const DType kFp8Types[] = {DType::kFp8E4M3Fn, DType::kFp8E4M3Fnuz, DType::kFp8E5M2};

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ----------------------------------------------------------- bf16 brute force
// The positive finite bf16 values in increasing order, built from the
// definition (sign 1, exponent 8 bias 127, mantissa 7) without bit tricks.
struct Bf16Table {
  std::vector<double> value;   // index = code, 0..0x7F7F
  Bf16Table() {
    for (int code = 0; code <= 0x7F7F; ++code) {
      const int e = code >> 7, m = code & 0x7F;
      value.push_back(e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134));
    }
  }
};
const Bf16Table& Bf16() {
  static const Bf16Table* t = new Bf16Table();
  return *t;
}

// Reference rounding of any double to bf16 by searching the value table.
uint16_t RefToBf16(double x, Rounding mode) {
  if (std::isnan(x)) return 0x7FFF;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | 0x7F80;
  const auto& v = Bf16().value;
  // lo: largest code with value <= a.
  const int lo = static_cast<int>(std::upper_bound(v.begin(), v.end(), a) - v.begin()) - 1;
  if (v[lo] == a) return sign | lo;
  const int hi = lo + 1;  // 0x7F80 (Inf) when lo is max finite
  const double hi_val = hi <= 0x7F7F ? v[hi] : std::ldexp(1.0, 128);
  uint16_t pick;
  const double twice = 2 * a, mid2 = v[lo] + hi_val;  // both exact
  switch (mode) {
    case Rounding::kRtz:
      pick = lo;
      break;
    case Rounding::kRtna:
      pick = twice >= mid2 ? hi : lo;
      break;
    default:
      pick = twice > mid2 ? hi : twice < mid2 ? lo : ((lo & 1) ? hi : lo);
  }
  return sign | pick;
}

TEST(Bf16, AllPatternsRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    const bool nan = ((b >> 7) & 0xFF) == 0xFF && (b & 0x7F) != 0;
    EXPECT_EQ(std::isnan(f), nan) << b;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    EXPECT_EQ(bits, b << 16);
    for (Rounding m : kModes) {
      const uint16_t want = nan ? 0x7FFF : static_cast<uint16_t>(b);
      ASSERT_EQ(FloatToBf16(f, m), want) << b;
      ASSERT_EQ(DoubleToBf16(f, m), want) << b;
    }
  }
}

TEST(Bf16, FloatMatchesBruteForce) {
  std::mt19937_64 rng(1234);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) {
    const float f = FromBits(static_cast<uint32_t>(rng()));
    xs.push_back(f);
  }
  // Ties, one float ulp either side of a tie, and neighbours of every binade's edges.
  for (int i = 0; i < 50000; ++i) {
    const uint32_t base = static_cast<uint32_t>(rng()) & 0xFFFF0000u;
    xs.push_back(FromBits(base | 0x8000u));
    xs.push_back(FromBits(base | 0x7FFFu));
    xs.push_back(FromBits(base | 0x8001u));
  }
  const float edge[] = {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                        FromBits(0x7F7F8000u), FromBits(0x7F7F7FFFu), FromBits(0x00008000u),
                        FromBits(0x00018000u), FromBits(0x80008000u), 1.0f, 1.00390625f /*tie*/,
                        1.01171875f /*tie to odd->up*/};
  xs.insert(xs.end(), std::begin(edge), std::end(edge));
  for (float x : xs) {
    for (Rounding m : kModes) {
      const uint16_t want = RefToBf16(x, m);
      ASSERT_EQ(FloatToBf16(x, m), want) << x << " bits " << std::hex << FromBits(0) << " mode "
                                         << static_cast<int>(m);
      ASSERT_EQ(DoubleToBf16(static_cast<double>(x), m), want) << x;
    }
  }
}

TEST(Bf16, EdgeCasesByDefinition) {
  // Overflow: RTNE/RTNA to Inf, RTZ to max finite (from doubles above max).
  const double above = std::ldexp(1.0, 128) * 0.999;
  EXPECT_EQ(DoubleToBf16(above, Rounding::kRtne), 0x7F80);
  EXPECT_EQ(DoubleToBf16(above, Rounding::kRtna), 0x7F80);
  EXPECT_EQ(DoubleToBf16(above, Rounding::kRtz), 0x7F7F);
  EXPECT_EQ(DoubleToBf16(-1e300, Rounding::kRtz), 0xFF7F);
  EXPECT_EQ(DoubleToBf16(-1e300, Rounding::kRtne), 0xFF80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::max(), Rounding::kRtne), 0xFF80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::max(), Rounding::kRtz), 0xFF7F);
  // Inf stays Inf in every mode.
  for (Rounding m : kModes) {
    EXPECT_EQ(FloatToBf16(INFINITY, m), 0x7F80);
    EXPECT_EQ(DoubleToBf16(-INFINITY, m), 0xFF80);
    EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::quiet_NaN(), m), 0x7FFF);
    EXPECT_EQ(DoubleToBf16(std::nan(""), m), 0x7FFF);
    EXPECT_EQ(FloatToBf16(-0.0f, m), 0x8000);
    EXPECT_EQ(DoubleToBf16(-0.0, m), 0x8000);
  }
  // Ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(FloatToBf16(1.00390625f, Rounding::kRtne), 0x3F80);
  EXPECT_EQ(FloatToBf16(1.00390625f, Rounding::kRtna), 0x3F81);
  EXPECT_EQ(FloatToBf16(-1.01171875f, Rounding::kRtne), 0xBF82);  // 0x3F81 odd -> up
  EXPECT_EQ(FloatToBf16(-1.01171875f, Rounding::kRtz), 0xBF81);
  // Tiny doubles below half the smallest bf16 subnormal.
  EXPECT_EQ(DoubleToBf16(1e-300, Rounding::kRtne), 0x0000);
  EXPECT_EQ(DoubleToBf16(std::ldexp(1.0, -134), Rounding::kRtne), 0x0000);  // tie to even 0
  EXPECT_EQ(DoubleToBf16(std::ldexp(1.0, -134), Rounding::kRtna), 0x0001);
  EXPECT_EQ(DoubleToBf16(std::ldexp(1.5, -134), Rounding::kRtne), 0x0001);
}

TEST(Bf16, DoubleRoundsOnce) {
  // 1 + 2^-8 + 2^-30 is above the tie; in float it rounds to the tie 1 + 2^-8,
  // which RTNE would then send down to 1. A single rounding goes up.
  const double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  ASSERT_EQ(static_cast<float>(x), 1.00390625f);
  EXPECT_EQ(FloatToBf16(static_cast<float>(x), Rounding::kRtne), 0x3F80);
  EXPECT_EQ(DoubleToBf16(x, Rounding::kRtne), 0x3F81);
  EXPECT_EQ(DoubleToBf16(-x, Rounding::kRtne), 0xBF81);
  // Just below a tie with odd lower neighbour: RTNA must stay down.
  const double y = 1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40);
  EXPECT_EQ(DoubleToBf16(y, Rounding::kRtna), 0x3F80);
  EXPECT_EQ(FloatToBf16(static_cast<float>(y), Rounding::kRtna), 0x3F81);  // float rounded to the tie

  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> frac(-1.0, 1.0);
  for (int i = 0; i < 200000; ++i) {
    // A random bf16 tie point perturbed by a tiny relative amount.
    const uint16_t b = static_cast<uint16_t>(rng() % 0x7F7F);
    const double lo = Bf16().value[b], hi = Bf16().value[b + 1];
    const double tie = 0.5 * (lo + hi);
    const double x2 = tie * (1 + frac(rng) * std::ldexp(1.0, -(20 + static_cast<int>(rng() % 30))));
    const double s = (rng() & 1) ? -x2 : x2;
    for (Rounding m : kModes) ASSERT_EQ(DoubleToBf16(s, m), RefToBf16(s, m)) << s;
  }
  for (int i = 0; i < 200000; ++i) {
    uint64_t u = rng();
    double d;
    std::memcpy(&d, &u, 8);
    for (Rounding m : kModes) ASSERT_EQ(DoubleToBf16(d, m), RefToBf16(d, m)) << d;
  }
}

TEST(Fp16, DecodeAndEncode) {
  EXPECT_EQ(Fp16ToFloat(0x3C00), 1.0f);
  EXPECT_EQ(Fp16ToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0xC000), -2.0f);
  EXPECT_TRUE(std::isinf(Fp16ToFloat(0x7C00)));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7E00)));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = Fp16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToFp16(f), b);
  }
}

// ------------------------------------------------------------- FP8 by definition
struct Fp8Def {
  int mbits, bias;
  double max;
};
Fp8Def DefOf(DType t) {
  if (t == DType::kFp8E4M3Fnuz) return {3, 8, 240};
  if (t == DType::kFp8E5M2) return {2, 15, 57344};
  return {3, 7, 448};
}
bool IsNanCode(uint8_t c, DType t) {
  if (t == DType::kFp8E4M3Fn) return (c & 0x7F) == 0x7F;
  if (t == DType::kFp8E4M3Fnuz) return c == 0x80;
  return (c & 0x7C) == 0x7C && (c & 3) != 0;
}
bool IsInfCode(uint8_t c, DType t) { return t == DType::kFp8E5M2 && (c & 0x7F) == 0x7C; }
double RefDecode(uint8_t c, DType t) {
  const Fp8Def d = DefOf(t);
  const int exp_field = (c & 0x7F) >> d.mbits;
  const int man = c & ((1 << d.mbits) - 1);
  const double mag = exp_field == 0 ? man * std::pow(2.0, 1 - d.bias - d.mbits)
                                    : (1.0 + man / std::pow(2.0, d.mbits)) * std::pow(2.0, exp_field - d.bias);
  return (c & 0x80) ? -mag : mag;
}

TEST(Fp8, DecodeAllCodes) {
  for (DType t : kFp8Types) {
    int nans = 0;
    for (int c = 0; c < 256; ++c) {
      const float f = Fp8ToFloat(static_cast<uint8_t>(c), t);
      const float tf = Fp8DecodeTable(t)[c];
      ASSERT_TRUE(f == tf || (std::isnan(f) && std::isnan(tf))) << c;
      if (IsNanCode(static_cast<uint8_t>(c), t)) {
        EXPECT_TRUE(std::isnan(f)) << c;
        ++nans;
      } else if (IsInfCode(static_cast<uint8_t>(c), t)) {
        EXPECT_TRUE(std::isinf(f)) << c;
      } else {
        EXPECT_EQ(static_cast<double>(f), RefDecode(static_cast<uint8_t>(c), t)) << DTypeName(t) << " " << c;
      }
    }
    EXPECT_EQ(nans, t == DType::kFp8E4M3Fn ? 2 : t == DType::kFp8E4M3Fnuz ? 1 : 6);
  }
  // Anchors from DESIGN §4.
  EXPECT_EQ(Fp8ToFloat(56, DType::kFp8E4M3Fn), 1.0f);
  EXPECT_EQ(Fp8ToFloat(120, DType::kFp8E4M3Fn), 256.0f);
  EXPECT_EQ(Fp8ToFloat(126, DType::kFp8E4M3Fn), 448.0f);
  EXPECT_EQ(Fp8ToFloat(1, DType::kFp8E4M3Fn), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8ToFloat(0x80, DType::kFp8E4M3Fn), 0.0f);
  EXPECT_TRUE(std::signbit(Fp8ToFloat(0x80, DType::kFp8E4M3Fn)));
  EXPECT_EQ(Fp8ToFloat(64, DType::kFp8E4M3Fnuz), 1.0f);
  EXPECT_EQ(Fp8ToFloat(120, DType::kFp8E4M3Fnuz), 128.0f);
  EXPECT_EQ(Fp8ToFloat(127, DType::kFp8E4M3Fnuz), 240.0f);
  EXPECT_EQ(Fp8ToFloat(1, DType::kFp8E4M3Fnuz), std::ldexp(1.0f, -10));
  EXPECT_EQ(Fp8ToFloat(0x3C, DType::kFp8E5M2), 1.0f);
  EXPECT_EQ(Fp8ToFloat(0x7B, DType::kFp8E5M2), 57344.0f);
  EXPECT_EQ(Fp8Max(DType::kFp8E4M3Fn), 448.0f);
  EXPECT_EQ(Fp8Max(DType::kFp8E4M3Fnuz), 240.0f);
  EXPECT_EQ(Fp8Max(DType::kFp8E5M2), 57344.0f);
  EXPECT_EQ(Fp8CodeOfOne(Fp8Format::kE4M3Fn), 56);
  EXPECT_EQ(Fp8CodeOfOne(Fp8Format::kE4M3Fnuz), 64);
  EXPECT_EQ(Fp8Headroom(Fp8Format::kE4M3Fn), 8);
  EXPECT_EQ(Fp8Headroom(Fp8Format::kE4M3Fnuz), 7);
  // The code grows by 8 per doubling in the normal range.
  for (int k = -6; k <= 8; ++k) EXPECT_EQ(FloatToFp8(std::ldexp(1.0f, k), DType::kFp8E4M3Fn), 56 + 8 * k);
}

TEST(Fp8, EncodeDecodeRoundTrip) {
  for (DType t : kFp8Types) {
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      if (IsNanCode(code, t)) {
        EXPECT_EQ(FloatToFp8(Fp8ToFloat(code, t), t), t == DType::kFp8E4M3Fnuz ? 0x80 : 0x7F);
        continue;
      }
      if (IsInfCode(code, t)) {  // saturates
        EXPECT_EQ(FloatToFp8(Fp8ToFloat(code, t), t), (code & 0x80) | 0x7B);
        continue;
      }
      ASSERT_EQ(FloatToFp8(Fp8ToFloat(code, t), t), code) << DTypeName(t) << " " << c;
      ASSERT_EQ(DoubleToFp8(Fp8ToFloat(code, t), t), code);
    }
  }
}

// Nearest finite code by exhaustive search, ties to the even code, saturating.
uint8_t RefEncode(double x, DType t) {
  if (std::isnan(x)) return t == DType::kFp8E4M3Fnuz ? 0x80 : 0x7F;
  const double mx = DefOf(t).max;
  if (x > mx) x = mx;
  if (x < -mx) x = -mx;
  int best = -1;
  double best_d = 0;
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    if (IsNanCode(code, t) || IsInfCode(code, t)) continue;
    const double v = RefDecode(code, t);
    // Prefer the code whose sign matches (for +-0).
    if (v == 0 && std::signbit(x) != ((c & 0x80) != 0) && t != DType::kFp8E4M3Fnuz) continue;
    const double d = std::fabs(v - x);
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Fp8, EncodeMatchesBruteForce) {
  std::mt19937_64 rng(7);
  for (DType t : kFp8Types) {
    const double mx = DefOf(t).max;
    std::vector<double> xs = {0.0, -0.0, mx, -mx, mx * 1.03, mx * 1.1, -mx * 5, 1e30, INFINITY, -INFINITY};
    std::uniform_real_distribution<double> u(-1, 1);
    for (int i = 0; i < 30000; ++i) {
      const int e = static_cast<int>(rng() % 40) - 24;
      xs.push_back(static_cast<float>(std::ldexp(u(rng), e)));
    }
    // Exact ties between adjacent codes.
    for (int c = 0; c < 127; ++c) {
      const uint8_t a = static_cast<uint8_t>(c), b = static_cast<uint8_t>(c + 1);
      if (IsNanCode(b, t) || IsInfCode(b, t)) break;
      const double mid = 0.5 * (RefDecode(a, t) + RefDecode(b, t));
      xs.push_back(mid);
      xs.push_back(-mid);
      xs.push_back(std::nextafter(static_cast<float>(mid), 0.0f));
      xs.push_back(std::nextafter(static_cast<float>(mid), 1e9f));
    }
    for (double x : xs) {
      const float xf = static_cast<float>(x);
      ASSERT_EQ(FloatToFp8(xf, t), RefEncode(xf, t)) << DTypeName(t) << " x=" << xf;
    }
    EXPECT_EQ(FloatToFp8(std::nanf(""), t), t == DType::kFp8E4M3Fnuz ? 0x80 : 0x7F);
  }
  // Saturation codes.
  EXPECT_EQ(FloatToFp8(1e6f, DType::kFp8E4M3Fn), 0x7E);
  EXPECT_EQ(FloatToFp8(-1e6f, DType::kFp8E4M3Fn), 0xFE);
  EXPECT_EQ(FloatToFp8(INFINITY, DType::kFp8E4M3Fnuz), 0x7F);
  EXPECT_EQ(FloatToFp8(-INFINITY, DType::kFp8E4M3Fnuz), 0xFF);
  EXPECT_EQ(FloatToFp8(INFINITY, DType::kFp8E5M2), 0x7B);
  // fnuz has no -0: tiny negatives become +0, never the NaN code 0x80.
  EXPECT_EQ(FloatToFp8(-1e-10f, DType::kFp8E4M3Fnuz), 0x00);
  EXPECT_EQ(FloatToFp8(-0.0f, DType::kFp8E4M3Fnuz), 0x00);
  EXPECT_EQ(FloatToFp8(-0.0f, DType::kFp8E4M3Fn), 0x80);
}

TEST(Mxfp4, E2M1AllNibbles) {
  const float want[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int n = 0; n < 16; ++n) {
    const float v = E2M1ToFloat(static_cast<uint8_t>(n));
    EXPECT_EQ(v, (n & 8) ? -want[n & 7] : want[n & 7]) << n;
    EXPECT_EQ(std::signbit(v), (n & 8) != 0);
    EXPECT_EQ(FloatToE2M1(v), n);
    EXPECT_EQ(E2M1DecodeTable()[n], v);
    // Upper nibble bits are ignored.
    EXPECT_EQ(E2M1ToFloat(static_cast<uint8_t>(n | 0xA0)), v);
  }
  // Ties to even and saturation.
  EXPECT_EQ(FloatToE2M1(0.25f), 0);
  EXPECT_EQ(FloatToE2M1(0.75f), 2);
  EXPECT_EQ(FloatToE2M1(1.25f), 2);
  EXPECT_EQ(FloatToE2M1(1.75f), 4);
  EXPECT_EQ(FloatToE2M1(2.5f), 4);
  EXPECT_EQ(FloatToE2M1(3.5f), 6);
  EXPECT_EQ(FloatToE2M1(5.0f), 6);
  EXPECT_EQ(FloatToE2M1(5.01f), 7);
  EXPECT_EQ(FloatToE2M1(100.0f), 7);
  EXPECT_EQ(FloatToE2M1(-100.0f), 15);
  EXPECT_EQ(FloatToE2M1(-2.6f), 13);
  // Brute force on random values.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-8, 8);
  for (int i = 0; i < 20000; ++i) {
    const float x = u(rng);
    const float c = std::min(std::fabs(x), 6.0f);
    int best = 0;
    for (int k = 1; k < 8; ++k) {
      const float d = std::fabs(want[k] - c), bd = std::fabs(want[best] - c);
      if (d < bd || (d == bd && k % 2 == 0)) best = k;
    }
    const uint8_t got = FloatToE2M1(x);
    EXPECT_EQ(got & 7, best) << x;
    if (best != 0) {
      EXPECT_EQ((got & 8) != 0, x < 0) << x;
    }
  }
  uint8_t packed[2] = {0x21, 0x7F};
  EXPECT_EQ(Fp4Nibble(packed, 0), 1);
  EXPECT_EQ(Fp4Nibble(packed, 1), 2);
  EXPECT_EQ(Fp4Nibble(packed, 2), 0xF);
  EXPECT_EQ(Fp4Nibble(packed, 3), 7);
}

TEST(Mxfp4, E8M0All) {
  for (int e = 0; e < 256; ++e) {
    const float v = E8M0ToFloat(static_cast<uint8_t>(e));
    if (e == 255) {
      EXPECT_TRUE(std::isnan(v));
    } else {
      EXPECT_EQ(static_cast<double>(v), std::pow(2.0, e - 127)) << e;
    }
  }
}

// --------------------------------------------------------------- Hadamard
double SylvesterEntry(int i, int j, int n) {
  return (__builtin_popcount(i & j) % 2 ? -1.0 : 1.0) / std::sqrt(static_cast<double>(n));
}

TEST(Hadamard, OrthonormalAndSylvester) {
  for (int n : {64, 128, 192}) {
    std::vector<double> h(n * n);  // column j = H e_j
    for (int j = 0; j < n; ++j) {
      std::vector<double> x(n, 0.0);
      x[j] = 1;
      Hadamard(x.data(), n);
      for (int i = 0; i < n; ++i) h[i * n + j] = x[i];
      std::vector<float> xf(n, 0.0f);
      xf[j] = 1;
      Hadamard(xf.data(), n);
      for (int i = 0; i < n; ++i) ASSERT_NEAR(xf[i], x[i], 1e-7);
    }
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        double want;
        if (n != 192) {
          want = SylvesterEntry(i, j, n);
        } else if (i < 128 && j < 128) {
          want = SylvesterEntry(i, j, 128);
        } else if (i >= 128 && j >= 128) {
          want = SylvesterEntry(i - 128, j - 128, 64);
        } else {
          want = 0;
        }
        ASSERT_NEAR(h[i * n + j], want, 1e-15) << n << " " << i << " " << j;
        double hh = 0;  // (H·H)_ij
        for (int k = 0; k < n; ++k) hh += h[i * n + k] * h[k * n + j];
        ASSERT_NEAR(hh, i == j ? 1.0 : 0.0, 1e-13);
      }
    }
  }
}

TEST(Hadamard, PreservesDotProducts) {
  std::mt19937 rng(5);
  std::normal_distribution<double> g;
  for (int n : {64, 128, 192}) {
    std::vector<double> a(n), b(n);
    double dot = 0;
    for (int i = 0; i < n; ++i) {
      a[i] = g(rng);
      b[i] = g(rng);
      dot += a[i] * b[i];
    }
    Hadamard(a.data(), n);
    Hadamard(b.data(), n);
    double dot2 = 0;
    for (int i = 0; i < n; ++i) dot2 += a[i] * b[i];
    EXPECT_NEAR(dot, dot2, 1e-12 * n);
  }
}

// ------------------------------------------------------------ quantization
TEST(Quantize, PerTensorScaling) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0, 3);
  for (DType t : kFp8Types) {
    std::vector<float> x(1000);
    float amax = 0;
    for (float& v : x) {
      v = g(rng);
      amax = std::max(amax, std::fabs(v));
    }
    std::vector<uint8_t> codes(x.size(), 0xAA);
    const float descale = QuantizeFp8(x.data(), static_cast<int64_t>(x.size()), t, codes.data());
    EXPECT_EQ(descale, amax / Fp8Max(t));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(codes[i], FloatToFp8(x[i] / descale, t));
      const double back = Fp8ToFloat(codes[i], t) * static_cast<double>(descale);
      // Relative error of a 3- or 2-bit mantissa, or below the subnormal step.
      const double step = std::ldexp(1.0, t == DType::kFp8E5M2 ? -3 : -4);
      EXPECT_LE(std::fabs(back - x[i]), std::fabs(x[i]) * step + descale * 1e-2) << i;
    }
  }
  std::vector<float> zeros(8, 0.0f);
  std::vector<uint8_t> codes(8, 0xAA);
  EXPECT_EQ(QuantizeFp8(zeros.data(), 8, DType::kFp8E4M3Fn, codes.data()), 1.0f);
  for (uint8_t c : codes) EXPECT_EQ(c, 0);
}

// ----------------------------------------------------------- error metrics
TEST(ErrorMetrics, Basics) {
  const double ref[4] = {3, 4, 0, 0};
  const double out[4] = {3, 4, 0, 0};
  ErrorMetrics m = CompareToReference(out, ref, 4);
  EXPECT_EQ(m.rel_rms, 0);
  EXPECT_EQ(m.max_abs, 0);
  EXPECT_EQ(m.nonfinite, 0);
  const double out2[4] = {3, 4, 0.5, 0};
  m = CompareToReference(out2, ref, 4);
  EXPECT_DOUBLE_EQ(m.rel_rms, 0.5 / 5.0);
  EXPECT_DOUBLE_EQ(m.max_abs, 0.5);
  const double out3[4] = {3, NAN, 0, INFINITY};
  m = CompareToReference(out3, ref, 4);
  EXPECT_EQ(m.nonfinite, 2);
  EXPECT_FALSE(m.rel_rms < 1.0);  // NaN output never passes a tolerance
  const double zeros[2] = {0, 0};
  m = CompareToReference(zeros, zeros, 2);
  EXPECT_EQ(m.rel_rms, 0);
  const double one[2] = {1, 0};
  m = CompareToReference(one, zeros, 2);
  EXPECT_TRUE(std::isinf(m.rel_rms));
}

// ------------------------------------------------------------- ZYFA P codes
TEST(PCodes, BlockReference) {
  EXPECT_EQ(BlockReference(0.0, Fp8Format::kE4M3Fn), -8);
  EXPECT_EQ(BlockReference(0.5, Fp8Format::kE4M3Fn), -7);
  EXPECT_EQ(BlockReference(3.0, Fp8Format::kE4M3Fnuz), -4);
  EXPECT_EQ(BlockReference(-2.5, Fp8Format::kE4M3Fn), -10);
  EXPECT_EQ(BlockReference(-INFINITY, Fp8Format::kE4M3Fn), INT_MIN);
  // The block maximum's 2^y lies in (2^(h-1), 2^h].
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(-50, 50);
  for (Fp8Format f : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    const int h = Fp8Headroom(f);
    for (int i = 0; i < 1000; ++i) {
      const double t = u(rng);
      const double y = t - BlockReference(t, f);
      EXPECT_GT(y, h - 1);
      EXPECT_LE(y, h);
    }
  }
}

TEST(PCodes, ExactAndLean) {
  for (Fp8Format f : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    const DType dt = Fp8FormatToDType(f);
    const int c1 = Fp8CodeOfOne(f), h = Fp8Headroom(f);
    EXPECT_EQ(Fp8ToFloat(static_cast<uint8_t>(c1), dt), 1.0f);
    EXPECT_EQ(Fp8ToFloat(static_cast<uint8_t>(c1 + 8 * h), dt), std::ldexp(1.0f, h));
    // Integers in the normal range: both give c1 + 8y.
    for (int y = -6; y <= h; ++y) {
      EXPECT_EQ(ExactPCode(static_cast<double>(y), f), c1 + 8 * y) << y;
      EXPECT_EQ(LeanPCode(static_cast<double>(y), f), c1 + 8 * y) << y;
      EXPECT_EQ(LeanPCode(static_cast<float>(y), f), c1 + 8 * y) << y;
    }
    EXPECT_EQ(ExactPCode(-INFINITY, f), 0);
    EXPECT_EQ(LeanPCode(-INFINITY, f), 0);
    EXPECT_EQ(LeanPCode(-1e30f, f), 0);
    EXPECT_EQ(LeanPCode(static_cast<double>(h) + 0.3, f), c1 + 8 * h);  // clamp (never past h in use)
    // Half-even rounding of 8y + c1: y = 1/16 gives c1 + 0.5 -> c1 (even).
    EXPECT_EQ(LeanPCode(0.0625, f), c1);
    EXPECT_EQ(LeanPCode(0.0625f, f), c1);
    EXPECT_EQ(LeanPCode(0.1875, f), c1 + 2);  // c1 + 1.5 -> c1 + 2
    std::mt19937 rng(2);
    std::uniform_real_distribution<double> u(-20, h);
    for (int i = 0; i < 20000; ++i) {
      const double y = u(rng);
      EXPECT_EQ(ExactPCode(y, f), DoubleToFp8(std::exp2(y), dt));
      // Lean is monotone, within one code per 1/8 of the exact value's log,
      // and equal in fp32 and fp64 away from half-integers.
      const int lean = LeanPCode(y, f);
      const double z = 8 * y + c1;
      if (std::fabs(z - std::floor(z) - 0.5) > 1e-4) {
        EXPECT_EQ(LeanPCode(static_cast<float>(y), f), lean);
      }
      if (z > 0.5 && z < c1 + 8 * h) {
        EXPECT_EQ(lean, static_cast<int>(std::nearbyint(z)));
      }
      // In the normal range the decoded lean value is Mitchell's 2^floor(y)(1 + frac y)
      // rounded to the nearest FP8 step (2^floor(y) / 8).
      if (y > -6) {
        const double fl = std::floor(y);
        const double mitchell = std::ldexp(1.0 + (y - fl), static_cast<int>(fl));
        const double lean_val = Fp8ToFloat(static_cast<uint8_t>(lean), dt);
        EXPECT_LE(std::fabs(lean_val - mitchell), std::ldexp(1.0, static_cast<int>(fl)) / 16 * (1 + 1e-9)) << y;
      }
    }
  }
}

// Chosen y values with their codes worked out by hand. Written as u = y - h
// (h = 8 for e4m3fn, 7 for e4m3fnuz): the code depends only on u, because the
// formats differ by one binade of headroom and 8 in the code of 1.0, and
// e4m3fnuz's values (subnormals included) are half of e4m3fn's code for code.
// Values are given for e4m3fn and halve for e4m3fnuz.
TEST(PCodes, ChosenYByHand) {
  struct Row {
    double u;
    int exact;          // fp8(2^y), RNE
    double exact_value; // e4m3fn value of `exact`
    int lean;           // clamp(round_half_even(8y + c1), 0, c1 + 8h)
    const char* why;
  };
  const Row rows[] = {
      {0.0, 120, 256, 120, "2^h exactly; 8h + c1 = 120"},
      {-0.25, 117, 208, 118, "2^7.75 = 215.27 in [208, 224), midpoint 216; 62 + 56"},
      {-0.34375, 117, 208, 117, "2^7.65625 = 201.7 in [192, 208), midpoint 200; 61.25 + 56 -> 117"},
      {-0.75, 114, 160, 114, "2^7.25 = 152.22 in [144, 160), midpoint 152; 58 + 56"},
      {-0.8125, 113, 144, 114, "2^7.1875 = 145.8 < 152; lean 113.5 is a tie -> even 114"},
      {-0.84375, 113, 144, 113, "2^7.15625 = 142.6 in [128, 144), midpoint 136; 113.25 -> 113"},
      {-4.5, 83, 11, 84, "2^3.5 = 11.31 in [8, 16) step 1 -> 11; 28 + 56 = 84 (12)"},
      {-4.40625, 84, 12, 85, "2^3.59375 = 12.07 -> 12; 28.75 + 56 = 84.75 -> 85 (13)"},
      {-8.0, 56, 1, 56, "2^0 = 1 = code c1 in both modes"},
      {-10.25, 37, 0.203125, 38, "2^-2.25 = 0.2102 = 13.45/64 -> 13/64; -18 + 56 = 38 (14/64)"},
      {-15.25, 3, 0.005859375, 0, "2^-7.25 = 3.36 * 2^-9: subnormal 3; lean -2 clamps to 0"},
      {-16.0, 2, 0.00390625, 0, "2^-8 = 2 * 2^-9 (subnormal); lean -8 -> 0"},
      {-17.0, 1, 0.001953125, 0, "2^-9: smallest subnormal"},
      {-17.5, 1, 0.001953125, 0, "2^-9.5 = 0.71 * 2^-9 -> 1"},
      {-18.0, 0, 0, 0, "2^-10 is half the smallest subnormal: tie -> even 0"},
  };
  for (Fp8Format f : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    const DType dt = Fp8FormatToDType(f);
    const int h = Fp8Headroom(f), c1 = Fp8CodeOfOne(f);
    ASSERT_EQ(h, f == Fp8Format::kE4M3Fn ? 8 : 7);
    ASSERT_EQ(c1, f == Fp8Format::kE4M3Fn ? 56 : 64);
    for (const Row& r : rows) {
      SCOPED_TRACE(::testing::Message() << Fp8FormatName(f) << " u=" << r.u << ": " << r.why);
      const double y = r.u + h;
      // By hand.
      EXPECT_EQ(ExactPCode(y, f), r.exact);
      EXPECT_EQ(Fp8ToFloat(static_cast<uint8_t>(r.exact), dt), std::ldexp(r.exact_value, h - 8));
      EXPECT_EQ(LeanPCode(y, f), r.lean);
      EXPECT_EQ(LeanPCode(static_cast<float>(y), f), r.lean);
      // By the definitions.
      EXPECT_EQ(ExactPCode(y, f), DoubleToFp8(std::exp2(y), dt));
      EXPECT_EQ(LeanPCode(y, f), static_cast<int>(std::clamp(std::nearbyint(8 * y + c1), 0.0, c1 + 8.0 * h)));
    }
  }
}

// R = ceil(max t) - h for the block maxima of the constructed-score tests
// (oracle_test, cpu_fp8_attention_test), integers and near-integers.
TEST(PCodes, BlockReferenceIsCeilMinusHeadroom) {
  for (Fp8Format f : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    const int h = Fp8Headroom(f);
    EXPECT_EQ(BlockReference(20.25, f), 21 - h);
    EXPECT_EQ(BlockReference(7.75, f), 8 - h);
    EXPECT_EQ(BlockReference(6.65625, f), 7 - h);
    EXPECT_EQ(BlockReference(-1.34375, f), -1 - h);
    EXPECT_EQ(BlockReference(-2.84375, f), -2 - h);
    EXPECT_EQ(BlockReference(5.59375, f), 6 - h);
    EXPECT_EQ(BlockReference(7.0, f), 7 - h);  // y_max = h exactly
    EXPECT_EQ(BlockReference(std::nextafter(7.0, 8.0), f), 8 - h);
    EXPECT_EQ(BlockReference(std::nextafter(7.0, 6.0), f), 7 - h);
    EXPECT_EQ(BlockReference(-0.0, f), -h);
    EXPECT_EQ(BlockReference(-0.5, f), -h);
  }
}

TEST(Elements, ToDoublesAndStore) {
  HostTensor t(DType::kBf16, {3});
  const uint16_t vals[3] = {0x3F80, 0xC000, 0x7FFF};
  std::memcpy(t.bytes(), vals, 6);
  const std::vector<double> d = ToDoubles(t.view());
  EXPECT_EQ(d[0], 1.0);
  EXPECT_EQ(d[1], -2.0);
  EXPECT_TRUE(std::isnan(d[2]));
  const double in[3] = {1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), -3, 0};
  uint16_t out[3];
  StoreDoubles(in, 3, DType::kBf16, Rounding::kRtne, out);
  EXPECT_EQ(out[0], 0x3F81);
  EXPECT_EQ(out[1], 0xC040);
  EXPECT_EQ(out[2], 0);
  HostTensor p(DType::kFp4E2M1, {4});
  p.bytes()[0] = 0x9A;  // elements: 0xA = -1, 0x9 = -0.5
  p.bytes()[1] = 0x07;  // 6, 0
  const std::vector<double> pd = ToDoubles(p.view());
  EXPECT_EQ(pd, (std::vector<double>{-1, -0.5, 6, 0}));
  const int32_t ints[2] = {-5, 7};
  EXPECT_EQ(ElementToDouble(DType::kInt32, ints, 1), 7);
}

}  // namespace
}  // namespace numerics
}  // namespace kernelserve
