// FP8 attention on the GPU against the fp64 oracle. Skips without a device.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/oracle.h"
#include "kernels/gpu/fp8_attention/fp8_attention.h"
#include "kernels/gpu/gpu_test_util.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

using gpu_test::CountNan;
using gpu_test::DeviceTensor;
using gpu_test::FreshSeed;
using gpu_test::SameBytes;

struct Case {
  int64_t batch = 1, hq = 2, hkv = 1, sq = 300, skv = 300, dqk = 128;
  Layout layout = Layout::kBhsd;
  bool causal = true;
  PMode mode = PMode::kExact;
  bool hadamard = false;
  DescaleMode descale = DescaleMode::kPerTensor;
  bool long_tail = false;
  gpu::Fp8AttentionKernel kernel = gpu::Fp8AttentionKernel::kMmaSync;
};

Shape AttnShape(Layout l, int64_t b, int64_t h, int64_t s, int64_t d) {
  return l == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

numerics::AttentionTensors MakeInputs(const Case& c, uint64_t seed) {
  if (c.long_tail) {
    numerics::LongTailOptions o;
    o.batch = c.batch;
    o.heads_q = c.hq;
    o.heads_kv = c.hkv;
    o.seq_q = c.sq;
    o.seq_kv = c.skv;
    o.d_qk = c.dqk;
    o.d_v = 128;
    o.layout = c.layout;
    o.seed = seed;
    return numerics::LongTailAttention(o);
  }
  numerics::AttentionTensors t;
  t.q = numerics::GaussianBf16(AttnShape(c.layout, c.batch, c.hq, c.sq, c.dqk), seed);
  t.k = numerics::GaussianBf16(AttnShape(c.layout, c.batch, c.hkv, c.skv, c.dqk), seed + 1);
  t.v = numerics::GaussianBf16(AttnShape(c.layout, c.batch, c.hkv, c.skv, 128), seed + 2, 0.5, 1.0);
  return t;
}

Fp8AttentionParams Params(const Case& c) {
  Fp8AttentionParams p;
  p.layout = c.layout;
  p.causal = c.causal;
  p.p_mode = c.mode;
  p.hadamard = c.hadamard;
  p.descale_mode = c.descale;
  return p;
}

struct Result {
  HostTensor out, q_codes, k_codes, v_codes;
  std::vector<float> descales;
};

Result RunGpu(const Fp8AttentionParams& p, const numerics::AttentionTensors& t,
              gpu::Fp8AttentionKernel kernel) {
  DeviceTensor q(t.q), k(t.k), v(t.v);
  DeviceTensor out(p.OutputDesc());
  EXPECT_EQ(out.Fill(0xFF), cudaSuccess);
  DeviceTensor qc(TensorDesc{DType::kFp8E4M3Fn, t.q.shape()}), kc(TensorDesc{DType::kFp8E4M3Fn, t.k.shape()}),
      vc(TensorDesc{DType::kFp8E4M3Fn, t.v.shape()});
  const int64_t nds = p.batch * (p.heads_q + 2 * p.heads_kv);
  DeviceTensor ds(TensorDesc{DType::kFp32, {nds}});
  Fp8AttentionInputs in;
  in.q = q.view();
  in.k = k.view();
  in.v = v.view();
  TensorView ov = out.view();
  gpu::Fp8QuantizedOut keep{static_cast<uint8_t*>(qc.data()), static_cast<uint8_t*>(kc.data()),
                             static_cast<uint8_t*>(vc.data()), static_cast<float*>(ds.data())};
  const absl::Status st = gpu::RunFp8AttentionKeepQuantized(p, in, ov, keep, nullptr, kernel);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Result r;
  r.out = out.ToHost();
  r.q_codes = qc.ToHost();
  r.k_codes = kc.ToHost();
  r.v_codes = vc.ToHost();
  const HostTensor d = ds.ToHost();
  r.descales.assign(d.data<float>(), d.data<float>() + nds);
  return r;
}

double RelRms(const std::vector<double>& out, const std::vector<double>& ref) {
  return numerics::CompareToReference(out.data(), ref.data(), static_cast<int64_t>(ref.size())).rel_rms;
}

// Runs a case; checks the quantized inputs bit for bit against the oracle's
// quantization and the output against the oracle with P quantized as the
// params say. Returns {gpu error, oracle P-quant error} against fp64
// attention on the same quantized inputs.
std::pair<double, double> Check(const Case& c, double tol = 4e-3) {
  const uint64_t seed = FreshSeed();
  const numerics::AttentionTensors t = MakeInputs(c, seed);
  Fp8AttentionParams p = Params(c);
  const absl::Status vs = p.Validate(t.q.desc(), t.k.desc(), t.v.desc(), nullptr, nullptr, nullptr);
  EXPECT_TRUE(vs.ok()) << vs;
  if (!vs.ok()) return {1, 1};
  const Result r = RunGpu(p, t, c.kernel);
  Fp8AttentionInputs hin;
  hin.q = t.q.view();
  hin.k = t.k.view();
  hin.v = t.v.view();
  const auto qin = oracle::QuantizeAttentionInputs(p, hin);
  EXPECT_TRUE(qin.ok()) << qin.status();
  if (!qin.ok()) return {1, 1};
  EXPECT_TRUE(SameBytes(r.q_codes, qin->q)) << "q codes differ from the oracle's quantization";
  EXPECT_TRUE(SameBytes(r.k_codes, qin->k)) << "k codes differ";
  EXPECT_TRUE(SameBytes(r.v_codes, qin->v)) << "v codes differ";
  std::vector<float> want = qin->q_descale;
  want.insert(want.end(), qin->k_descale.begin(), qin->k_descale.end());
  want.insert(want.end(), qin->v_descale.begin(), qin->v_descale.end());
  EXPECT_EQ(r.descales, want) << "descales differ";

  const auto ref_p = oracle::Fp8Attention(p, *qin, oracle::PQuant::kAsParams);
  const auto ref = oracle::Fp8Attention(p, *qin, oracle::PQuant::kNone);
  EXPECT_TRUE(ref_p.ok() && ref.ok());
  if (!ref_p.ok() || !ref.ok()) return {1, 1};
  const std::vector<double> out = numerics::ToDoubles(r.out.view());
  EXPECT_EQ(CountNan(out), 0) << "unwritten or NaN outputs";
  const double vs_oracle = RelRms(out, *ref_p);
  const double gpu_err = RelRms(out, *ref), oracle_err = RelRms(*ref_p, *ref);
  EXPECT_LT(vs_oracle, tol);
  std::printf("%s mode=%s d=%lld causal=%d sq=%lld skv=%lld tail=%d: vs oracle(P) %.3g; error vs exact attention: gpu %.3g oracle %.3g\n",
              c.kernel == gpu::Fp8AttentionKernel::kQgmma ? "qgmma" : "mma.sync", PModeName(c.mode).c_str(),
              static_cast<long long>(c.dqk), c.causal, static_cast<long long>(c.sq),
              static_cast<long long>(c.skv), c.long_tail, vs_oracle, gpu_err, oracle_err);
  return {gpu_err, oracle_err};
}

void RunExactCausalGqaD128(gpu::Fp8AttentionKernel kernel) {
  Case c;
  c.kernel = kernel;
  c.batch = 2;
  c.hq = 4;
  c.hkv = 2;
  Check(c);
}

void RunLeanNonCausalCrossBshd(gpu::Fp8AttentionKernel kernel) {
  Case c;
  c.kernel = kernel;
  c.mode = PMode::kLean;
  c.causal = false;
  c.layout = Layout::kBshd;
  c.sq = 100;
  c.skv = 257;
  Check(c);
}

void RunExactCausalD192LongerKeys(gpu::Fp8AttentionKernel kernel) {
  Case c;
  c.kernel = kernel;
  c.dqk = 192;
  c.sq = 200;
  c.skv = 333;
  Check(c);
  c.mode = PMode::kLean;
  Check(c);
}

void RunNaiveCausal(gpu::Fp8AttentionKernel kernel) {
  Case c;
  c.kernel = kernel;
  c.mode = PMode::kNaive;
  c.sq = 260;
  c.skv = 260;
  Check(c);
}

void RunHadamardPerHeadD192AndD128(gpu::Fp8AttentionKernel kernel) {
  Case c;
  c.kernel = kernel;
  c.hadamard = true;
  c.descale = DescaleMode::kPerHead;
  c.hq = 3;
  c.hkv = 3;
  c.dqk = 192;
  Check(c);
  c.dqk = 128;
  c.layout = Layout::kBshd;
  Check(c);
}

void RunMoreQueriesThanKeysCausalRowsSeeNothing(gpu::Fp8AttentionKernel kernel) {
  Case c;
  c.kernel = kernel;
  c.sq = 200;
  c.skv = 90;  // rows 0..109 see no key: zeros, as in the oracle
  Check(c);
}

// Long context with a sink, a local window and a diffuse tail: block-scaled P
// stays close to exact attention, naive P (no block scaling) underflows the tail.
void RunLongTailBlockScalingBeatsNaive(gpu::Fp8AttentionKernel kernel) {
  Case c;
  c.kernel = kernel;
  c.long_tail = true;
  c.sq = 256;
  c.skv = 2048;
  const auto exact = Check(c);
  c.mode = PMode::kLean;
  const auto lean = Check(c);
  c.mode = PMode::kNaive;
  const auto naive = Check(c);
  EXPECT_LT(exact.first, 1.1 * exact.second + 1e-3);
  EXPECT_LT(lean.first, 1.1 * lean.second + 1e-3);
  EXPECT_LT(lean.first, 0.5 * naive.first) << "naive should be far worse on long-tail inputs";
}

void RunFp8InputsWithDescalesAndDeterminism(gpu::Fp8AttentionKernel kernel) {
  Case c;
  c.kernel = kernel;
  c.hq = 2;
  c.hkv = 2;
  const numerics::AttentionTensors t = MakeInputs(c, FreshSeed());
  Fp8AttentionParams pb = Params(c);
  ASSERT_TRUE(pb.Validate(t.q.desc(), t.k.desc(), t.v.desc(), nullptr, nullptr, nullptr).ok());
  Fp8AttentionInputs hin;
  hin.q = t.q.view();
  hin.k = t.k.view();
  hin.v = t.v.view();
  auto qin = oracle::QuantizeAttentionInputs(pb, hin);
  ASSERT_TRUE(qin.ok());
  // Per-head descales [B,H] for q, a single one for k and v.
  HostTensor qd(DType::kFp32, {c.batch, c.hq}), kd(DType::kFp32, {1}), vd(DType::kFp32, {1});
  for (int64_t i = 0; i < c.batch * c.hq; ++i) qd.data<float>()[i] = qin->q_descale[i] * (1 + i);
  kd.data<float>()[0] = qin->k_descale[0];
  vd.data<float>()[0] = qin->v_descale[0];
  Fp8AttentionParams p = Params(c);
  ASSERT_TRUE(p.Validate(qin->q.desc(), qin->k.desc(), qin->v.desc(), &qd.desc(), &kd.desc(), &vd.desc()).ok());
  DeviceTensor q(qin->q), k(qin->k), v(qin->v), dq(qd), dk(kd), dv(vd), out(p.OutputDesc());
  Fp8AttentionInputs in;
  in.q = q.view();
  in.k = k.view();
  in.v = v.view();
  in.q_descale = dq.view();
  in.k_descale = dk.view();
  in.v_descale = dv.view();
  TensorView ov = out.view();
  KS_CUDA_OK(out.Fill(0xFF));
  ASSERT_TRUE(gpu::RunFp8Attention(p, in, ov, nullptr, kernel).ok());
  KS_CUDA_OK(cudaDeviceSynchronize());
  const HostTensor first = out.ToHost();
  KS_CUDA_OK(out.Fill(0xFF));
  ASSERT_TRUE(gpu::RunFp8Attention(p, in, ov, nullptr, kernel).ok());
  KS_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(SameBytes(first, out.ToHost())) << "not deterministic";

  Fp8AttentionInputs hq;
  hq.q = qin->q.view();
  hq.k = qin->k.view();
  hq.v = qin->v.view();
  hq.q_descale = qd.view();
  hq.k_descale = kd.view();
  hq.v_descale = vd.view();
  const auto q2 = oracle::QuantizeAttentionInputs(p, hq);
  ASSERT_TRUE(q2.ok()) << q2.status();
  const auto ref = oracle::Fp8Attention(p, *q2, oracle::PQuant::kAsParams);
  ASSERT_TRUE(ref.ok());
  const std::vector<double> o = numerics::ToDoubles(first.view());
  EXPECT_LT(RelRms(o, *ref), 4e-3);
}

void RunFnuzIsUnimplemented(gpu::Fp8AttentionKernel kernel) {
  Case c;
  c.kernel = kernel;
  const numerics::AttentionTensors t = MakeInputs(c, 1);
  Fp8AttentionParams p = Params(c);
  p.format = Fp8Format::kE4M3Fnuz;
  ASSERT_TRUE(p.Validate(t.q.desc(), t.k.desc(), t.v.desc(), nullptr, nullptr, nullptr).ok());
  DeviceTensor q(t.q), k(t.k), v(t.v), out(p.OutputDesc());
  Fp8AttentionInputs in;
  in.q = q.view();
  in.k = k.view();
  in.v = v.view();
  TensorView ov = out.view();
  const absl::Status st = gpu::RunFp8Attention(p, in, ov, nullptr, kernel);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_NE(st.message().find("e4m3fnuz"), absl::string_view::npos) << st;
}

// The cases, each run by both kernels.

class Fp8AttentionCudaTest : public ::testing::Test {
 protected:
  void SetUp() override { KS_SKIP_WITHOUT_CUDA(); }
};

// The wgmma e4m3 kernel (bench/NOTES.md FP8 attention v2; what kAuto serves
// at (128, 128)). Its (192, 128) cases cover the fallback to mma.sync.
class Fp8AttentionCudaQgmmaTest : public ::testing::Test {
 protected:
  void SetUp() override { KS_SKIP_WITHOUT_CUDA(); }
};

TEST_F(Fp8AttentionCudaTest, ExactCausalGqaD128) { RunExactCausalGqaD128(gpu::Fp8AttentionKernel::kMmaSync); }
TEST_F(Fp8AttentionCudaTest, LeanNonCausalCrossBshd) { RunLeanNonCausalCrossBshd(gpu::Fp8AttentionKernel::kMmaSync); }
TEST_F(Fp8AttentionCudaTest, ExactCausalD192LongerKeys) {
  RunExactCausalD192LongerKeys(gpu::Fp8AttentionKernel::kMmaSync);
}
TEST_F(Fp8AttentionCudaTest, NaiveCausal) { RunNaiveCausal(gpu::Fp8AttentionKernel::kMmaSync); }
TEST_F(Fp8AttentionCudaTest, HadamardPerHeadD192AndD128) {
  RunHadamardPerHeadD192AndD128(gpu::Fp8AttentionKernel::kMmaSync);
}
TEST_F(Fp8AttentionCudaTest, MoreQueriesThanKeysCausalRowsSeeNothing) {
  RunMoreQueriesThanKeysCausalRowsSeeNothing(gpu::Fp8AttentionKernel::kMmaSync);
}
TEST_F(Fp8AttentionCudaTest, LongTailBlockScalingBeatsNaive) {
  RunLongTailBlockScalingBeatsNaive(gpu::Fp8AttentionKernel::kMmaSync);
}
TEST_F(Fp8AttentionCudaTest, Fp8InputsWithDescalesAndDeterminism) {
  RunFp8InputsWithDescalesAndDeterminism(gpu::Fp8AttentionKernel::kMmaSync);
}
TEST_F(Fp8AttentionCudaTest, FnuzIsUnimplemented) { RunFnuzIsUnimplemented(gpu::Fp8AttentionKernel::kMmaSync); }

TEST_F(Fp8AttentionCudaQgmmaTest, ExactCausalGqaD128) { RunExactCausalGqaD128(gpu::Fp8AttentionKernel::kQgmma); }
TEST_F(Fp8AttentionCudaQgmmaTest, LeanNonCausalCrossBshd) {
  RunLeanNonCausalCrossBshd(gpu::Fp8AttentionKernel::kQgmma);
}
TEST_F(Fp8AttentionCudaQgmmaTest, ExactCausalD192LongerKeys) {
  RunExactCausalD192LongerKeys(gpu::Fp8AttentionKernel::kQgmma);
}
TEST_F(Fp8AttentionCudaQgmmaTest, NaiveCausal) { RunNaiveCausal(gpu::Fp8AttentionKernel::kQgmma); }
TEST_F(Fp8AttentionCudaQgmmaTest, HadamardPerHeadD192AndD128) {
  RunHadamardPerHeadD192AndD128(gpu::Fp8AttentionKernel::kQgmma);
}
TEST_F(Fp8AttentionCudaQgmmaTest, MoreQueriesThanKeysCausalRowsSeeNothing) {
  RunMoreQueriesThanKeysCausalRowsSeeNothing(gpu::Fp8AttentionKernel::kQgmma);
}
TEST_F(Fp8AttentionCudaQgmmaTest, LongTailBlockScalingBeatsNaive) {
  RunLongTailBlockScalingBeatsNaive(gpu::Fp8AttentionKernel::kQgmma);
}
TEST_F(Fp8AttentionCudaQgmmaTest, Fp8InputsWithDescalesAndDeterminism) {
  RunFp8InputsWithDescalesAndDeterminism(gpu::Fp8AttentionKernel::kQgmma);
}
TEST_F(Fp8AttentionCudaQgmmaTest, FnuzIsUnimplemented) { RunFnuzIsUnimplemented(gpu::Fp8AttentionKernel::kQgmma); }

// QGMMA only: more key tiles than the shared cases (9 of 128 keys), and a
// query count that leaves a partial CTA, causal and not.
TEST_F(Fp8AttentionCudaQgmmaTest, ManyTilesBothMasks) {
  Case c;
  c.kernel = gpu::Fp8AttentionKernel::kQgmma;
  c.sq = 1100;
  c.skv = 1100;
  c.mode = PMode::kLean;
  Check(c);
  c.causal = false;
  c.mode = PMode::kExact;
  c.layout = Layout::kBshd;
  Check(c);
}

}  // namespace
}  // namespace kernelserve
