#include "kernels/numerics/numerics.h"

#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

namespace kernelserve {
namespace numerics {
namespace {

uint32_t FloatBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float BitsToFloat(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

constexpr uint16_t kBf16NaN = 0x7FFF;
constexpr uint16_t kBf16MaxFinite = 0x7F7F;

// Rounds the non-negative real m (exact in double) to an integer per mode.
double RoundMagnitude(double m, Rounding mode) {
  const double f = std::floor(m);
  const double frac = m - f;  // exact: m and f share the exponent range
  switch (mode) {
    case Rounding::kRtz:
      return f;
    case Rounding::kRtna:
      return frac >= 0.5 ? f + 1 : f;
    case Rounding::kRtne:
    default:
      if (frac > 0.5) return f + 1;
      if (frac < 0.5) return f;
      return std::fmod(f, 2.0) == 0 ? f : f + 1;
  }
}

// A small binary float format: `mbits` stored mantissa bits, exponent bias,
// largest finite magnitude; subnormals below 2^(1-bias).
struct MiniFormat {
  int mbits;
  int bias;
  double max;
  bool has_neg_zero;
  uint8_t nan_code;  // positive-sign NaN code; 0x80 for fnuz
};

MiniFormat FormatOf(DType dtype) {
  switch (dtype) {
    case DType::kFp8E4M3Fnuz:
      return {3, 8, 240.0, false, 0x80};
    case DType::kFp8E5M2:
      return {2, 15, 57344.0, true, 0x7F};
    case DType::kFp4E2M1:
      return {1, 1, 6.0, true, 0x00};
    case DType::kFp8E4M3Fn:
    default:
      return {3, 7, 448.0, true, 0x7F};
  }
}

// Encodes |x| (finite, not NaN) rounded to nearest even and saturated to
// f.max, as the unsigned code (sign bit not set).
uint8_t EncodeMagnitude(double a, const MiniFormat& f) {
  if (a >= f.max) a = f.max;
  if (a == 0) return 0;
  const int emin = 1 - f.bias;
  int e;
  std::frexp(a, &e);
  e -= 1;  // a in [2^e, 2^(e+1))
  if (e < emin) e = emin;
  const double quantum = std::ldexp(1.0, e - f.mbits);
  double r = RoundMagnitude(a / quantum, Rounding::kRtne);
  double v = r * quantum;
  if (v > f.max) v = f.max;  // cannot happen after the clamp above, kept for safety
  if (v == 0) return 0;
  int ev;
  std::frexp(v, &ev);
  ev -= 1;
  if (ev < emin) {  // subnormal: exponent field 0
    return static_cast<uint8_t>(std::ldexp(v, f.mbits - emin));
  }
  const int mant = static_cast<int>(std::ldexp(v, f.mbits - ev)) - (1 << f.mbits);
  return static_cast<uint8_t>(((ev + f.bias) << f.mbits) | mant);
}

uint8_t EncodeMini(double x, DType dtype) {
  const MiniFormat f = FormatOf(dtype);
  const int sign_bit = dtype == DType::kFp4E2M1 ? 0x8 : 0x80;
  if (std::isnan(x)) return dtype == DType::kFp4E2M1 ? 0 : f.nan_code;
  const uint8_t mag = EncodeMagnitude(std::fabs(x), f);
  if (!std::signbit(x)) return mag;
  if (mag == 0 && !f.has_neg_zero) return 0;
  return static_cast<uint8_t>(mag | sign_bit);
}

float DecodeFp8Slow(uint8_t code, DType dtype) {
  const MiniFormat f = FormatOf(dtype);
  const bool neg = (code & 0x80) != 0;
  const int exp_bits = 7 - f.mbits;
  const int e = (code >> f.mbits) & ((1 << exp_bits) - 1);
  const int m = code & ((1 << f.mbits) - 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  switch (dtype) {
    case DType::kFp8E4M3Fn:
      if ((code & 0x7F) == 0x7F) return nan;
      break;
    case DType::kFp8E4M3Fnuz:
      if (code == 0x80) return nan;
      break;
    case DType::kFp8E5M2:
      if (e == 31) return m == 0 ? (neg ? -INFINITY : INFINITY) : nan;
      break;
    default:
      return nan;
  }
  double v = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias - f.mbits)
                    : std::ldexp(static_cast<double>(m + (1 << f.mbits)), e - f.bias - f.mbits);
  return static_cast<float>(neg ? -v : v);
}

struct Fp8Tables {
  std::array<float, 256> fn, fnuz, e5m2;
  std::array<float, 16> e2m1;
  Fp8Tables() {
    for (int c = 0; c < 256; ++c) {
      fn[c] = DecodeFp8Slow(static_cast<uint8_t>(c), DType::kFp8E4M3Fn);
      fnuz[c] = DecodeFp8Slow(static_cast<uint8_t>(c), DType::kFp8E4M3Fnuz);
      e5m2[c] = DecodeFp8Slow(static_cast<uint8_t>(c), DType::kFp8E5M2);
    }
    for (int c = 0; c < 16; ++c) {
      const int e = (c >> 1) & 3, m = c & 1;
      const double v = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
      e2m1[c] = static_cast<float>((c & 8) ? -v : v);
    }
  }
};

const Fp8Tables& Tables() {
  static const Fp8Tables* t = new Fp8Tables();
  return *t;
}

template <typename Scalar>
void FastWalshHadamard(Scalar* x, int n) {
  for (int len = 1; len < n; len <<= 1) {
    for (int i = 0; i < n; i += len << 1) {
      for (int j = i; j < i + len; ++j) {
        const Scalar a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
}

template <typename Scalar>
void HadamardImpl(Scalar* x, int n) {
  if (n == 192) {
    HadamardImpl(x, 128);
    HadamardImpl(x + 128, 64);
    return;
  }
  if (n <= 0 || (n & (n - 1)) != 0) return;  // only powers of two (and 192) are defined
  FastWalshHadamard(x, n);
  const Scalar s = static_cast<Scalar>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace

// ------------------------------------------------------------------- bf16
float Bf16ToFloat(uint16_t bits) { return BitsToFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToBf16(float x, Rounding mode) {
  if (std::isnan(x)) return kBf16NaN;
  const uint32_t u = FloatBits(x);
  switch (mode) {
    case Rounding::kRtz:
      // Truncation never exceeds max finite for finite x; Inf stays Inf.
      return static_cast<uint16_t>(u >> 16);
    case Rounding::kRtna:
      // Adding half an ulp to the magnitude bits carries into the exponent
      // exactly when rounding up; overflow lands on Inf (0x7F80).
      return static_cast<uint16_t>((u + 0x8000u) >> 16);
    case Rounding::kRtne:
    default: {
      const uint32_t lsb = (u >> 16) & 1u;
      return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
    }
  }
}

uint16_t DoubleToBf16(double x, Rounding mode) {
  if (std::isnan(x)) return kBf16NaN;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | 0x7F80;
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);
  e -= 1;
  if (e < -126) e = -126;  // subnormal quantum 2^-133
  const double quantum = std::ldexp(1.0, e - 7);
  const double r = RoundMagnitude(a / quantum, mode);
  const double v = r * quantum;
  const double max_finite = static_cast<double>(Bf16ToFloat(kBf16MaxFinite));
  if (v > max_finite) return sign | (mode == Rounding::kRtz ? kBf16MaxFinite : 0x7F80);
  // v is exactly representable in bf16, hence in float; truncation is exact.
  return sign | static_cast<uint16_t>(FloatBits(static_cast<float>(v)) >> 16);
}

float Fp16ToFloat(uint16_t bits) {
  const bool neg = (bits & 0x8000) != 0;
  const int e = (bits >> 10) & 0x1F;
  const int m = bits & 0x3FF;
  double v;
  if (e == 0x1F) {
    if (m != 0) return std::numeric_limits<float>::quiet_NaN();
    v = INFINITY;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else {
    v = std::ldexp(static_cast<double>(m + 1024), e - 25);
  }
  return static_cast<float>(neg ? -v : v);
}

uint16_t FloatToFp16(float x) {
  if (std::isnan(x)) return 0x7E00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return sign | 0x7C00;
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);
  e -= 1;
  if (e < -14) e = -14;
  const double quantum = std::ldexp(1.0, e - 10);
  const double v = RoundMagnitude(a / quantum, Rounding::kRtne) * quantum;
  if (v > 65504.0) return sign | 0x7C00;
  int ev;
  std::frexp(v, &ev);
  ev -= 1;
  if (ev < -14) return sign | static_cast<uint16_t>(std::ldexp(v, 24));
  const int mant = static_cast<int>(std::ldexp(v, 10 - ev)) - 1024;
  return sign | static_cast<uint16_t>(((ev + 15) << 10) | mant);
}

// ------------------------------------------------------------------- FP8
float Fp8ToFloat(uint8_t code, DType dtype) {
  switch (dtype) {
    case DType::kFp8E4M3Fn:
      return Tables().fn[code];
    case DType::kFp8E4M3Fnuz:
      return Tables().fnuz[code];
    case DType::kFp8E5M2:
      return Tables().e5m2[code];
    default:
      return std::numeric_limits<float>::quiet_NaN();
  }
}

uint8_t FloatToFp8(float x, DType dtype) { return EncodeMini(static_cast<double>(x), dtype); }
uint8_t DoubleToFp8(double x, DType dtype) { return EncodeMini(x, dtype); }

float Fp8Max(DType dtype) { return static_cast<float>(FormatOf(dtype).max); }

int Fp8CodeOfOne(Fp8Format format) { return format == Fp8Format::kE4M3Fnuz ? 64 : 56; }
int Fp8Headroom(Fp8Format format) { return format == Fp8Format::kE4M3Fnuz ? 7 : 8; }

const float* Fp8DecodeTable(DType dtype) {
  switch (dtype) {
    case DType::kFp8E4M3Fnuz:
      return Tables().fnuz.data();
    case DType::kFp8E5M2:
      return Tables().e5m2.data();
    case DType::kFp8E4M3Fn:
    default:
      return Tables().fn.data();
  }
}

// ------------------------------------------------------------------ MXFP4
float E2M1ToFloat(uint8_t nibble) { return Tables().e2m1[nibble & 0xF]; }
// E2M1 has no NaN: NaN encodes as +0.
uint8_t FloatToE2M1(float x) { return EncodeMini(static_cast<double>(x), DType::kFp4E2M1); }
const float* E2M1DecodeTable() { return Tables().e2m1.data(); }

float E8M0ToFloat(uint8_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);
}

// --------------------------------------------------------------- Hadamard
void Hadamard(double* x, int n) { HadamardImpl(x, n); }
void Hadamard(float* x, int n) { HadamardImpl(x, n); }

// ---------------------------------------------------------- quantization
float QuantizeFp8(const float* x, int64_t n, DType dtype, uint8_t* codes) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) amax = a;  // NaN never compares greater
  }
  const float descale = amax == 0 ? 1.0f : amax / Fp8Max(dtype);
  for (int64_t i = 0; i < n; ++i) codes[i] = FloatToFp8(x[i] / descale, dtype);
  return descale;
}

// ----------------------------------------------------------- error metrics
ErrorMetrics CompareToReference(const double* out, const double* ref, int64_t n) {
  ErrorMetrics m;
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(ref[i])) continue;
    if (!std::isfinite(out[i])) {
      ++m.nonfinite;
      continue;
    }
    const double d = out[i] - ref[i];
    err2 += d * d;
    ref2 += ref[i] * ref[i];
    m.max_abs = std::max(m.max_abs, std::fabs(d));
  }
  if (m.nonfinite > 0) {
    // A non-finite output is never "accurate": make rel_rms fail every tolerance.
    m.rel_rms = std::numeric_limits<double>::infinity();
  } else if (ref2 > 0) {
    m.rel_rms = std::sqrt(err2 / ref2);
  } else {
    m.rel_rms = err2 > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  }
  return m;
}

// ---------------------------------------------------------- element access
void Bf16ToFloat(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = BitsToFloat(static_cast<uint32_t>(in[i]) << 16);
}

void FloatToBf16(const float* in, uint16_t* out, int64_t n, Rounding mode) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i], mode);
}

void Fp8ToFloat(const uint8_t* in, float* out, int64_t n, DType dtype) {
  const float* t = Fp8DecodeTable(dtype);
  for (int64_t i = 0; i < n; ++i) out[i] = t[in[i]];
}

double ElementToDouble(DType dtype, const void* data, int64_t i) {
  const uint8_t* b = static_cast<const uint8_t*>(data);
  switch (dtype) {
    case DType::kBf16: {
      uint16_t v;
      std::memcpy(&v, b + 2 * i, 2);
      return Bf16ToFloat(v);
    }
    case DType::kFp16: {
      uint16_t v;
      std::memcpy(&v, b + 2 * i, 2);
      return Fp16ToFloat(v);
    }
    case DType::kFp32: {
      float v;
      std::memcpy(&v, b + 4 * i, 4);
      return v;
    }
    case DType::kFp64: {
      double v;
      std::memcpy(&v, b + 8 * i, 8);
      return v;
    }
    case DType::kFp8E4M3Fn:
    case DType::kFp8E4M3Fnuz:
    case DType::kFp8E5M2:
      return Fp8ToFloat(b[i], dtype);
    case DType::kFp4E2M1:
      return E2M1ToFloat(Fp4Nibble(b, i));
    case DType::kE8M0:
      return E8M0ToFloat(b[i]);
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, b + 4 * i, 4);
      return v;
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, b + 8 * i, 8);
      return static_cast<double>(v);
    }
    case DType::kUint8:
      return b[i];
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

std::vector<double> ToDoubles(const TensorView& t) {
  const int64_t n = t.desc.num_elements();
  std::vector<double> out(n > 0 ? n : 0);
  for (int64_t i = 0; i < n; ++i) out[i] = ElementToDouble(t.desc.dtype, t.data, i);
  return out;
}

std::vector<float> ToFloats(const TensorView& t) {
  const int64_t n = t.desc.num_elements();
  std::vector<float> out(n > 0 ? n : 0);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(ElementToDouble(t.desc.dtype, t.data, i));
  return out;
}

void StoreDoubles(const double* in, int64_t n, DType dtype, Rounding mode, void* out) {
  uint8_t* b = static_cast<uint8_t*>(out);
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kBf16: {
        const uint16_t v = DoubleToBf16(in[i], mode);
        std::memcpy(b + 2 * i, &v, 2);
        break;
      }
      case DType::kFp16: {
        // Through float: double rounding is possible here; fp16 outputs are not part of §4.
        const uint16_t v = FloatToFp16(static_cast<float>(in[i]));
        std::memcpy(b + 2 * i, &v, 2);
        break;
      }
      case DType::kFp32: {
        const float v = static_cast<float>(in[i]);
        std::memcpy(b + 4 * i, &v, 4);
        break;
      }
      case DType::kFp64:
        std::memcpy(b + 8 * i, &in[i], 8);
        break;
      case DType::kFp8E4M3Fn:
      case DType::kFp8E4M3Fnuz:
      case DType::kFp8E5M2:
        b[i] = DoubleToFp8(in[i], dtype);
        break;
      default:
        break;
    }
  }
}

// ------------------------------------------------------ ZYFA P codes (§4)
DType Fp8FormatToDType(Fp8Format format) {
  return format == Fp8Format::kE4M3Fnuz ? DType::kFp8E4M3Fnuz : DType::kFp8E4M3Fn;
}

int BlockReference(double max_t, Fp8Format format) {
  if (std::isnan(max_t) || max_t == -INFINITY) return INT_MIN;
  constexpr double kLimit = 1 << 30;
  const double c = std::ceil(std::min(std::max(max_t, -kLimit), kLimit));
  return static_cast<int>(c) - Fp8Headroom(format);
}

uint8_t ExactPCode(double y, Fp8Format format) {
  const DType dt = Fp8FormatToDType(format);
  if (std::isnan(y)) return DoubleToFp8(y, dt);
  if (y == -INFINITY) return 0;
  return DoubleToFp8(std::exp2(y), dt);
}

uint8_t LeanPCode(float y, Fp8Format format) {
  const int c1 = Fp8CodeOfOne(format);
  const int hi = c1 + 8 * Fp8Headroom(format);
  if (std::isnan(y)) return static_cast<uint8_t>(FormatOf(Fp8FormatToDType(format)).nan_code);
  const float z = std::fma(y, 8.0f, static_cast<float>(c1));  // one fp32 rounding
  const float r = std::nearbyint(z);                           // half-to-even (default mode)
  if (!(r > 0)) return 0;
  if (r >= hi) return static_cast<uint8_t>(hi);
  return static_cast<uint8_t>(r);
}

uint8_t LeanPCode(double y, Fp8Format format) {
  const int c1 = Fp8CodeOfOne(format);
  const int hi = c1 + 8 * Fp8Headroom(format);
  if (std::isnan(y)) return static_cast<uint8_t>(FormatOf(Fp8FormatToDType(format)).nan_code);
  const double r = std::nearbyint(std::fma(y, 8.0, static_cast<double>(c1)));
  if (!(r > 0)) return 0;
  if (r >= hi) return static_cast<uint8_t>(hi);
  return static_cast<uint8_t>(r);
}

}  // namespace numerics
}  // namespace kernelserve
