// The gfx942 FP8 attention launch on the CPU: the kernel of each call, the
// grid, the shapes served, and the device parameters over FP8 inputs.
#include "kernels/gpu/arch/gfx942/fp8_attention/fp8_attention_gfx942_launch.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace gfx942 {
namespace {

TEST(Gfx942Fp8AttentionLaunch, TheFiguresTheCodeObjectIsHeldTo) {
  EXPECT_EQ(sizeof(Fp8KernelParams), 104u);  // fp8_attention_gfx942_hip_test's argument size
  EXPECT_EQ(LdsBytes(128), 17920);
  EXPECT_EQ(LdsBytes(192), 22016);  // the test's max_lds
  EXPECT_LE(3 * LdsBytes(128), 65536);  // three CTAs per CU at d_qk = 128
  EXPECT_LE(2 * LdsBytes(192), 65536);  // two at 192
  EXPECT_GT(3 * LdsBytes(192), 65536);
  EXPECT_EQ(kThreads, 4 * 64);
  EXPECT_EQ(kRows, 4 * 16);
  EXPECT_EQ(kTile, 64);  // one ZYFA P block per tile
  EXPECT_EQ(static_cast<int>(PMode::kExact), kExact);
  EXPECT_EQ(static_cast<int>(PMode::kLean), kLean);
  EXPECT_EQ(static_cast<int>(PMode::kNaive), kNaive);
}

struct Call {
  Fp8AttentionParams p;
  TensorDesc q, k, v, ds_q, ds_kv;
};

// FP8 inputs in `layout`, per-tensor descales or per head.
Call MakeCall(Layout layout, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t skv, int64_t dqk,
              bool per_head, Fp8Format format = Fp8Format::kE4M3Fnuz) {
  Call c;
  c.p.layout = layout;
  c.p.format = format;
  const DType dt = Fp8FormatDType(format);
  const bool bshd = layout == Layout::kBshd;
  auto shape = [&](int64_t h, int64_t s, int64_t d) {
    return bshd ? std::vector<int64_t>{b, s, h, d} : std::vector<int64_t>{b, h, s, d};
  };
  c.q = {dt, shape(hq, sq, dqk)};
  c.k = {dt, shape(hkv, skv, dqk)};
  c.v = {dt, shape(hkv, skv, 128)};
  c.ds_q = {DType::kFp32, per_head ? std::vector<int64_t>{b, hq} : std::vector<int64_t>{1}};
  c.ds_kv = {DType::kFp32, per_head ? std::vector<int64_t>{b, hkv} : std::vector<int64_t>{1}};
  return c;
}

absl::Status Validate(Call& c) { return c.p.Validate(c.q, c.k, c.v, &c.ds_q, &c.ds_kv, &c.ds_kv); }

TEST(Gfx942Fp8AttentionLaunch, KernelOfEachHeadShapeMaskAndPMode) {
  for (int64_t dqk : {128, 192}) {
    for (bool causal : {false, true}) {
      for (PMode m : {PMode::kExact, PMode::kLean, PMode::kNaive}) {
        Call c = MakeCall(Layout::kBhsd, 1, 2, 1, 70, 90, dqk, false);
        c.p.causal = causal;
        c.p.p_mode = m;
        ASSERT_TRUE(Validate(c).ok());
        ASSERT_EQ(Unsupported(c.p), "");
        const std::string want = std::string("KsFp8AttnGfx942D") + (dqk == 128 ? "128" : "192") +
                                 (causal ? "Causal" : "Full") +
                                 (m == PMode::kExact ? "Exact" : m == PMode::kLean ? "Lean" : "Naive");
        EXPECT_EQ(KernelName(c.p), want);
      }
    }
  }
}

TEST(Gfx942Fp8AttentionLaunch, GridOverRowBlocksHeadsAndBatch) {
  Call c = MakeCall(Layout::kBshd, 3, 8, 2, 130, 300, 192, true);
  ASSERT_TRUE(Validate(c).ok());
  const Grid g = GridOf(c.p);
  EXPECT_EQ(g.x, 3u);  // 130 rows in blocks of 64
  EXPECT_EQ(g.y, 8u);
  EXPECT_EQ(g.z, 3u);
}

TEST(Gfx942Fp8AttentionLaunch, ServesE4m3fnuzAndTheTwoHeadShapesOnly) {
  Call fn = MakeCall(Layout::kBhsd, 1, 2, 2, 16, 16, 128, false, Fp8Format::kE4M3Fn);
  ASSERT_TRUE(Validate(fn).ok());
  EXPECT_EQ(Unsupported(fn.p), "format e4m3fn (serves e4m3fnuz)");

  Call d64 = MakeCall(Layout::kBhsd, 1, 2, 2, 16, 16, 128, false);
  ASSERT_TRUE(Validate(d64).ok());
  d64.p.d_qk = 64;  // a shape Validate may accept for other backends
  EXPECT_EQ(Unsupported(d64.p), "(d_qk, d_v) = (64, 128) (serves (128, 128) and (192, 128))");

  Call mode = MakeCall(Layout::kBhsd, 1, 2, 2, 16, 16, 128, false);
  ASSERT_TRUE(Validate(mode).ok());
  mode.p.p_mode = static_cast<PMode>(0);  // no kernel to name
  EXPECT_EQ(Unsupported(mode.p), "p_mode 0 (serves exact, lean and naive)");
}

TEST(Gfx942Fp8AttentionLaunch, ParamsOverFp8InputsPerTensorAndPerHead) {
  for (bool per_head : {false, true}) {
    for (Layout layout : {Layout::kBhsd, Layout::kBshd}) {
      Call c = MakeCall(layout, 2, 4, 2, 33, 77, 192, per_head);
      c.p.rounding = Rounding::kRtz;
      c.p.softmax_scale = 0.25;
      ASSERT_TRUE(Validate(c).ok());
      alignas(16) static uint8_t q[8], k[8], v[8], o[8];
      alignas(16) static float dq[8], dk[8], dv[8];
      Fp8AttentionInputs in;
      in.q = {c.q, q};
      in.k = {c.k, k};
      in.v = {c.v, v};
      in.q_descale = {c.ds_q, dq};
      in.k_descale = {c.ds_kv, dk};
      in.v_descale = {c.ds_kv, dv};
      const TensorView out{c.p.OutputDesc(), o};
      auto kp = MakeParams(c.p, in, nullptr, out);
      ASSERT_TRUE(kp.ok()) << kp.status();
      EXPECT_EQ(kp->q, q);
      EXPECT_EQ(kp->k, k);
      EXPECT_EQ(kp->v, v);
      EXPECT_EQ(kp->q_ds, dq);
      EXPECT_EQ(kp->k_ds, dk);
      EXPECT_EQ(kp->v_ds, dv);
      EXPECT_EQ(kp->out, reinterpret_cast<uint16_t*>(o));
      EXPECT_EQ(kp->q_ds_per_head, per_head ? 1 : 0);
      EXPECT_EQ(kp->k_ds_per_head, per_head ? 1 : 0);
      EXPECT_EQ(kp->v_ds_per_head, per_head ? 1 : 0);
      EXPECT_EQ(kp->heads_q, 4);
      EXPECT_EQ(kp->heads_kv, 2);
      EXPECT_EQ(kp->seq_q, 33);
      EXPECT_EQ(kp->seq_kv, 77);
      EXPECT_EQ(kp->bshd, layout == Layout::kBshd ? 1 : 0);
      EXPECT_EQ(kp->rounding, static_cast<int>(Rounding::kRtz));
      EXPECT_FLOAT_EQ(kp->scale_log2, static_cast<float>(0.25 * 1.4426950408889634));
    }
  }
}

TEST(Gfx942Fp8AttentionLaunch, ParamsRefuseAWrongOutputAndReadBf16InputsQuantization) {
  Call c = MakeCall(Layout::kBhsd, 1, 2, 2, 16, 16, 128, false);
  ASSERT_TRUE(Validate(c).ok());
  Fp8AttentionInputs in;
  alignas(16) static uint8_t buf[8];
  const TensorView wrong{TensorDesc{DType::kFp32, {1, 2, 16, 128}}, buf};
  auto kp = MakeParams(c.p, in, nullptr, wrong);
  ASSERT_FALSE(kp.ok());
  EXPECT_EQ(kp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(kp.status().message()).find("fp8_attention: out must be bf16"), std::string::npos)
      << kp.status();

  // bf16 inputs: the kernel reads their quantization (codes, expanded descales).
  Call bf = c;
  const TensorDesc t{DType::kBf16, {1, 2, 16, 128}};
  ASSERT_TRUE(bf.p.Validate(t, t, t, nullptr, nullptr, nullptr).ok());
  const TensorView out{bf.p.OutputDesc(), buf};
  kp = MakeParams(bf.p, in, nullptr, out);
  ASSERT_FALSE(kp.ok());
  EXPECT_EQ(kp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kp.status().message(), "fp8_attention: bf16 inputs need their quantization plan");
  alignas(256) static uint8_t ws[1 << 16];
  ASSERT_LE(QuantizeWorkspaceBytes(bf.p), sizeof(ws));
  const QuantizePlan plan = PlanQuantize(bf.p, in, Fp8QuantizedOut{}, ws);
  EXPECT_TRUE(plan.ops[0].fnuz);
  kp = MakeParams(bf.p, in, &plan, out);
  ASSERT_TRUE(kp.ok()) << kp.status();
  EXPECT_EQ(kp->q, plan.q_codes);
  EXPECT_EQ(kp->v_ds, plan.ops[2].descale);
  EXPECT_EQ(kp->k_ds_per_head, 1);
  EXPECT_EQ(kp->seq_kv, 16);
}

}  // namespace
}  // namespace gfx942
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
