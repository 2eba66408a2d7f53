#include "kernels/api/op_call.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// Distinct addresses, so a view that lands in the wrong member shows.
int slots[8];

TensorView At(int i) {
  TensorView v;
  v.data = &slots[i];
  return v;
}

TEST(MakeOpCallTest, AttentionCarriesParamsAndViews) {
  AttentionParams p;
  p.causal = true;
  const OpCall c = MakeOpCall(p, At(0), At(1), At(2));
  EXPECT_EQ(c.op, BenchOp::kAttention);
  EXPECT_TRUE(c.attention.causal);
  EXPECT_EQ(c.q.data, &slots[0]);
  EXPECT_EQ(c.k.data, &slots[1]);
  EXPECT_EQ(c.v.data, &slots[2]);
}

TEST(MakeOpCallTest, Fp8CarriesParamsAndInputsOnly) {
  Fp8AttentionParams p;
  Fp8AttentionInputs in;
  in.q = At(3);
  in.v_descale = At(4);
  const OpCall c = MakeOpCall(p, in);
  EXPECT_EQ(c.op, BenchOp::kFp8Attention);
  EXPECT_EQ(c.fp8_in.q.data, &slots[3]);
  EXPECT_EQ(c.fp8_in.v_descale.data, &slots[4]);
  EXPECT_TRUE(c.q.empty());
  EXPECT_TRUE(c.mla_in.q_lat.empty());
}

TEST(MakeOpCallTest, MlaCarriesParamsAndInputsOnly) {
  MlaDecodeParams p;
  p.kv_scale = 0.5;
  p.num_splits = 3;
  MlaDecodeInputs in;
  in.kv = At(5);
  const OpCall c = MakeOpCall(p, in);
  EXPECT_EQ(c.op, BenchOp::kMlaDecode);
  EXPECT_EQ(c.mla.kv_scale, 0.5);
  EXPECT_EQ(c.mla.num_splits, 3);
  EXPECT_EQ(c.mla_in.kv.data, &slots[5]);
  EXPECT_TRUE(c.fp8_in.q.empty());
}

TEST(MakeOpCallTest, MoeOpFollowsStage) {
  MoeInputs in;
  in.w2 = At(6);
  const struct {
    MoeStage stage;
    BenchOp op;
  } cases[] = {{MoeStage::kGateUp, BenchOp::kMoeGateUp},
               {MoeStage::kDown, BenchOp::kMoeDown},
               {MoeStage::kLayer, BenchOp::kMoeLayer}};
  for (const auto& tc : cases) {
    MoeParams p;
    p.stage = tc.stage;
    const OpCall c = MakeOpCall(p, in);
    EXPECT_EQ(c.op, tc.op) << BenchOpName(tc.op);
    EXPECT_EQ(c.moe.stage, tc.stage);
    EXPECT_EQ(c.moe_in.w2.data, &slots[6]);
    EXPECT_TRUE(IsMoeOp(c.op));
  }
}

}  // namespace
}  // namespace kernelserve
