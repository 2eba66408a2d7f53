#include "kernels/cpu/oracle.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

using numerics::GaussianBf16;

Shape AttnShape(Layout l, int64_t b, int64_t h, int64_t s, int64_t d) {
  return l == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

// Element (b, h, s, d) of a [B,H,S,D] or [B,S,H,D] tensor, read independently of the oracle.
double At(const HostTensor& t, Layout l, int64_t b, int64_t h, int64_t s, int64_t d) {
  const Shape& sh = t.shape();
  const int64_t heads = l == Layout::kBhsd ? sh[1] : sh[2];
  const int64_t seq = l == Layout::kBhsd ? sh[2] : sh[1];
  const int64_t idx = l == Layout::kBhsd ? ((b * heads + h) * seq + s) * sh[3] + d
                                         : ((b * seq + s) * heads + h) * sh[3] + d;
  return numerics::ElementToDouble(t.dtype(), t.bytes(), idx);
}

// Textbook softmax attention with natural exp, one output element at a time.
std::vector<double> BruteAttention(const HostTensor& q, const HostTensor& k, const HostTensor& v, Layout l,
                                   bool causal, double scale) {
  const int64_t B = q.shape()[0];
  const int64_t Hq = l == Layout::kBhsd ? q.shape()[1] : q.shape()[2];
  const int64_t Sq = l == Layout::kBhsd ? q.shape()[2] : q.shape()[1];
  const int64_t Hk = l == Layout::kBhsd ? k.shape()[1] : k.shape()[2];
  const int64_t Sk = l == Layout::kBhsd ? k.shape()[2] : k.shape()[1];
  const int64_t D = q.shape()[3], Dv = v.shape()[3];
  HostTensor shape_only(DType::kUint8, AttnShape(l, B, Hq, Sq, Dv));
  std::vector<double> out(B * Hq * Sq * Dv, -12345.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t hk = h * Hk / Hq;
        std::vector<double> s;
        for (int64_t j = 0; j < Sk; ++j) {
          if (causal && j > i + Sk - Sq) break;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += At(q, l, b, h, i, d) * At(k, l, b, hk, j, d);
          s.push_back(dot * scale);
        }
        const double mx = s.empty() ? 0 : *std::max_element(s.begin(), s.end());
        double den = 0;
        for (double& x : s) den += (x = std::exp(x - mx));
        for (int64_t d = 0; d < Dv; ++d) {
          double num = 0;
          for (size_t j = 0; j < s.size(); ++j) num += s[j] * At(v, l, b, hk, j, d);
          const int64_t idx = l == Layout::kBhsd ? ((b * Hq + h) * Sq + i) * Dv + d
                                                 : ((b * Sq + i) * Hq + h) * Dv + d;
          out[idx] = s.empty() ? 0.0 : num / den;
        }
      }
  return out;
}

double RelRms(const std::vector<double>& a, const std::vector<double>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  return numerics::CompareToReference(a.data(), ref.data(), static_cast<int64_t>(ref.size())).rel_rms;
}

void ExpectClose(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << i;
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i]))) << i;
  }
}

// ------------------------------------------------------------- bf16 attention
TEST(OracleAttention, MatchesBruteForce) {
  struct Case {
    Layout l;
    bool causal;
    int64_t B, Hq, Hk, Sq, Sk, D;
  };
  const Case cases[] = {
      {Layout::kBhsd, false, 2, 2, 2, 5, 7, 64},  {Layout::kBhsd, true, 1, 4, 2, 9, 9, 128},
      {Layout::kBshd, true, 2, 3, 1, 4, 11, 64},  {Layout::kBshd, false, 1, 2, 2, 3, 1, 256},
      {Layout::kBhsd, true, 1, 2, 1, 13, 70, 128}, {Layout::kBhsd, true, 1, 1, 1, 6, 3, 64},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    HostTensor q = GaussianBf16(AttnShape(c.l, c.B, c.Hq, c.Sq, c.D), seed++, 0, 2);
    HostTensor k = GaussianBf16(AttnShape(c.l, c.B, c.Hk, c.Sk, c.D), seed++);
    HostTensor v = GaussianBf16(AttnShape(c.l, c.B, c.Hk, c.Sk, c.D), seed++);
    AttentionParams p;
    p.layout = c.l;
    p.causal = c.causal;
    ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
    auto got = oracle::Attention(p, q, k, v);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, BruteAttention(q, k, v, c.l, c.causal, 1 / std::sqrt(double(c.D))), 1e-12);
  }
}

TEST(OracleAttention, AnalyticFacts) {
  // One key: the output is V.
  HostTensor q = GaussianBf16({1, 4, 3, 64}, 1);
  HostTensor k = GaussianBf16({1, 2, 1, 64}, 2);
  HostTensor v = GaussianBf16({1, 2, 1, 64}, 3);
  AttentionParams p;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
  auto o = oracle::Attention(p, q, k, v);
  ASSERT_TRUE(o.ok());
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t d = 0; d < 64; ++d) ASSERT_EQ((*o)[(h * 3 + i) * 64 + d], At(v, Layout::kBhsd, 0, h / 2, 0, d));

  // Zero queries: uniform scores, the mean of V (all keys; causal Sq=1 too).
  HostTensor qz(DType::kBf16, {1, 1, 1, 128});
  HostTensor k2 = GaussianBf16({1, 1, 50, 128}, 4);
  HostTensor v2 = GaussianBf16({1, 1, 50, 128}, 5);
  for (bool causal : {false, true}) {
    AttentionParams pz;
    pz.causal = causal;
    ASSERT_TRUE(pz.Validate(qz.desc(), k2.desc(), v2.desc()).ok());
    auto oz = oracle::Attention(pz, qz, k2, v2);
    ASSERT_TRUE(oz.ok());
    for (int64_t d = 0; d < 128; ++d) {
      double mean = 0;
      for (int64_t j = 0; j < 50; ++j) mean += At(v2, Layout::kBhsd, 0, 0, j, d);
      ASSERT_NEAR((*oz)[d], mean / 50, 1e-14);
    }
  }

  // Causal with Sq = 1 sees every key: equal to non-causal.
  HostTensor q1 = GaussianBf16({2, 2, 1, 64}, 6);
  HostTensor k1 = GaussianBf16({2, 2, 33, 64}, 7);
  HostTensor v1 = GaussianBf16({2, 2, 33, 64}, 8);
  AttentionParams pc, pn;
  pc.causal = true;
  ASSERT_TRUE(pc.Validate(q1.desc(), k1.desc(), v1.desc()).ok());
  ASSERT_TRUE(pn.Validate(q1.desc(), k1.desc(), v1.desc()).ok());
  EXPECT_EQ(*oracle::Attention(pc, q1, k1, v1), *oracle::Attention(pn, q1, k1, v1));

  // Causal with Sq > Skv: the first Sq - Skv rows see no key and are 0.
  HostTensor q3 = GaussianBf16({1, 1, 5, 64}, 9);
  HostTensor k3 = GaussianBf16({1, 1, 2, 64}, 10);
  HostTensor v3 = GaussianBf16({1, 1, 2, 64}, 11, 3.0);
  AttentionParams p3;
  p3.causal = true;
  ASSERT_TRUE(p3.Validate(q3.desc(), k3.desc(), v3.desc()).ok());
  auto o3 = oracle::Attention(p3, q3, k3, v3);
  ASSERT_TRUE(o3.ok());
  for (int64_t d = 0; d < 64; ++d) {
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ((*o3)[i * 64 + d], 0.0);
    EXPECT_EQ((*o3)[3 * 64 + d], At(v3, Layout::kBhsd, 0, 0, 0, d));  // row 3 sees key 0 only
  }
}

TEST(OracleAttention, GqaEqualsRepeatedKvAndBshdIsTransposed) {
  const int64_t B = 2, Hq = 6, Hk = 2, Sq = 7, Sk = 19, D = 64;
  HostTensor q = GaussianBf16({B, Hq, Sq, D}, 21);
  HostTensor k = GaussianBf16({B, Hk, Sk, D}, 22);
  HostTensor v = GaussianBf16({B, Hk, Sk, D}, 23);
  HostTensor kr(DType::kBf16, {B, Hq, Sk, D}), vr(DType::kBf16, {B, Hq, Sk, D});
  const int64_t row = Sk * D * 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      std::memcpy(kr.bytes() + (b * Hq + h) * row, k.bytes() + (b * Hk + h / 3) * row, row);
      std::memcpy(vr.bytes() + (b * Hq + h) * row, v.bytes() + (b * Hk + h / 3) * row, row);
    }
  AttentionParams p, pr;
  p.causal = pr.causal = true;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
  ASSERT_TRUE(pr.Validate(q.desc(), kr.desc(), vr.desc()).ok());
  const std::vector<double> o = *oracle::Attention(p, q, k, v);
  EXPECT_EQ(o, *oracle::Attention(pr, q, kr, vr));

  // BSHD: transpose every tensor; the output must be the transposed output.
  auto transpose = [](const HostTensor& t) {
    const Shape& s = t.shape();  // [B,H,S,D] -> [B,S,H,D]
    HostTensor o(t.dtype(), {s[0], s[2], s[1], s[3]});
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t h = 0; h < s[1]; ++h)
        for (int64_t i = 0; i < s[2]; ++i)
          std::memcpy(o.bytes() + (((b * s[2] + i) * s[1] + h) * s[3]) * 2,
                      t.bytes() + (((b * s[1] + h) * s[2] + i) * s[3]) * 2, s[3] * 2);
    return o;
  };
  HostTensor qt = transpose(q), kt = transpose(k), vt = transpose(v);
  AttentionParams pt;
  pt.causal = true;
  pt.layout = Layout::kBshd;
  ASSERT_TRUE(pt.Validate(qt.desc(), kt.desc(), vt.desc()).ok());
  const std::vector<double> ot = *oracle::Attention(pt, qt, kt, vt);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(ot[((b * Sq + i) * Hq + h) * D + d], o[((b * Hq + h) * Sq + i) * D + d]);
}

TEST(OracleAttention, FastEnough) {
  HostTensor q = GaussianBf16({1, 2, 512, 128}, 31);
  HostTensor k = GaussianBf16({1, 2, 512, 128}, 32);
  HostTensor v = GaussianBf16({1, 2, 512, 128}, 33);
  AttentionParams p;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(oracle::Attention(p, q, k, v).ok());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0);
}

TEST(OracleAttention, RejectsMismatchedInputs) {
  HostTensor q = GaussianBf16({1, 2, 4, 64}, 1);
  HostTensor k = GaussianBf16({1, 2, 4, 128}, 2);
  AttentionParams p;
  auto r = oracle::Attention(p, q, k, k);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------- FP8 attention
struct Fp8Case {
  Fp8AttentionParams p;
  HostTensor q, k, v;
  oracle::QuantizedAttentionInputs qin;
};

Fp8Case MakeFp8(HostTensor q, HostTensor k, HostTensor v, bool causal, PMode mode,
                Fp8Format fmt = Fp8Format::kE4M3Fn, bool hadamard = false,
                DescaleMode dm = DescaleMode::kPerTensor) {
  Fp8Case c;
  c.q = std::move(q);
  c.k = std::move(k);
  c.v = std::move(v);
  c.p.causal = causal;
  c.p.p_mode = mode;
  c.p.format = fmt;
  c.p.hadamard = hadamard;
  c.p.descale_mode = dm;
  const absl::Status st = c.p.Validate(c.q.desc(), c.k.desc(), c.v.desc(), nullptr, nullptr, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  Fp8AttentionInputs in{c.q.view(), c.k.view(), c.v.view(), {}, {}, {}};
  auto qi = oracle::QuantizeAttentionInputs(c.p, in);
  EXPECT_TRUE(qi.ok()) << qi.status();
  c.qin = std::move(*qi);
  return c;
}

std::vector<double> RunFp8(Fp8Case& c, PMode mode, oracle::PQuant pq = oracle::PQuant::kAsParams) {
  c.p.p_mode = mode;
  auto r = oracle::Fp8Attention(c.p, c.qin, pq);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<double>();
}

TEST(OracleFp8, QuantizationAsTheServerDoesIt) {
  HostTensor q = GaussianBf16({2, 2, 16, 192}, 41, 0, 3);
  HostTensor k = GaussianBf16({2, 1, 70, 192}, 42);
  HostTensor v = GaussianBf16({2, 1, 70, 128}, 43);
  for (DescaleMode dm : {DescaleMode::kPerTensor, DescaleMode::kPerHead}) {
    for (bool had : {false, true}) {
      Fp8Case c = MakeFp8(q, k, v, true, PMode::kExact, Fp8Format::kE4M3Fnuz, had, dm);
      ASSERT_EQ(c.qin.q.dtype(), DType::kFp8E4M3Fnuz);
      ASSERT_EQ(c.qin.q_descale.size(), 4u);
      ASSERT_EQ(c.qin.k_descale.size(), 2u);
      // Recompute Q's codes independently: rotate rows (fp64 -> fp32), amax per scope.
      std::vector<float> x = numerics::ToFloats(c.q.view());
      if (had) {
        for (size_t r = 0; r < x.size(); r += 192) {
          std::vector<double> row(x.begin() + r, x.begin() + r + 192);
          numerics::Hadamard(row.data(), 192);
          for (int d = 0; d < 192; ++d) x[r + d] = static_cast<float>(row[d]);
        }
      }
      const size_t per_head = 16 * 192;
      for (size_t bh = 0; bh < 4; ++bh) {
        float amax = 0;
        const size_t lo = dm == DescaleMode::kPerHead ? bh * per_head : 0;
        const size_t hi = dm == DescaleMode::kPerHead ? lo + per_head : x.size();
        for (size_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float ds = amax / 240.0f;
        EXPECT_EQ(c.qin.q_descale[bh], ds);
        for (size_t i = bh * per_head; i < (bh + 1) * per_head; ++i) {
          ASSERT_EQ(c.qin.q.bytes()[i], numerics::FloatToFp8(x[i] / ds, DType::kFp8E4M3Fnuz)) << i;
        }
      }
      // The rotation leaves the scores (hence unquantized-P attention) nearly unchanged.
      auto ref = oracle::Fp8AttentionUnquantized(c.p, c.q, c.k, c.v);
      ASSERT_TRUE(ref.ok());
      EXPECT_LT(RelRms(RunFp8(c, PMode::kExact, oracle::PQuant::kNone), *ref), 0.1);
    }
  }
}

TEST(OracleFp8, Fp8InputsUseTheirDescales) {
  HostTensor q = GaussianBf16({1, 2, 8, 128}, 51);
  HostTensor k = GaussianBf16({1, 2, 40, 128}, 52);
  HostTensor v = GaussianBf16({1, 2, 40, 128}, 53);
  Fp8Case c = MakeFp8(q, k, v, false, PMode::kExact, Fp8Format::kE4M3Fn, false, DescaleMode::kPerHead);
  // Feed the codes back as FP8 inputs with [B,H] descales, and with [1] descales.
  HostTensor qd(DType::kFp32, {1, 2}), kd(DType::kFp32, {1, 2}), vd(DType::kFp32, {1, 2});
  std::memcpy(qd.bytes(), c.qin.q_descale.data(), 8);
  std::memcpy(kd.bytes(), c.qin.k_descale.data(), 8);
  std::memcpy(vd.bytes(), c.qin.v_descale.data(), 8);
  Fp8AttentionParams p;
  p.causal = false;
  ASSERT_TRUE(p.Validate(c.qin.q.desc(), c.qin.k.desc(), c.qin.v.desc(), &qd.desc(), &kd.desc(), &vd.desc()).ok());
  Fp8AttentionInputs in{c.qin.q.view(), c.qin.k.view(), c.qin.v.view(), qd.view(), kd.view(), vd.view()};
  auto qi = oracle::QuantizeAttentionInputs(p, in);
  ASSERT_TRUE(qi.ok()) << qi.status();
  EXPECT_EQ(qi->q_descale, c.qin.q_descale);
  EXPECT_EQ(qi->v.storage(), c.qin.v.storage());
  EXPECT_EQ(*oracle::Fp8Attention(p, *qi, oracle::PQuant::kAsParams), RunFp8(c, PMode::kExact));
  HostTensor one(DType::kFp32, {1});
  const float two = 2.0f;
  std::memcpy(one.bytes(), &two, 4);
  Fp8AttentionInputs in1{c.qin.q.view(), c.qin.k.view(), c.qin.v.view(), one.view(), one.view(), one.view()};
  auto q1 = oracle::QuantizeAttentionInputs(p, in1);
  ASSERT_TRUE(q1.ok());
  EXPECT_EQ(q1->k_descale, std::vector<float>(2, 2.0f));
  // Unquantized attention needs the bf16 inputs.
  EXPECT_EQ(oracle::Fp8AttentionUnquantized(p, c.q, c.k, c.v).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(OracleFp8, UniformScoresGiveTheMeanInEveryMode) {
  // Q = 0: every t is 0, 2^y is an exact power of two, so no P rounding at all.
  HostTensor q(DType::kBf16, {1, 1, 3, 128});
  HostTensor k = GaussianBf16({1, 1, 150, 128}, 61);
  HostTensor v = GaussianBf16({1, 1, 150, 128}, 62, 0.5);
  Fp8Case c = MakeFp8(q, k, v, false, PMode::kExact);
  const std::vector<double> none = RunFp8(c, PMode::kExact, oracle::PQuant::kNone);
  for (PMode m : {PMode::kExact, PMode::kLean, PMode::kNaive}) ExpectClose(RunFp8(c, m), none, 1e-14);
}

TEST(OracleFp8, ExactPMatchesDefinitionOnOneBlock) {
  // Skv = 64 non-causal: one block per row; compute P̂ by hand from the dequantized inputs.
  HostTensor q = GaussianBf16({1, 1, 4, 128}, 71, 0, 2);
  HostTensor k = GaussianBf16({1, 1, 64, 128}, 72);
  HostTensor v = GaussianBf16({1, 1, 64, 128}, 73);
  for (PMode mode : {PMode::kExact, PMode::kLean}) {
    Fp8Case c = MakeFp8(q, k, v, false, mode);
    const std::vector<double> got = RunFp8(c, mode);
    const float* f = numerics::Fp8DecodeTable(DType::kFp8E4M3Fn);
    for (int64_t i = 0; i < 4; ++i) {
      std::vector<double> t(64);
      for (int64_t j = 0; j < 64; ++j) {
        double s = 0;
        for (int d = 0; d < 128; ++d)
          s += f[c.qin.q.bytes()[i * 128 + d]] * c.qin.q_descale[0] * f[c.qin.k.bytes()[j * 128 + d]] *
               c.qin.k_descale[0];
        t[j] = s / std::sqrt(128.0) / std::log(2.0);
      }
      const double r = std::ceil(*std::max_element(t.begin(), t.end())) - 8;
      std::vector<double> ph(64);
      double l = 0;
      for (int64_t j = 0; j < 64; ++j) {
        const double y = t[j] - r;
        ph[j] = mode == PMode::kExact
                    ? numerics::Fp8ToFloat(numerics::DoubleToFp8(std::pow(2.0, y), DType::kFp8E4M3Fn),
                                           DType::kFp8E4M3Fn)
                    : numerics::Fp8ToFloat(static_cast<uint8_t>(std::clamp(std::nearbyint(8 * y + 56), 0.0, 120.0)),
                                           DType::kFp8E4M3Fn);
        l += ph[j];
      }
      EXPECT_GT(*std::max_element(ph.begin(), ph.end()), 128.0);  // block max in (2^7, 2^8]
      for (int d = 0; d < 128; ++d) {
        double o = 0;
        for (int64_t j = 0; j < 64; ++j) o += ph[j] * f[c.qin.v.bytes()[j * 128 + d]] * c.qin.v_descale[0];
        ASSERT_NEAR(got[i * 128 + d], o / l, 1e-12) << i << " " << d;
      }
    }
  }
}

TEST(OracleFp8, BlockCodesDoNotDependOnBlockOrder) {
  // Non-causal: permuting whole 64-key blocks of K and V leaves exact/lean outputs unchanged.
  HostTensor q = GaussianBf16({1, 1, 8, 128}, 81, 0, 2);
  HostTensor k = GaussianBf16({1, 1, 256, 128}, 82);
  HostTensor v = GaussianBf16({1, 1, 256, 128}, 83, 1.0);
  HostTensor kp(k.desc(), k.storage()), vp(v.desc(), v.storage());
  const int perm[4] = {2, 0, 3, 1};
  const size_t blk = 64 * 128 * 2;
  for (int b = 0; b < 4; ++b) {
    std::memcpy(kp.bytes() + b * blk, k.bytes() + perm[b] * blk, blk);
    std::memcpy(vp.bytes() + b * blk, v.bytes() + perm[b] * blk, blk);
  }
  for (PMode m : {PMode::kExact, PMode::kLean}) {
    Fp8Case a = MakeFp8(q, k, v, false, m);
    Fp8Case b = MakeFp8(q, kp, vp, false, m);
    ExpectClose(RunFp8(a, m), RunFp8(b, m), 1e-13);
  }
}

TEST(OracleFp8, ErrorsOnGaussianInputs) {
  HostTensor q = GaussianBf16({1, 2, 128, 128}, 91);
  HostTensor k = GaussianBf16({1, 2, 1024, 128}, 92);
  HostTensor v = GaussianBf16({1, 2, 1024, 128}, 93);
  for (Fp8Format fmt : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    Fp8Case c = MakeFp8(q, k, v, true, PMode::kExact, fmt);
    const std::vector<double> ref = RunFp8(c, PMode::kExact, oracle::PQuant::kNone);
    const double exact = RelRms(RunFp8(c, PMode::kExact), ref);
    const double lean = RelRms(RunFp8(c, PMode::kLean), ref);
    const double naive = RelRms(RunFp8(c, PMode::kNaive), ref);
    const double input = RelRms(ref, *oracle::Fp8AttentionUnquantized(c.p, c.q, c.k, c.v));
    std::printf("gaussian %s: p_quant exact %.4g lean %.4g naive %.4g; input quant %.4g\n",
                Fp8FormatName(fmt).c_str(), exact, lean, naive, input);
    EXPECT_GT(exact, 0);
    EXPECT_LT(exact, 0.05);
    EXPECT_LE(lean, 1.4 * exact);
    EXPECT_LT(naive, 0.1);
    EXPECT_LT(input, 0.2);
  }
}

TEST(OracleFp8, LongTailNaiveLosesTheTail) {
  numerics::LongTailOptions o;
  o.seq_q = 32;
  o.seq_kv = 4096;
  o.heads_q = 2;
  o.heads_kv = 1;
  numerics::AttentionTensors in = numerics::LongTailAttention(o);
  Fp8Case c = MakeFp8(in.q, in.k, in.v, true, PMode::kExact);
  const std::vector<double> ref = RunFp8(c, PMode::kExact, oracle::PQuant::kNone);
  const double exact = RelRms(RunFp8(c, PMode::kExact), ref);
  const double lean = RelRms(RunFp8(c, PMode::kLean), ref);
  const std::vector<double> nv = RunFp8(c, PMode::kNaive);
  const double naive = RelRms(nv, ref);
  // Naive shrinks outputs toward zero: its mean is well below the reference's.
  double mean_ref = 0, mean_naive = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    mean_ref += ref[i];
    mean_naive += nv[i];
  }
  std::printf("long-tail: exact %.4g lean %.4g naive %.4g; mean ref %.4g naive %.4g\n", exact, lean, naive,
              mean_ref / ref.size(), mean_naive / ref.size());
  EXPECT_LT(exact, 0.05);
  EXPECT_LE(lean, 1.4 * exact);
  EXPECT_GT(naive, 5 * exact);
  EXPECT_LT(mean_naive, 0.9 * mean_ref);
}

// ------------------------------------------------ constructed scores (analytic)
// One query row (causal, so it sees every key) over 16384 keys whose base-2
// scores t are chosen exactly (numerics::ConstructedScoresFp8, softmax_scale =
// ln 2). Block 0 (keys 0..63) holds the row maximum t = 20.25 (key 0), keys
// 3.66, 9.5 and 14.5 binades below it (keys 1..3) and 60 keys 40 binades below
// (keys 4..63). Blocks 1..255 hold a tail, identical scores within a block:
// t_a in the odd blocks, t_b in the even ones.
//   shallow: t_a = 7.75, t_b = 6.65625 (12.5 and 13.6 binades below the
//     maximum): 16320 keys carrying 2/3 of the softmax mass;
//   deep: t_a = -1.34375, t_b = -2.84375 (21.6 and 23.1 binades below): past
//     the ~17 binades that one row-wide scale with headroom would keep (2^h
//     down to the smallest subnormal); at 16K keys they hold only 0.3 % of
//     the mass (real mass that deep takes ~2^21 keys), but the block-scaled
//     modes must still keep it, exactly as computed below.
// V is one-hot: key j adds 1 to output slot(j) (its group below) and 1 to slot
// 127, so output[s] is the normalized P̂ mass of group s and output[127] is
// the average of a constant-1 V column.
//
// Exact and lean: the row result is Σ_b 2^(R_b - M) Σ_j P̂_j V_j / Σ_b 2^(R_b -
// M) Σ_j P̂_j. Every term is an FP8 value times a power of two and all sums fit
// in 53 bits, so the oracle's output is the one rounding of num / den: equal to
// the hand value below bit for bit. e4m3fnuz has one binade less headroom and
// values half of e4m3fn's code for code, so its weights 2^(R - M) P̂ are those
// of e4m3fn and its outputs are the same bits. Naive: P̂ = fp8(2^(t - 20.25))
// (block 0 holds the maximum, so the running max is 20.25 from the start),
// divided by the unrounded sum of 2^(t - 20.25): every tail key is below half
// the smallest subnormal (2^-10 e4m3fn, 2^-11 e4m3fnuz) and rounds to exactly 0.
struct KeyGroup {
  const char* what;
  double t;
  int ref;           // block reference R + h = ceil(block max t)
  double exact;      // decoded exact-P code at h = 8 (e4m3fn; e4m3fnuz: half)
  double lean;       // decoded lean-P code at h = 8 (e4m3fn; e4m3fnuz: half)
  double naive_fn;   // decoded naive P̂ = fp8(2^(t - 20.25)), e4m3fn
  double naive_fnuz; // the same in e4m3fnuz (no block scale, so it differs)
};

constexpr int64_t kConstructedKeys = 16384;
constexpr double kConstructedMax = 20.25;

// Slot (group) of key j: 0..3 the single keys of block 0, 4 the 60 deep keys
// of block 0, 5 the odd tail blocks, 6 the even tail blocks.
int ConstructedGroup(int64_t j) {
  if (j < 4) return static_cast<int>(j);
  if (j < 64) return 4;
  return (j / 64) % 2 == 1 ? 5 : 6;
}

// Hand-derived groups (y = t - R; "u" = y - h, the code depends only on u).
std::vector<KeyGroup> ConstructedGroups(bool deep) {
  std::vector<KeyGroup> g = {
      // y = h - 0.75: 2^7.25 = 152.2 > midpoint 152 -> 160; lean 8 * 7.25 + 56 = 114 (160). Naive 2^0.
      {"key 0 (max)", 20.25, 21, 160, 160, 1, 1},
      // y = h - 4.40625: 2^3.59375 = 12.07 -> 12; lean 28.75 + 56 = 84.75 -> 85 (13). Naive
      // 2^-3.65625 = 10.16 * 2^-7 -> 10 * 2^-7.
      {"key 1", 16.59375, 21, 12, 13, 0.078125, 0.078125},
      // y = h - 10.25: 2^-2.25 = 13.45 / 64 -> 13/64; lean 38 (14/64). Naive 2^-9.5: 0.71 * 2^-9 -> 2^-9
      // (e4m3fn), 1.41 * 2^-10 -> 2^-10 (e4m3fnuz).
      {"key 2", 10.75, 21, 0.203125, 0.21875, 0x1p-9, 0x1p-10},
      // y = h - 15.25: 2^-7.25 = 3.36 * 2^-9 -> subnormal 3; lean 8y + c1 = -2 -> 0. Naive 2^-14.5 -> 0.
      {"key 3", 5.75, 21, 0.005859375, 0, 0, 0},
      // 40 binades down: 0 in every mode.
      {"keys 4..63", -19.75, 21, 0, 0, 0, 0},
  };
  if (!deep) {
    // R + h = 8, y = h - 0.25: 2^7.75 = 215.3 < midpoint 216 -> 208; lean 62 + 56 = 118 (224).
    g.push_back({"odd tail blocks", 7.75, 8, 208, 224, 0, 0});
    // R + h = 7, y = h - 0.34375: 2^7.65625 = 201.7 > 200 -> 208; lean 117.25 -> 117 (208).
    g.push_back({"even tail blocks", 6.65625, 7, 208, 208, 0, 0});
  } else {
    // R + h = -1, y = h - 0.34375: as above, 208 and 208.
    g.push_back({"odd tail blocks", -1.34375, -1, 208, 208, 0, 0});
    // R + h = -2, y = h - 0.84375: 2^7.15625 = 142.6 > 136 -> 144; lean 113.25 -> 113 (144).
    g.push_back({"even tail blocks", -2.84375, -2, 144, 144, 0, 0});
  }
  return g;
}

numerics::Fp8AttentionTensors ConstructedInputs(Fp8Format fmt, const std::vector<KeyGroup>& g) {
  std::vector<double> t(kConstructedKeys), v(kConstructedKeys * 128, 0.0);
  for (int64_t j = 0; j < kConstructedKeys; ++j) {
    const int s = ConstructedGroup(j);
    t[j] = g[s].t;
    v[j * 128 + s] = 1;
    v[j * 128 + 127] = 1;
  }
  numerics::Fp8AttentionTensors x;
  EXPECT_TRUE(numerics::ConstructedScoresFp8(Fp8FormatDType(fmt), 128, 128, t, v, &x));
  return x;
}

std::vector<double> RunConstructed(const numerics::Fp8AttentionTensors& x, Fp8Format fmt, PMode mode,
                                   oracle::PQuant pq) {
  Fp8AttentionParams p;
  p.causal = true;
  p.format = fmt;
  p.p_mode = mode;
  p.softmax_scale = numerics::kConstructedScoresScale;
  const absl::Status st = p.Validate(x.q.desc(), x.k.desc(), x.v.desc(), &x.q_descale.desc(),
                                     &x.k_descale.desc(), &x.v_descale.desc());
  EXPECT_TRUE(st.ok()) << st;
  Fp8AttentionInputs in{x.q.view(), x.k.view(), x.v.view(),
                        x.q_descale.view(), x.k_descale.view(), x.v_descale.view()};
  auto qi = oracle::QuantizeAttentionInputs(p, in);
  EXPECT_TRUE(qi.ok()) << qi.status();
  auto r = oracle::Fp8Attention(p, *qi, pq);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<double>(128, -1.0);
}

// Expected outputs from per-key weights w(group): out[s] = Σ_{j in s} w / Σ_j w
// (out[127] = 1 unless `den` is given), sums in fp64 (exact for these weights).
std::vector<double> ExpectedFromWeights(const std::vector<double>& w, double den = 0) {
  std::vector<double> num(128, 0.0);
  double sum = 0;
  for (int64_t j = 0; j < kConstructedKeys; ++j) {
    num[ConstructedGroup(j)] += w[ConstructedGroup(j)];
    sum += w[ConstructedGroup(j)];
  }
  num[127] = sum;
  if (den == 0) den = sum;
  for (double& x : num) x /= den;
  return num;
}

TEST(OracleFp8, ConstructedScoresGiveTheAnalyticPModes) {
  for (bool deep : {false, true}) {
    const std::vector<KeyGroup> g = ConstructedGroups(deep);
    std::vector<double> exact_fn, lean_fn;
    for (Fp8Format fmt : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
      SCOPED_TRACE(::testing::Message() << (deep ? "deep" : "shallow") << " tail, " << Fp8FormatName(fmt));
      const DType dt = Fp8FormatDType(fmt);
      const int h = numerics::Fp8Headroom(fmt);
      const double half = fmt == Fp8Format::kE4M3Fn ? 1.0 : 0.5;  // e4m3fnuz's values are half
      // The hand table against the definitions of R, exact, lean and naive P.
      for (const KeyGroup& k : g) {
        SCOPED_TRACE(k.what);
        const double block_max = k.ref == 21 ? kConstructedMax : k.t;
        ASSERT_EQ(numerics::BlockReference(block_max, fmt), k.ref - h);
        ASSERT_EQ(static_cast<int>(std::ceil(block_max)) - h, k.ref - h);
        const double y = k.t - (k.ref - h);
        ASSERT_EQ(numerics::Fp8ToFloat(numerics::ExactPCode(y, fmt), dt), k.exact * half);
        ASSERT_EQ(numerics::Fp8ToFloat(numerics::DoubleToFp8(std::exp2(y), dt), dt), k.exact * half);
        ASSERT_EQ(numerics::Fp8ToFloat(numerics::LeanPCode(y, fmt), dt), k.lean * half);
        ASSERT_EQ(numerics::Fp8ToFloat(numerics::DoubleToFp8(std::exp2(k.t - kConstructedMax), dt), dt),
                  fmt == Fp8Format::kE4M3Fn ? k.naive_fn : k.naive_fnuz);
      }
      const numerics::Fp8AttentionTensors x = ConstructedInputs(fmt, g);
      if (::testing::Test::HasFailure()) return;
      // Weights relative to block 0's frame: P̂ * 2^(R_b - R_0), at h = 8.
      std::vector<double> we, wl, wn, ws;
      double l_softmax = 0;
      for (const KeyGroup& k : g) {
        we.push_back(std::ldexp(k.exact, k.ref - 21));
        wl.push_back(std::ldexp(k.lean, k.ref - 21));
        wn.push_back(fmt == Fp8Format::kE4M3Fn ? k.naive_fn : k.naive_fnuz);
        ws.push_back(std::exp2(k.t - kConstructedMax));
      }
      for (int64_t j = 0; j < kConstructedKeys; ++j) l_softmax += ws[ConstructedGroup(j)];
      const std::vector<double> want_exact = ExpectedFromWeights(we);
      const std::vector<double> want_lean = ExpectedFromWeights(wl);
      const std::vector<double> want_naive = ExpectedFromWeights(wn, l_softmax);
      const std::vector<double> softmax = ExpectedFromWeights(ws);

      const std::vector<double> exact = RunConstructed(x, fmt, PMode::kExact, oracle::PQuant::kAsParams);
      const std::vector<double> lean = RunConstructed(x, fmt, PMode::kLean, oracle::PQuant::kAsParams);
      const std::vector<double> naive = RunConstructed(x, fmt, PMode::kNaive, oracle::PQuant::kAsParams);
      const std::vector<double> ref = RunConstructed(x, fmt, PMode::kExact, oracle::PQuant::kNone);
      ASSERT_EQ(exact.size(), 128u);
      for (int d = 0; d < 128; ++d) {
        SCOPED_TRACE(::testing::Message() << "slot " << d);
        // Exact arithmetic: bit-equal.
        EXPECT_EQ(exact[d], want_exact[d]);
        EXPECT_EQ(lean[d], want_lean[d]);
        // Naive's denominator is a sum of 16384 rounded exp2 values; the
        // analytic softmax has rounded exp2 throughout.
        EXPECT_NEAR(naive[d], want_naive[d], 1e-13 * std::fabs(want_naive[d]));
        EXPECT_NEAR(ref[d], softmax[d], 1e-13 * std::fabs(softmax[d]));
      }
      EXPECT_EQ(exact[127], 1.0);  // normalized by the sum of the rounded P̂
      EXPECT_EQ(lean[127], 1.0);
      // The tail: naive underflows it to exactly zero; exact and lean keep it
      // within their rounding of the analytic softmax (each P̂ within 1/16 of
      // 2^y for exact, Mitchell's error and a 1/16 step for lean: measured
      // within 4.1 %, bounded here at 10 %).
      for (int s : {5, 6}) {
        SCOPED_TRACE(g[s].what);
        EXPECT_EQ(naive[s], 0.0);
        EXPECT_GT(softmax[s], deep ? 5e-4 : 0.2);
        EXPECT_NEAR(exact[s], softmax[s], 0.1 * softmax[s]);
        EXPECT_NEAR(lean[s], softmax[s], 0.1 * softmax[s]);
      }
      // Naive's output is block 0's contribution alone over the full denominator.
      EXPECT_NEAR(naive[127], naive[0] + naive[1] + naive[2] + naive[3], 1e-15);
      const double e_exact = RelRms(exact, softmax), e_lean = RelRms(lean, softmax),
                   e_naive = RelRms(naive, softmax);
      std::printf("constructed %s tail %s: rel_rms vs softmax exact %.4g lean %.4g naive %.4g; "
                  "tail mass %.4g, naive V mean %.4g\n",
                  deep ? "deep" : "shallow", Fp8FormatName(fmt).c_str(), e_exact, e_lean, e_naive,
                  softmax[5] + softmax[6], naive[127]);
      if (!deep) {
        // The tail holds 2/3 of the mass: naive shrinks the constant V column to ~1/3.
        EXPECT_LT(naive[127], 0.35);
        EXPECT_LT(e_exact, 0.03);
        EXPECT_LT(e_lean, 0.03);
        EXPECT_GT(e_naive, 0.5);
      }
      if (fmt == Fp8Format::kE4M3Fn) {
        exact_fn = exact;
        lean_fn = lean;
      } else {
        EXPECT_EQ(exact, exact_fn);
        EXPECT_EQ(lean, lean_fn);
      }
    }
  }
}

// Identical scores in every block: all P̂ are equal, so normalizing by their
// sum gives exactly V's mean. Here P̂ != 2^y (exact 192 vs 2^7.59375 = 193.17,
// lean 208), so normalizing by the unrounded sum would be 0.6 % or 7.7 % off.
TEST(OracleFp8, IdenticalScoresGiveExactlyTheMeanOfV) {
  const int64_t skv = 256;
  const double t = 5.59375;  // R = 6 - h, y = h - 0.40625
  for (Fp8Format fmt : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    SCOPED_TRACE(Fp8FormatName(fmt));
    const DType dt = Fp8FormatDType(fmt);
    const int h = numerics::Fp8Headroom(fmt);
    const double y = t - (6 - h);
    ASSERT_EQ(numerics::BlockReference(t, fmt), 6 - h);
    const double half = fmt == Fp8Format::kE4M3Fn ? 1.0 : 0.5;
    ASSERT_EQ(numerics::Fp8ToFloat(numerics::ExactPCode(y, fmt), dt), 192 * half);
    ASSERT_EQ(numerics::Fp8ToFloat(numerics::LeanPCode(y, fmt), dt), 208 * half);
    ASSERT_NE(std::exp2(y), 192 * half);
    numerics::SeededRng rng(7);
    std::vector<double> v(skv * 128), mean(128, 0.0);
    for (double& x : v) {
      x = numerics::Fp8ToFloat(numerics::DoubleToFp8(std::clamp(0.5 + rng.Normal(), -4.0, 4.0), dt), dt);
    }
    for (int64_t j = 0; j < skv; ++j)
      for (int d = 0; d < 128; ++d) mean[d] += v[j * 128 + d];  // exact: FP8 values, 256 terms
    for (double& m : mean) m /= skv;
    numerics::Fp8AttentionTensors x;
    ASSERT_TRUE(numerics::ConstructedScoresFp8(dt, 128, 128, std::vector<double>(skv, t), v, &x));
    for (PMode mode : {PMode::kExact, PMode::kLean, PMode::kNaive}) {
      SCOPED_TRACE(PModeName(mode));
      const std::vector<double> out = RunConstructed(x, fmt, mode, oracle::PQuant::kAsParams);
      ASSERT_EQ(out.size(), 128u);
      for (int d = 0; d < 128; ++d) EXPECT_EQ(out[d], mean[d]) << d;
    }
  }
}

// ---------------------------------------------------------------- MLA decode
HostTensor Int32s(const std::vector<int32_t>& v) {
  HostTensor t(DType::kInt32, {static_cast<int64_t>(v.size())});
  std::memcpy(t.bytes(), v.data(), v.size() * 4);
  return t;
}

HostTensor RandomFp8(const Shape& s, uint64_t seed, DType dt) {
  HostTensor t(dt, s);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0, 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.bytes()[i] = numerics::FloatToFp8(g(rng) * 8, dt);
  return t;
}

TEST(OracleMla, MatchesBruteForceContiguous) {
  const int64_t B = 2, Q = 2, H = 3, S = 37;
  HostTensor ql = GaussianBf16({B, Q, H, 512}, 101, 0, 0.2);
  HostTensor qp = GaussianBf16({B, Q, H, 64}, 102, 0, 0.2);
  HostTensor kv = RandomFp8({B, S, 576}, 103, DType::kFp8E4M3Fnuz);
  MlaDecodeParams p;
  p.kv_scale = 0.125;
  ASSERT_TRUE(p.Validate(ql.desc(), qp.desc(), kv.desc(), false, 1, nullptr, nullptr, nullptr, nullptr).ok());
  MlaDecodeInputs in{ql.view(), qp.view(), kv.view(), {}, {}, {}, {}};
  auto got = oracle::MlaDecode(p, in);
  ASSERT_TRUE(got.ok()) << got.status();
  const float* dec = numerics::Fp8DecodeTable(DType::kFp8E4M3Fnuz);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Q; ++t)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> w;
        const int64_t n = S - Q + t + 1;
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int d = 0; d < 576; ++d) {
            const double qv = d < 512 ? numerics::ElementToDouble(DType::kBf16, ql.bytes(), ((b * Q + t) * H + h) * 512 + d)
                                      : numerics::ElementToDouble(DType::kBf16, qp.bytes(), ((b * Q + t) * H + h) * 64 + d - 512);
            s += qv * dec[kv.bytes()[(b * S + j) * 576 + d]];
          }
          w.push_back(std::exp(s * 0.125 / std::sqrt(576.0)));
        }
        const double den = std::accumulate(w.begin(), w.end(), 0.0);
        for (int d = 0; d < 512; ++d) {
          double num = 0;
          for (int64_t j = 0; j < n; ++j) num += w[j] * dec[kv.bytes()[(b * S + j) * 576 + d]] * 0.125;
          ASSERT_NEAR((*got)[((b * Q + t) * H + h) * 512 + d], num / den, 1e-12);
        }
      }
}

TEST(OracleMla, PagedWithPermutedSlotsEqualsContiguous) {
  const int64_t B = 3, Q = 4, H = 2, S = 45;
  HostTensor ql = GaussianBf16({B, Q, H, 512}, 111, 0, 0.3);
  HostTensor qp = GaussianBf16({B, Q, H, 64}, 112, 0, 0.3);
  HostTensor kv = RandomFp8({B, S, 576}, 113, DType::kFp8E4M3Fn);
  const std::vector<int32_t> seq = {45, 17, 4};
  const std::vector<int32_t> qlens = {4, 2, 1};
  HostTensor seq_t = Int32s(seq), ql_t = Int32s(qlens);
  MlaDecodeParams pc;
  ASSERT_TRUE(pc.Validate(ql.desc(), qp.desc(), kv.desc(), false, 1, &seq_t, nullptr, nullptr, &ql_t).ok());
  MlaDecodeInputs cin{ql.view(), qp.view(), kv.view(), seq_t.view(), {}, {}, ql_t.view()};
  auto contiguous = oracle::MlaDecode(pc, cin);
  ASSERT_TRUE(contiguous.ok()) << contiguous.status();
  // Rows past a request's q_len window are 0; the rest are finite and non-zero.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Q; ++t)
      for (int64_t d = 0; d < H * 512; ++d) {
        const double x = (*contiguous)[(b * Q + t) * H * 512 + d];
        if (t >= qlens[b]) ASSERT_EQ(x, 0.0);
        else ASSERT_TRUE(std::isfinite(x));
      }
  for (int64_t page : {1, 4, 16}) {
    // Pool with the tokens' pages at random page slots, plus unused pages.
    std::vector<int32_t> indptr = {0}, indices;
    int64_t pages_total = 0;
    for (int64_t b = 0; b < B; ++b) pages_total += (seq[b] + page - 1) / page;
    const int64_t num_pages = pages_total + 5;
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(static_cast<unsigned>(page)));
    HostTensor pool(DType::kFp8E4M3Fn, {num_pages * page, 576});
    std::memset(pool.bytes(), 0x7F, pool.num_bytes());  // NaN: unused rows must never be read
    int64_t next = 0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t pg = 0; pg < (seq[b] + page - 1) / page; ++pg) {
        const int32_t slot_page = perm[next++];
        indices.push_back(slot_page);
        for (int64_t r = 0; r < page && pg * page + r < seq[b]; ++r)
          std::memcpy(pool.bytes() + (slot_page * page + r) * 576, kv.bytes() + (b * S + pg * page + r) * 576, 576);
      }
      indptr.push_back(static_cast<int32_t>(indices.size()));
    }
    HostTensor ind_t = Int32s(indices), ptr_t = Int32s(indptr);
    MlaDecodeParams pp;
    const absl::Status st = pp.Validate(ql.desc(), qp.desc(), pool.desc(), true, page, &seq_t, &ind_t, &ptr_t, &ql_t);
    ASSERT_TRUE(st.ok()) << st;
    MlaDecodeInputs pin{ql.view(), qp.view(), pool.view(), seq_t.view(), ind_t.view(), ptr_t.view(), ql_t.view()};
    auto paged = oracle::MlaDecode(pp, pin);
    ASSERT_TRUE(paged.ok()) << paged.status();
    EXPECT_EQ(*paged, *contiguous) << "page " << page;
  }
  // A ragged request equals the same request run alone with q_len = its q_lens.
  HostTensor ql1(DType::kBf16, {1, 2, H, 512}), qp1(DType::kBf16, {1, 2, H, 64});
  std::memcpy(ql1.bytes(), ql.bytes() + (1 * Q) * H * 512 * 2, ql1.num_bytes());
  std::memcpy(qp1.bytes(), qp.bytes() + (1 * Q) * H * 64 * 2, qp1.num_bytes());
  HostTensor kv1(DType::kFp8E4M3Fn, {1, 17, 576});
  std::memcpy(kv1.bytes(), kv.bytes() + 1 * S * 576, kv1.num_bytes());
  MlaDecodeParams p1;
  ASSERT_TRUE(p1.Validate(ql1.desc(), qp1.desc(), kv1.desc(), false, 1, nullptr, nullptr, nullptr, nullptr).ok());
  auto alone = oracle::MlaDecode(p1, MlaDecodeInputs{ql1.view(), qp1.view(), kv1.view(), {}, {}, {}, {}});
  ASSERT_TRUE(alone.ok());
  for (int64_t i = 0; i < 2 * H * 512; ++i) ASSERT_EQ((*alone)[i], (*contiguous)[1 * Q * H * 512 + i]);
}

// ----------------------------------------------------------------------- MoE
struct MoeData {
  HostTensor x, ids, weights, w13, s13, w2, s2;
};

// Random MXFP4 weights [E, rows, cols] with scales 2^(-3..2).
void RandomMxfp4(int64_t E, int64_t rows, int64_t cols, std::mt19937_64& rng, HostTensor* w, HostTensor* s) {
  *w = HostTensor(DType::kFp4E2M1, {E, rows, cols});
  *s = HostTensor(DType::kE8M0, {E, rows, cols / 32});
  for (int64_t i = 0; i < w->num_bytes(); ++i) w->bytes()[i] = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < s->num_bytes(); ++i) s->bytes()[i] = static_cast<uint8_t>(124 + rng() % 6);
}

// Dense dequantized weight, decoded from the E2M1 bit layout directly.
double W(const HostTensor& w, const HostTensor& s, int64_t e, int64_t r, int64_t c) {
  const int64_t rows = w.shape()[1], cols = w.shape()[2];
  const int64_t i = (e * rows + r) * cols + c;
  const uint8_t nib = (i % 2 == 0) ? (w.bytes()[i / 2] & 0xF) : (w.bytes()[i / 2] >> 4);
  const int exp = (nib >> 1) & 3, man = nib & 1;
  double v = exp == 0 ? man * 0.5 : (1 + man * 0.5) * std::pow(2.0, exp - 1);
  if (nib & 8) v = -v;
  return v * std::pow(2.0, s.bytes()[(e * rows + r) * (cols / 32) + c / 32] - 127.0);
}

TEST(OracleMoe, MatchesDenseMatmul) {
  const int64_t T = 5, topk = 3, E = 4, K = 64, I = 32, N = 96;
  std::mt19937_64 rng(121);
  MoeData d;
  d.x = GaussianBf16({T, K}, 122);
  std::vector<int32_t> ids(T * topk);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % E);
  d.ids = HostTensor(DType::kInt32, {T, topk});
  std::memcpy(d.ids.bytes(), ids.data(), ids.size() * 4);
  d.weights = HostTensor(DType::kFp32, {T, topk});
  std::vector<float> wts(T * topk);
  for (auto& w : wts) w = static_cast<float>((rng() % 1000) / 1000.0);
  std::memcpy(d.weights.bytes(), wts.data(), wts.size() * 4);
  RandomMxfp4(E, 2 * I, K, rng, &d.w13, &d.s13);
  RandomMxfp4(E, N, I, rng, &d.w2, &d.s2);
  auto xv = [&](int64_t t, int64_t k) { return numerics::ElementToDouble(DType::kBf16, d.x.bytes(), t * K + k); };

  // Dense reference for gate/up.
  std::vector<double> h(T * topk * 2 * I);
  for (int64_t pr = 0; pr < T * topk; ++pr)
    for (int64_t r = 0; r < 2 * I; ++r) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += xv(pr / topk, k) * W(d.w13, d.s13, ids[pr], r, k);
      h[pr * 2 * I + r] = s;
    }
  auto silu = [](double g) { return g / (1 + std::exp(-g)); };
  MoeInputs in{d.x.view(), d.ids.view(), d.weights.view(), d.w13.view(), d.s13.view(), d.w2.view(), d.s2.view()};
  {
    MoeParams p;
    p.stage = MoeStage::kGateUp;
    ASSERT_TRUE(p.Validate(d.x.desc(), d.ids, nullptr, &d.w13.desc(), &d.s13.desc(), nullptr, nullptr).ok());
    auto o = oracle::Moe(p, in);
    ASSERT_TRUE(o.ok()) << o.status();
    ExpectClose(*o, h, 1e-13);
    p.swiglu = true;
    auto o2 = oracle::Moe(p, in);
    ASSERT_TRUE(o2.ok());
    ASSERT_EQ(o2->size(), static_cast<size_t>(T * topk * I));
    for (int64_t pr = 0; pr < T * topk; ++pr)
      for (int64_t i = 0; i < I; ++i)
        ASSERT_NEAR((*o2)[pr * I + i], silu(h[pr * 2 * I + i]) * h[pr * 2 * I + I + i], 1e-12 * (1 + std::fabs(h[pr * 2 * I + I + i])));
  }
  // Down on its own bf16 input [T*top_k, I].
  HostTensor a = GaussianBf16({T * topk, I}, 123);
  std::vector<double> y(T * topk * N);
  for (int64_t pr = 0; pr < T * topk; ++pr)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t i = 0; i < I; ++i)
        s += numerics::ElementToDouble(DType::kBf16, a.bytes(), pr * I + i) * W(d.w2, d.s2, ids[pr], n, i);
      y[pr * N + n] = s;
    }
  {
    MoeInputs din{a.view(), d.ids.view(), d.weights.view(), {}, {}, d.w2.view(), d.s2.view()};
    MoeParams p;
    p.stage = MoeStage::kDown;
    ASSERT_TRUE(p.Validate(a.desc(), d.ids, nullptr, nullptr, nullptr, &d.w2.desc(), &d.s2.desc()).ok());
    auto o = oracle::Moe(p, din);
    ASSERT_TRUE(o.ok()) << o.status();
    ExpectClose(*o, y, 1e-13);
    p.weighted_sum = true;
    ASSERT_TRUE(p.Validate(a.desc(), d.ids, &d.weights.desc(), nullptr, nullptr, &d.w2.desc(), &d.s2.desc()).ok());
    auto o2 = oracle::Moe(p, din);
    ASSERT_TRUE(o2.ok());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t r = 0; r < topk; ++r) s += wts[t * topk + r] * y[(t * topk + r) * N + n];
        ASSERT_NEAR((*o2)[t * N + n], s, 1e-12 * (1 + std::fabs(s)));
      }
  }
  // Layer: swiglu intermediate rounded to bf16, then weighted down.
  {
    MoeParams p;
    p.stage = MoeStage::kLayer;
    // Layer needs W2 [E, N=K, I].
    HostTensor w2, s2;
    RandomMxfp4(E, K, I, rng, &w2, &s2);
    ASSERT_TRUE(p.Validate(d.x.desc(), d.ids, &d.weights.desc(), &d.w13.desc(), &d.s13.desc(), &w2.desc(), &s2.desc()).ok());
    MoeInputs lin{d.x.view(), d.ids.view(), d.weights.view(), d.w13.view(), d.s13.view(), w2.view(), s2.view()};
    auto o = oracle::Moe(p, lin);
    ASSERT_TRUE(o.ok()) << o.status();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < K; ++n) {
        double s = 0;
        for (int64_t r = 0; r < topk; ++r) {
          const int64_t pr = t * topk + r;
          double acc = 0;
          for (int64_t i = 0; i < I; ++i) {
            const double act = silu(h[pr * 2 * I + i]) * h[pr * 2 * I + I + i];
            const double ab = numerics::Bf16ToFloat(numerics::DoubleToBf16(act, Rounding::kRtne));
            acc += ab * W(w2, s2, ids[pr], n, i);
          }
          s += wts[pr] * acc;
        }
        ASSERT_NEAR((*o)[t * K + n], s, 1e-9 * (1 + std::fabs(s))) << t << " " << n;
      }
  }
}

}  // namespace
}  // namespace kernelserve
