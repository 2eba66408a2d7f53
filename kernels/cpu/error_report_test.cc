#include "kernels/api/error_report.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

using numerics::GaussianBf16;

// The oracle's result rounded to bf16 as a backend would store it.
HostTensor RoundToBf16(const std::vector<double>& v, const TensorDesc& desc) {
  HostTensor t(DType::kBf16, desc.shape);
  std::memset(t.bytes(), 0xFF, t.num_bytes());  // poison
  numerics::StoreDoubles(v.data(), static_cast<int64_t>(v.size()), DType::kBf16, Rounding::kRtne, t.bytes());
  return t;
}

TEST(ErrorReport, Attention) {
  HostTensor q = GaussianBf16({1, 2, 16, 64}, 1);
  HostTensor k = GaussianBf16({1, 2, 40, 64}, 2);
  HostTensor v = GaussianBf16({1, 2, 40, 64}, 3);
  AttentionParams p;
  p.causal = true;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
  const std::vector<double> ref = *oracle::Attention(p, q, k, v);
  HostTensor out = RoundToBf16(ref, p.OutputDesc());
  auto r = AttentionError(p, q, k, v, out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->rel_rms, 0);
  EXPECT_LT(r->rel_rms, 1.0 / 256);  // bf16 rounding only
  EXPECT_GT(r->max_abs, 0);
  EXPECT_EQ(r->nonfinite, 0);
  EXPECT_FALSE(r->has_split);
  // One NaN makes the report fail.
  const uint16_t nan = 0x7FC0;
  std::memcpy(out.bytes() + 10, &nan, 2);
  r = AttentionError(p, q, k, v, out);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->nonfinite, 1);
  EXPECT_FALSE(r->rel_rms < 1.0);
  // Wrong output shape.
  HostTensor bad(DType::kBf16, {1, 2, 16, 32});
  r = AttentionError(p, q, k, v, bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("output"), absl::string_view::npos) << r.status();
}

TEST(ErrorReport, Fp8SplitBf16Inputs) {
  numerics::LongTailOptions o;
  o.seq_q = 16;
  o.seq_kv = 1024;
  numerics::AttentionTensors in = numerics::LongTailAttention(o);
  for (PMode mode : {PMode::kExact, PMode::kNaive}) {
    Fp8AttentionParams p;
    p.p_mode = mode;
    ASSERT_TRUE(p.Validate(in.q.desc(), in.k.desc(), in.v.desc(), nullptr, nullptr, nullptr).ok());
    Fp8AttentionInputs hin{in.q.view(), in.k.view(), in.v.view(), {}, {}, {}};
    auto qin = oracle::QuantizeAttentionInputs(p, hin);
    ASSERT_TRUE(qin.ok());
    // A "backend" that reproduces the oracle's P quantization: rest is bf16 rounding only.
    const std::vector<double> with_p = *oracle::Fp8Attention(p, *qin, oracle::PQuant::kAsParams);
    const std::vector<double> ref = *oracle::Fp8Attention(p, *qin, oracle::PQuant::kNone);
    HostTensor out = RoundToBf16(with_p, p.OutputDesc());
    auto r = Fp8AttentionError(p, hin, out, /*split=*/true);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->has_split);
    EXPECT_GT(r->input_quant, 0);
    EXPECT_GT(r->p_quant, 0);
    EXPECT_GT(r->rest, 0);
    EXPECT_LT(r->rest, 1.0 / 256);
    EXPECT_NEAR(r->rel_rms, numerics::CompareToReference(with_p.data(), ref.data(), ref.size()).rel_rms,
                1.0 / 256);
    if (mode == PMode::kNaive) {
      EXPECT_GT(r->p_quant, 0.03);  // the long tail underflows
    } else {
      EXPECT_LT(r->p_quant, 0.02);
    }
    auto r2 = Fp8AttentionError(p, hin, out, /*split=*/false);
    ASSERT_TRUE(r2.ok());
    EXPECT_FALSE(r2->has_split);
    EXPECT_EQ(r2->rel_rms, r->rel_rms);
  }
}

TEST(ErrorReport, Fp8SplitFp8InputsHasNoInputQuant) {
  HostTensor q = GaussianBf16({1, 1, 8, 128}, 11);
  HostTensor k = GaussianBf16({1, 1, 100, 128}, 12);
  HostTensor v = GaussianBf16({1, 1, 100, 128}, 13);
  Fp8AttentionParams pb;
  ASSERT_TRUE(pb.Validate(q.desc(), k.desc(), v.desc(), nullptr, nullptr, nullptr).ok());
  auto qin = oracle::QuantizeAttentionInputs(pb, Fp8AttentionInputs{q.view(), k.view(), v.view(), {}, {}, {}});
  ASSERT_TRUE(qin.ok());
  HostTensor ds(DType::kFp32, {1});
  HostTensor dk(DType::kFp32, {1});
  HostTensor dv(DType::kFp32, {1});
  std::memcpy(ds.bytes(), &qin->q_descale[0], 4);
  std::memcpy(dk.bytes(), &qin->k_descale[0], 4);
  std::memcpy(dv.bytes(), &qin->v_descale[0], 4);
  Fp8AttentionParams p;
  ASSERT_TRUE(p.Validate(qin->q.desc(), qin->k.desc(), qin->v.desc(), &ds.desc(), &dk.desc(), &dv.desc()).ok());
  Fp8AttentionInputs hin{qin->q.view(), qin->k.view(), qin->v.view(), ds.view(), dk.view(), dv.view()};
  HostTensor out = RoundToBf16(*oracle::Fp8Attention(p, *qin, oracle::PQuant::kAsParams), p.OutputDesc());
  auto r = Fp8AttentionError(p, hin, out, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->has_split);
  EXPECT_EQ(r->input_quant, 0);
  EXPECT_GT(r->p_quant, 0);
  EXPECT_LT(r->rest, 1.0 / 256);
}

TEST(ErrorReport, MlaAndMoe) {
  HostTensor ql = GaussianBf16({2, 1, 4, 512}, 21, 0, 0.2);
  HostTensor qp = GaussianBf16({2, 1, 4, 64}, 22, 0, 0.2);
  HostTensor kv(DType::kFp8E4M3Fn, {2, 30, 576});
  numerics::SeededRng rng(23);
  for (int64_t i = 0; i < kv.num_bytes(); ++i) kv.bytes()[i] = numerics::FloatToFp8(4 * rng.Normal(), DType::kFp8E4M3Fn);
  MlaDecodeParams mp;
  ASSERT_TRUE(mp.Validate(ql.desc(), qp.desc(), kv.desc(), false, 1, nullptr, nullptr, nullptr, nullptr).ok());
  MlaDecodeInputs min{ql.view(), qp.view(), kv.view(), {}, {}, {}, {}};
  std::vector<double> mref = *oracle::MlaDecode(mp, min);
  auto r = MlaDecodeError(mp, min, RoundToBf16(mref, mp.OutputDesc()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->rel_rms, 0);
  EXPECT_LT(r->rel_rms, 1.0 / 256);
  for (double& x : mref) x *= 1.1;
  r = MlaDecodeError(mp, min, RoundToBf16(mref, mp.OutputDesc()));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->rel_rms, 0.1, 0.005);

  const int64_t T = 3, K = 64, I = 32, E = 2, topk = 2;
  HostTensor x = GaussianBf16({T, K}, 31);
  HostTensor ids(DType::kInt32, {T, topk});
  const int32_t id[6] = {0, 1, 1, 0, 1, 1};
  std::memcpy(ids.bytes(), id, sizeof(id));
  HostTensor w(DType::kFp32, {T, topk});
  const float wt[6] = {0.5f, 0.5f, 0.25f, 0.75f, 1.0f, 0.0f};
  std::memcpy(w.bytes(), wt, sizeof(wt));
  HostTensor w13(DType::kFp4E2M1, {E, 2 * I, K}), s13(DType::kE8M0, {E, 2 * I, K / 32});
  HostTensor w2(DType::kFp4E2M1, {E, K, I}), s2(DType::kE8M0, {E, K, I / 32});
  for (HostTensor* t : {&w13, &w2})
    for (int64_t i = 0; i < t->num_bytes(); ++i) t->bytes()[i] = static_cast<uint8_t>(rng.NextBits());
  for (HostTensor* t : {&s13, &s2})
    for (int64_t i = 0; i < t->num_bytes(); ++i) t->bytes()[i] = static_cast<uint8_t>(123 + rng.NextBits() % 4);
  MoeParams p;
  ASSERT_TRUE(p.Validate(x.desc(), ids, &w.desc(), &w13.desc(), &s13.desc(), &w2.desc(), &s2.desc()).ok());
  MoeInputs in{x.view(), ids.view(), w.view(), w13.view(), s13.view(), w2.view(), s2.view()};
  const std::vector<double> ref = *oracle::Moe(p, in);
  r = MoeError(p, in, RoundToBf16(ref, p.OutputDesc()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->rel_rms, 0);
  EXPECT_LT(r->rel_rms, 1.0 / 256);
  HostTensor zeros(DType::kBf16, p.OutputDesc().shape);
  r = MoeError(p, in, zeros);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->rel_rms, 1.0);
}

}  // namespace
}  // namespace kernelserve
