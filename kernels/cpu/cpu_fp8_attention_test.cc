// The cpu backend's FP8 attention against the fp64 oracle (DESIGN §4).
// - P codes: the kernel's vector code paths against numerics' definitions:
//   lean and naive codes bit-equal; exact codes equal except where 2^y lies
//   within fp32 rounding (2e-6 relative) of an FP8 rounding midpoint.
// - Outputs: against oracle::Fp8Attention with the same P quantization:
//   rel_rms < 1e-2 (5e-3 where measured side by side with the P error; bf16
//   output rounding alone gives ~1.7e-3, and an off-by-one
//   P code moves an output by far less).
// - Accuracy modes, measured against fp64 attention on the same quantized
//   inputs with unquantized P: lean within 1.4x exact (Gaussian and long-tail
//   inputs), naive at least 3x worse than exact on the long-tail input.
// - Constructed scores (known answers, derived in oracle_test): codes for
//   chosen y by hand; outputs within 2^-8 of the oracle's; naive's tail
//   exactly 0; exact/lean keep it; identical scores give bf16(mean V) exactly.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/api/backend.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_fp8_p.h"
#include "kernels/cpu/cpu_test_util.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

using cpu_test::FreshSeed;
using cpu_test::PoisonedBf16;

// True if 2^y is within `rel` of a midpoint between two adjacent FP8 values.
bool NearFp8Midpoint(double y, DType dt, double rel) {
  const double x = std::exp2(y);
  const uint8_t c = numerics::DoubleToFp8(x, dt);
  const float* table = numerics::Fp8DecodeTable(dt);
  for (int d : {-1, 1}) {
    const int n = c + d;
    if (n < 0 || n > 0x7F) continue;
    const double mid = 0.5 * (static_cast<double>(table[c]) + table[n]);
    if (std::fabs(x - mid) <= rel * x) return true;
  }
  return false;
}

TEST(CpuFp8P, CodesMatchNumerics) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::mt19937_64 rng(seed);
  for (Fp8Format f : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    SCOPED_TRACE(Fp8FormatName(f));
    const DType dt = Fp8FormatDType(f);
    const int h = numerics::Fp8Headroom(f);
    const int64_t n = 200000;
    std::vector<float> y(n);
    std::uniform_real_distribution<float> uy(-24.0f, static_cast<float>(h));
    for (int64_t i = 0; i < n; ++i) y[i] = uy(rng);
    // Integers, exact midpoints of lean codes, edges and specials.
    for (int i = 0; i < 40; ++i) y[i] = static_cast<float>(h - i);
    for (int i = 0; i < 40; ++i) y[40 + i] = h - 1 - i / 8.0f - 1.0f / 16;
    y[80] = -INFINITY;
    y[81] = NAN;
    y[82] = -200.0f;
    std::vector<uint8_t> codes(n);
    std::vector<float> values(n);
    cpu::fp8p::LeanPCodes(y.data(), n, f, codes.data(), values.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(codes[i], numerics::LeanPCode(y[i], f)) << "lean y=" << y[i];
      if (!std::isnan(y[i])) {
        ASSERT_EQ(values[i], numerics::Fp8ToFloat(codes[i], dt));
      }
    }
    EXPECT_TRUE(std::isnan(values[81]));
    cpu::fp8p::ExactPCodes(y.data(), n, f, codes.data(), values.data());
    int64_t off = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t want = numerics::ExactPCode(y[i], f);
      if (codes[i] == want) continue;
      ASSERT_TRUE(NearFp8Midpoint(y[i], dt, 2e-6))
          << "exact y=" << y[i] << " got " << int{codes[i]} << " want " << int{want};
      ASSERT_EQ(std::abs(codes[i] - want), 1);
      ++off;
    }
    EXPECT_LT(off, n / 10000);
    EXPECT_EQ(codes[80], 0);
    EXPECT_EQ(codes[82], 0);
    // Naive P: p in [0, 1], encoded without scaling; equal to FloatToFp8.
    std::uniform_real_distribution<float> up(-14.0f, 0.0f);
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp2(up(rng));
    y[0] = 0.0f;
    y[1] = 1.0f;
    cpu::fp8p::NaivePCodes(y.data(), n, f, codes.data(), values.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(codes[i], numerics::FloatToFp8(y[i], dt)) << "naive p=" << y[i];
      ASSERT_EQ(values[i], numerics::Fp8ToFloat(codes[i], dt));
    }
  }
}

Shape ShapeOf(Layout l, int64_t b, int64_t h, int64_t s, int64_t d) {
  return l == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

struct Case {
  int64_t b, hq, hkv, sq, skv, dqk;
  bool causal;
  Layout layout;
  Fp8Format format;
  PMode mode;
  bool hadamard;
  DescaleMode descale;
  bool fp8_inputs;
};

std::string Name(const Case& c) {
  return absl::StrCat("B=", c.b, " Hq=", c.hq, " Hkv=", c.hkv, " Sq=", c.sq, " Skv=", c.skv, " Dqk=", c.dqk,
                      c.causal ? " causal " : " full ", LayoutName(c.layout), " ", Fp8FormatName(c.format), " ",
                      PModeName(c.mode), c.hadamard ? " hadamard" : "",
                      c.descale == DescaleMode::kPerHead ? " per-head" : " per-tensor",
                      c.fp8_inputs ? " fp8-in" : " bf16-in");
}

HostTensor FloatTensor(const std::vector<float>& v, Shape shape) {
  HostTensor t(DType::kFp32, std::move(shape));
  std::memcpy(t.bytes(), v.data(), v.size() * sizeof(float));
  return t;
}

// Runs one case; returns the backend output and fills the oracle's output
// with the same P quantization.
void RunCase(Backend& be, const Case& c, const HostTensor& q, const HostTensor& k, const HostTensor& v,
             HostTensor* out, std::vector<double>* ref, std::vector<double>* ref_unquantized_p) {
  Fp8AttentionParams p;
  p.layout = c.layout;
  p.causal = c.causal;
  p.format = c.format;
  p.p_mode = c.mode;
  p.hadamard = c.hadamard;
  p.descale_mode = c.descale;
  Fp8AttentionInputs bf_in{q.view(), k.view(), v.view(), {}, {}, {}};
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc(), nullptr, nullptr, nullptr).ok());
  auto quant = oracle::QuantizeAttentionInputs(p, bf_in);
  ASSERT_TRUE(quant.ok()) << quant.status();
  Fp8AttentionParams run_p = p;
  Fp8AttentionInputs run_in = bf_in;
  HostTensor qd, kd, vd;
  if (c.fp8_inputs) {
    // Hand the oracle's codes and per-head descales to the backend.
    run_p.hadamard = false;
    qd = FloatTensor(quant->q_descale, {c.b, c.hq});
    kd = FloatTensor(quant->k_descale, {c.b, c.hkv});
    vd = FloatTensor(quant->v_descale, {c.b, c.hkv});
    const TensorDesc qdd = qd.desc(), kdd = kd.desc(), vdd = vd.desc();
    ASSERT_TRUE(run_p.Validate(quant->q.desc(), quant->k.desc(), quant->v.desc(), &qdd, &kdd, &vdd).ok());
    run_in = Fp8AttentionInputs{quant->q.view(), quant->k.view(), quant->v.view(), qd.view(), kd.view(), vd.view()};
  }
  *out = PoisonedBf16(p.OutputDesc().shape);
  TensorView ov = out->view();
  const absl::Status st = be.Fp8Attention(0, run_p, run_in, ov);
  ASSERT_TRUE(st.ok()) << st;
  auto r = oracle::Fp8Attention(p, *quant, oracle::PQuant::kAsParams);
  ASSERT_TRUE(r.ok()) << r.status();
  *ref = *std::move(r);
  if (ref_unquantized_p != nullptr) {
    auto r0 = oracle::Fp8Attention(p, *quant, oracle::PQuant::kNone);
    ASSERT_TRUE(r0.ok()) << r0.status();
    *ref_unquantized_p = *std::move(r0);
  }
}

double RelRms(const HostTensor& out, const std::vector<double>& ref) {
  const std::vector<double> got = cpu_test::Bf16ToDoubles(out);
  return numerics::CompareToReference(got.data(), ref.data(), out.num_elements()).rel_rms;
}

TEST(CpuFp8Attention, MatchesOracleWithSameP) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  const auto fn = Fp8Format::kE4M3Fn, fnuz = Fp8Format::kE4M3Fnuz;
  const auto bhsd = Layout::kBhsd, bshd = Layout::kBshd;
  const auto pt = DescaleMode::kPerTensor, ph = DescaleMode::kPerHead;
  const Case cases[] = {
      {1, 2, 2, 130, 130, 128, true, bhsd, fn, PMode::kExact, false, pt, false},
      {1, 2, 2, 130, 130, 128, true, bhsd, fn, PMode::kLean, false, pt, false},
      {1, 2, 2, 130, 130, 128, true, bhsd, fn, PMode::kNaive, false, pt, false},
      {1, 4, 2, 17, 200, 192, true, bshd, fnuz, PMode::kLean, true, ph, false},
      {1, 2, 1, 129, 65, 192, true, bhsd, fn, PMode::kExact, true, ph, false},
      {2, 2, 2, 65, 129, 128, false, bshd, fnuz, PMode::kExact, false, pt, false},
      {1, 2, 2, 1, 100, 128, true, bhsd, fnuz, PMode::kNaive, false, ph, false},
      {1, 2, 2, 100, 150, 128, true, bshd, fn, PMode::kLean, false, ph, true},
      {1, 3, 1, 64, 64, 192, false, bhsd, fnuz, PMode::kExact, false, ph, true},
  };
  for (const Case& c : cases) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(absl::StrCat(Name(c), " seed=", seed));
    const HostTensor q = numerics::GaussianBf16(ShapeOf(c.layout, c.b, c.hq, c.sq, c.dqk), seed);
    const HostTensor k = numerics::GaussianBf16(ShapeOf(c.layout, c.b, c.hkv, c.skv, c.dqk), seed + 1);
    const HostTensor v = numerics::GaussianBf16(ShapeOf(c.layout, c.b, c.hkv, c.skv, 128), seed + 2, 0.5);
    HostTensor out;
    std::vector<double> ref;
    RunCase(*be, c, q, k, v, &out, &ref, nullptr);
    if (::testing::Test::HasFatalFailure()) return;
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      ASSERT_TRUE(std::isfinite(numerics::Bf16ToFloat(out.data<uint16_t>()[i]))) << "element " << i;
    }
    EXPECT_LT(RelRms(out, ref), 1e-2);
  }
}

TEST(CpuFp8Attention, NaiveUnderflowsTheLongTailAndLeanTracksExact) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  for (bool long_tail : {false, true}) {
    SCOPED_TRACE(long_tail ? "long-tail" : "gaussian");
    Case c{1, 1, 1, 128, 2048, 128, true, Layout::kBhsd, Fp8Format::kE4M3Fn, PMode::kExact, false,
           DescaleMode::kPerTensor, false};
    HostTensor q, k, v;
    if (long_tail) {
      numerics::LongTailOptions o;
      o.seq_q = c.sq;
      o.seq_kv = c.skv;
      o.seed = seed;
      numerics::AttentionTensors t = numerics::LongTailAttention(o);
      q = std::move(t.q);
      k = std::move(t.k);
      v = std::move(t.v);
    } else {
      q = numerics::GaussianBf16({1, 1, c.sq, 128}, seed);
      k = numerics::GaussianBf16({1, 1, c.skv, 128}, seed + 1);
      v = numerics::GaussianBf16({1, 1, c.skv, 128}, seed + 2);
    }
    double err[3];
    for (PMode m : {PMode::kExact, PMode::kLean, PMode::kNaive}) {
      c.mode = m;
      HostTensor out;
      std::vector<double> ref, ref0;
      RunCase(*be, c, q, k, v, &out, &ref, &ref0);
      if (::testing::Test::HasFatalFailure()) return;
      const double same_p = RelRms(out, ref);
      std::printf("%s %s: rel_rms vs oracle with the same P %.3g\n", long_tail ? "long-tail" : "gaussian",
                  PModeName(m).c_str(), same_p);
      EXPECT_LT(same_p, 5e-3) << PModeName(m);
      err[static_cast<int>(m) - 1] = RelRms(out, ref0);
    }
    SCOPED_TRACE(absl::StrCat("errors exact ", err[0], " lean ", err[1], " naive ", err[2]));
    EXPECT_LE(err[1], 1.4 * err[0]);
    std::printf("%s: rel_rms vs fp64 (unquantized P): exact %.4g lean %.4g naive %.4g\n",
                long_tail ? "long-tail" : "gaussian", err[0], err[1], err[2]);
    if (long_tail) {
      EXPECT_GE(err[2], 3 * err[0]);
    }
  }
}

// ------------------------------------------------ constructed scores (analytic)
// The rows of oracle_test's ConstructedScoresGiveTheAnalyticPModes and
// IdenticalScoresGiveExactlyTheMeanOfV (the hand derivations are there), run
// through the cpu kernel: its P codes for the chosen y values by hand, its
// outputs against the oracle with the same P (bf16 output: within 2^-8
// relative), and the exact facts that survive fp32 and bf16: naive's tail is 0,
// the constant V column is exactly 1 for exact and lean, identical scores give
// bf16(mean of V) bit for bit (every fp32 sum there is exact).

TEST(CpuFp8P, ChosenYCodesByHand) {
  // u = y - h; codes are the same in both formats (numerics_test PCodes.ChosenYByHand).
  struct Row {
    float u;
    int exact, lean;
  };
  const Row rows[] = {{0.0f, 120, 120},      {-0.25f, 117, 118},   {-0.34375f, 117, 117},
                      {-0.75f, 114, 114},    {-0.8125f, 113, 114}, {-0.84375f, 113, 113},
                      {-4.5f, 83, 84},       {-4.40625f, 84, 85},  {-8.0f, 56, 56},      {-10.25f, 37, 38},
                      {-15.25f, 3, 0},       {-16.0f, 2, 0},       {-17.0f, 1, 0},
                      {-17.5f, 1, 0},        {-18.0f, 0, 0}};
  const int n = static_cast<int>(std::size(rows));
  for (Fp8Format f : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    SCOPED_TRACE(Fp8FormatName(f));
    const DType dt = Fp8FormatDType(f);
    std::vector<float> y(n), values(n);
    std::vector<uint8_t> codes(n);
    for (int i = 0; i < n; ++i) y[i] = rows[i].u + static_cast<float>(numerics::Fp8Headroom(f));
    cpu::fp8p::ExactPCodes(y.data(), n, f, codes.data(), values.data());
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(codes[i], rows[i].exact) << "exact y=" << y[i];
      EXPECT_EQ(values[i], numerics::Fp8ToFloat(static_cast<uint8_t>(rows[i].exact), dt)) << y[i];
    }
    cpu::fp8p::LeanPCodes(y.data(), n, f, codes.data(), values.data());
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(codes[i], rows[i].lean) << "lean y=" << y[i];
      EXPECT_EQ(values[i], numerics::Fp8ToFloat(static_cast<uint8_t>(rows[i].lean), dt)) << y[i];
    }
  }
}

// Runs the backend and the oracle (same P) on constructed FP8 inputs, one query row.
void RunConstructed(Backend& be, const numerics::Fp8AttentionTensors& x, Fp8Format fmt, PMode mode,
                    std::vector<double>* got, std::vector<double>* ref) {
  Fp8AttentionParams p;
  p.causal = true;
  p.format = fmt;
  p.p_mode = mode;
  p.softmax_scale = numerics::kConstructedScoresScale;
  ASSERT_TRUE(p.Validate(x.q.desc(), x.k.desc(), x.v.desc(), &x.q_descale.desc(), &x.k_descale.desc(),
                         &x.v_descale.desc())
                  .ok());
  const Fp8AttentionInputs in{x.q.view(), x.k.view(), x.v.view(),
                              x.q_descale.view(), x.k_descale.view(), x.v_descale.view()};
  HostTensor out = PoisonedBf16(p.OutputDesc().shape);
  TensorView ov = out.view();
  const absl::Status st = be.Fp8Attention(0, p, in, ov);
  ASSERT_TRUE(st.ok()) << st;
  *got = cpu_test::Bf16ToDoubles(out);
  auto qi = oracle::QuantizeAttentionInputs(p, in);
  ASSERT_TRUE(qi.ok()) << qi.status();
  auto r = oracle::Fp8Attention(p, *qi, oracle::PQuant::kAsParams);
  ASSERT_TRUE(r.ok()) << r.status();
  *ref = *std::move(r);
}

TEST(CpuFp8Attention, ConstructedScoresMatchTheAnalyticPModes) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  const int64_t skv = 16384;
  // Groups as in oracle_test: keys 0..3 (t = 20.25, 16.59375, 10.75, 5.75), keys
  // 4..63 (t = -19.75), then odd blocks t_a and even blocks t_b.
  const double head[] = {20.25, 16.59375, 10.75, 5.75, -19.75};
  auto group = [](int64_t j) { return j < 4 ? static_cast<int>(j) : j < 64 ? 4 : (j / 64) % 2 == 1 ? 5 : 6; };
  for (bool deep : {false, true}) {
    const double ta = deep ? -1.34375 : 7.75, tb = deep ? -2.84375 : 6.65625;
    for (Fp8Format fmt : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
      SCOPED_TRACE(::testing::Message() << (deep ? "deep" : "shallow") << " tail, " << Fp8FormatName(fmt));
      std::vector<double> t(skv), v(skv * 128, 0.0);
      for (int64_t j = 0; j < skv; ++j) {
        const int s = group(j);
        t[j] = s < 5 ? head[s] : s == 5 ? ta : tb;
        v[j * 128 + s] = 1;
        v[j * 128 + 127] = 1;
      }
      numerics::Fp8AttentionTensors x;
      ASSERT_TRUE(numerics::ConstructedScoresFp8(Fp8FormatDType(fmt), 128, 128, t, v, &x));
      for (PMode mode : {PMode::kExact, PMode::kLean, PMode::kNaive}) {
        SCOPED_TRACE(PModeName(mode));
        std::vector<double> got, ref;
        RunConstructed(*be, x, fmt, mode, &got, &ref);
        if (::testing::Test::HasFatalFailure()) return;
        for (int d = 0; d < 128; ++d) {
          EXPECT_NEAR(got[d], ref[d], 0x1p-8 * std::fabs(ref[d])) << "slot " << d;
        }
        if (mode == PMode::kNaive) {
          EXPECT_EQ(got[5], 0.0);  // the tail underflows to exactly zero
          EXPECT_EQ(got[6], 0.0);
          if (!deep) {
            EXPECT_LT(got[127], 0.35);  // the constant V column shrinks to ~1/3
          }
        } else {
          EXPECT_EQ(got[127], 1.0);
          EXPECT_GT(got[5], deep ? 1e-3 : 0.4);
          EXPECT_GT(got[6], deep ? 5e-4 : 0.2);
        }
      }
    }
  }
}

TEST(CpuFp8Attention, IdenticalScoresGiveExactlyTheMeanOfV) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  const int64_t skv = 256;
  for (Fp8Format fmt : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    SCOPED_TRACE(Fp8FormatName(fmt));
    const DType dt = Fp8FormatDType(fmt);
    numerics::SeededRng rng(7);
    std::vector<double> v(skv * 128), mean(128, 0.0);
    for (double& x : v) {
      x = numerics::Fp8ToFloat(numerics::DoubleToFp8(std::clamp(0.5 + rng.Normal(), -4.0, 4.0), dt), dt);
    }
    for (int64_t j = 0; j < skv; ++j)
      for (int d = 0; d < 128; ++d) mean[d] += v[j * 128 + d];
    for (double& m : mean) m /= skv;
    numerics::Fp8AttentionTensors x;
    ASSERT_TRUE(numerics::ConstructedScoresFp8(dt, 128, 128, std::vector<double>(skv, 5.59375), v, &x));
    for (PMode mode : {PMode::kExact, PMode::kLean, PMode::kNaive}) {
      SCOPED_TRACE(PModeName(mode));
      std::vector<double> got, ref;
      RunConstructed(*be, x, fmt, mode, &got, &ref);
      if (::testing::Test::HasFatalFailure()) return;
      for (int d = 0; d < 128; ++d) {
        EXPECT_EQ(ref[d], mean[d]) << d;
        EXPECT_EQ(got[d], numerics::Bf16ToFloat(numerics::DoubleToBf16(mean[d], Rounding::kRtne))) << d;
      }
    }
  }
}

TEST(CpuFp8Attention, RowsWithoutKeysAreZero) {
  std::unique_ptr<Backend> be = CreateCpuBackend(2);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  Case c{1, 1, 1, 90, 20, 128, true, Layout::kBhsd, Fp8Format::kE4M3Fn, PMode::kLean, false,
         DescaleMode::kPerTensor, false};
  const HostTensor q = numerics::GaussianBf16({1, 1, 90, 128}, seed);
  const HostTensor k = numerics::GaussianBf16({1, 1, 20, 128}, seed + 1);
  const HostTensor v = numerics::GaussianBf16({1, 1, 20, 128}, seed + 2);
  HostTensor out;
  std::vector<double> ref;
  RunCase(*be, c, q, k, v, &out, &ref, nullptr);
  if (::testing::Test::HasFatalFailure()) return;
  for (int64_t i = 0; i < 70 * 128; ++i) ASSERT_EQ(out.data<uint16_t>()[i], 0) << i;
  EXPECT_LT(RelRms(out, ref), 1e-2);
}

}  // namespace
}  // namespace kernelserve
