// The workspace plan of quantizing bf16 attention inputs, on the CPU: the
// parts are disjoint, aligned and inside the workspace; each tensor's
// arguments (rows, dim, heads, layout, Hadamard, format); `keep` overrides;
// and the kernel params that read the plan's codes and expanded descales.
#include "kernels/gpu/fp8_attention/fp8_quantize_plan.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace {

Fp8AttentionParams Bf16Call(Layout layout, bool hadamard, Fp8Format format, DescaleMode mode) {
  Fp8AttentionParams p;
  p.layout = layout;
  p.hadamard = hadamard;
  p.format = format;
  p.descale_mode = mode;
  const bool bshd = layout == Layout::kBshd;
  const TensorDesc q{DType::kBf16, bshd ? std::vector<int64_t>{2, 33, 4, 192} : std::vector<int64_t>{2, 4, 33, 192}};
  const TensorDesc k{DType::kBf16, bshd ? std::vector<int64_t>{2, 70, 2, 192} : std::vector<int64_t>{2, 2, 70, 192}};
  const TensorDesc v{DType::kBf16, bshd ? std::vector<int64_t>{2, 70, 2, 128} : std::vector<int64_t>{2, 2, 70, 128}};
  EXPECT_TRUE(p.Validate(q, k, v, nullptr, nullptr, nullptr).ok());
  return p;
}

TEST(Fp8QuantizePlan, DisjointAlignedPartsInsideTheWorkspace) {
  for (bool had : {false, true}) {
    const Fp8AttentionParams p = Bf16Call(Layout::kBhsd, had, Fp8Format::kE4M3Fn, DescaleMode::kPerTensor);
    const size_t bytes = QuantizeWorkspaceBytes(p);
    const size_t nq = 2 * 4 * 33, nk = 2 * 2 * 70, heads = 2 * (4 + 2 * 2);
    auto up = [](size_t x) { return (x + 255) / 256 * 256; };
    EXPECT_EQ(bytes, up(nq * 192) + up(nk * 192) + up(nk * 128) + 2 * up(heads * 4) +
                         (had ? up(std::max(nq, nk) * 192 * 4) : 0));
    alignas(256) static uint8_t ws[1 << 20];
    ASSERT_LE(bytes, sizeof(ws));
    Fp8AttentionInputs in;
    const QuantizePlan plan = PlanQuantize(p, in, Fp8QuantizedOut{}, ws);
    struct Part {
      const void* at;
      size_t size;
    } parts[] = {{plan.q_codes, nq * 192},   {plan.k_codes, nk * 192},   {plan.v_codes, nk * 128},
                 {plan.descales, heads * 4}, {plan.amax, plan.amax_bytes}, {plan.ops[0].rotated, had ? nq * 192 * 4 : 0}};
    EXPECT_EQ(plan.amax_bytes, heads * 4);
    for (const Part& a : parts) {
      if (a.size == 0) continue;
      const auto off = static_cast<size_t>(static_cast<const uint8_t*>(a.at) - ws);
      EXPECT_EQ(off % 256, 0u);
      EXPECT_LE(off + a.size, bytes);
      for (const Part& b : parts) {
        if (&a == &b || b.size == 0) continue;
        const auto ob = static_cast<size_t>(static_cast<const uint8_t*>(b.at) - ws);
        EXPECT_TRUE(off + a.size <= ob || ob + b.size <= off) << off << " overlaps " << ob;
      }
    }
    EXPECT_EQ(plan.ops[0].rotated == nullptr, !had);
    EXPECT_EQ(plan.ops[1].rotated, plan.ops[0].rotated);  // q's then k's, in stream order
  }
}

TEST(Fp8QuantizePlan, EachTensorsArguments) {
  for (Fp8Format f : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    const Fp8AttentionParams p = Bf16Call(Layout::kBshd, true, f, DescaleMode::kPerHead);
    alignas(256) static uint8_t ws[1 << 20];
    alignas(16) static uint16_t q[8], k[8], v[8];
    Fp8AttentionInputs in;
    in.q.data = q;
    in.k.data = k;
    in.v.data = v;
    const QuantizePlan plan = PlanQuantize(p, in, Fp8QuantizedOut{}, ws);
    const QuantizeArgs& aq = plan.ops[0];
    const QuantizeArgs& ak = plan.ops[1];
    const QuantizeArgs& av = plan.ops[2];
    EXPECT_EQ(aq.x, q);
    EXPECT_EQ(ak.x, k);
    EXPECT_EQ(av.x, v);
    EXPECT_EQ(aq.rows, 2 * 4 * 33);
    EXPECT_EQ(ak.rows, 2 * 2 * 70);
    EXPECT_EQ(aq.dim, 192);
    EXPECT_EQ(av.dim, 128);
    EXPECT_EQ(aq.heads, 4);
    EXPECT_EQ(av.heads, 2);
    EXPECT_EQ(aq.seq, 33);
    EXPECT_EQ(av.seq, 70);
    EXPECT_TRUE(aq.hadamard && ak.hadamard);
    EXPECT_FALSE(av.hadamard);  // V is never rotated
    for (const QuantizeArgs& a : plan.ops) {
      EXPECT_TRUE(a.per_head && a.bshd);
      EXPECT_EQ(a.batch, 2);
      EXPECT_EQ(a.fnuz, f == Fp8Format::kE4M3Fnuz);
    }
    EXPECT_EQ(aq.descale, plan.descales);
    EXPECT_EQ(ak.descale, plan.descales + 8);
    EXPECT_EQ(av.descale, plan.descales + 12);
    EXPECT_EQ(ak.amax, plan.amax + 8);
    EXPECT_EQ(av.amax, plan.amax + 12);

    Fp8KernelParams kp{};
    SetQuantizedInputs(plan, kp);
    EXPECT_EQ(kp.q, plan.q_codes);
    EXPECT_EQ(kp.k, plan.k_codes);
    EXPECT_EQ(kp.v, plan.v_codes);
    EXPECT_EQ(kp.v_ds, av.descale);
    EXPECT_EQ(kp.q_ds_per_head + kp.k_ds_per_head + kp.v_ds_per_head, 3);  // expanded
  }
}

TEST(Fp8QuantizePlan, KeptCodesAndDescalesGoWhereAsked) {
  const Fp8AttentionParams p = Bf16Call(Layout::kBhsd, false, Fp8Format::kE4M3Fnuz, DescaleMode::kPerTensor);
  alignas(256) static uint8_t ws[1 << 20];
  static uint8_t qc[4], kc[4], vc[4];
  static float ds[4];
  const QuantizePlan plan = PlanQuantize(p, Fp8AttentionInputs{}, Fp8QuantizedOut{qc, kc, vc, ds}, ws);
  EXPECT_EQ(plan.q_codes, qc);
  EXPECT_EQ(plan.k_codes, kc);
  EXPECT_EQ(plan.v_codes, vc);
  EXPECT_EQ(plan.descales, ds);
  EXPECT_EQ(plan.ops[2].codes, vc);
  EXPECT_FALSE(plan.ops[0].per_head);
  EXPECT_GE(reinterpret_cast<uint8_t*>(plan.amax), ws);  // scratch stays in the workspace
}

TEST(Fp8QuantizePlan, TheArgumentsTheAmdCodeObjectIsHeldTo) {
  EXPECT_EQ(sizeof(QuantizeArgs), 72u);  // fp8_quantize_hip_test's argument size
}

TEST(Fp8QuantizePlan, GridsCoverTheRowsUpToTheirCaps) {
  QuantizeArgs a;
  a.rows = 100;
  a.dim = 128;
  a.batch = 2;
  a.heads = 300;
  QuantizeGrids g = QuantizeGridsOf(a);
  EXPECT_EQ(g.amax, 13);       // 8 rows per block
  EXPECT_EQ(g.quantize, 50);   // 256 elements per block
  EXPECT_EQ(g.descale, 3);
  a.rows = int64_t{1} << 24;
  g = QuantizeGridsOf(a);
  EXPECT_EQ(g.amax, 132 * 16);
  EXPECT_EQ(g.quantize, 132 * 32);
}

}  // namespace
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
