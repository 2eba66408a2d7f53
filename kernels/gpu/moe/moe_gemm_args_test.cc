// The device parameters of an MoE call on the CPU: the routing over the
// workspace layout, each projection's GEMM and the weighted sum.
#include "kernels/gpu/moe/moe_gemm_args.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace {

void* Addr(uintptr_t a) { return reinterpret_cast<void*>(a); }

struct Call {
  MoeParams p;
  MoeInputs in;
  Call() {
    p.stage = MoeStage::kLayer;
    p.tokens = 8;
    p.top_k = 4;
    p.experts = 32;
    p.hidden = 256;
    p.inter = 128;
    p.out_dim = 192;
    p.rounding = Rounding::kRtz;
    in.x = TensorView{TensorDesc{DType::kBf16, {8, 256}}, Addr(0x1000)};
    in.topk_ids = TensorView{TensorDesc{DType::kInt32, {8, 4}}, Addr(0x2000)};
    in.topk_weights = TensorView{TensorDesc{DType::kFp32, {8, 4}}, Addr(0x3000)};
    in.w13 = TensorView{TensorDesc{DType::kUint8, {32, 256, 128}}, Addr(0x4000)};
    in.w13_scales = TensorView{TensorDesc{DType::kUint8, {32, 256, 8}}, Addr(0x5000)};
    in.w2 = TensorView{TensorDesc{DType::kUint8, {32, 192, 64}}, Addr(0x6000)};
    in.w2_scales = TensorView{TensorDesc{DType::kUint8, {32, 192, 4}}, Addr(0x7000)};
  }
};

TEST(MoeGemmArgs, RoutingPointsIntoTheWorkspaceLayout) {
  Call c;
  MoePlan plan;
  plan.mma_rows = 16;
  const MoeWorkspace w = MoeWorkspaceLayout(c.p, plan);
  uint8_t* ws = static_cast<uint8_t*>(Addr(0x100000));
  const RoutingParams r = MakeRoutingParams(c.p, c.in, plan, w, ws);
  EXPECT_EQ(r.topk_ids, c.in.topk_ids.data);
  EXPECT_EQ(r.pairs, 32);
  EXPECT_EQ(r.experts, 32);
  EXPECT_EQ(r.tile_rows, 16);
  EXPECT_EQ(r.max_tiles, w.max_tiles);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(r.counts), ws + w.counts);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(r.cursor), ws + w.cursor);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(r.sorted), ws + w.sorted);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(r.num_tiles), ws + w.num_tiles);
  EXPECT_EQ(RoutingBlocks(32), 1);
  EXPECT_EQ(RoutingBlocks(257), 2);
  EXPECT_EQ(RoutingBlocks(int64_t{1} << 30), 1024);
}

TEST(MoeGemmArgs, GateUpDownAndWeightedSum) {
  Call c;
  MoePlan plan;
  const MoeWorkspace w = MoeWorkspaceLayout(c.p, plan);
  const RoutingParams r = MakeRoutingParams(c.p, c.in, plan, w, static_cast<uint8_t*>(Addr(0x100000)));

  const GemmParams g = GateUpGemm(c.p, c.in, r, true, 1, Addr(0x9000));
  EXPECT_EQ(g.a, c.in.x.data);
  EXPECT_EQ(g.a_row_div, 4);  // pair p reads token p / top_k
  EXPECT_EQ(g.w, c.in.w13.data);
  EXPECT_EQ(g.ws, c.in.w13_scales.data);
  EXPECT_EQ(g.nw, 256);
  EXPECT_EQ(g.k, 256);
  EXPECT_EQ(g.inter, 128);
  EXPECT_EQ(g.out_cols, 128);  // SwiGLU: I columns
  EXPECT_EQ(g.rounding, 1);
  EXPECT_EQ(g.sorted, r.sorted);
  EXPECT_EQ(g.num_tiles, r.num_tiles);
  EXPECT_EQ(GateUpGemm(c.p, c.in, r, false, 1, Addr(0x9000)).out_cols, 256);  // gate and up rows

  const uint16_t* h = static_cast<const uint16_t*>(Addr(0xA000));
  const GemmParams d = DownGemm(c.p, c.in, r, h, Addr(0xB000));
  EXPECT_EQ(d.a, h);
  EXPECT_EQ(d.a_row_div, 1);
  EXPECT_EQ(d.w, c.in.w2.data);
  EXPECT_EQ(d.nw, 192);
  EXPECT_EQ(d.k, 128);
  EXPECT_EQ(d.out_cols, 192);
  EXPECT_EQ(d.rounding, static_cast<int>(Rounding::kRtz));

  const float* y = static_cast<const float*>(Addr(0xC000));
  const WeightedSumParams s = MakeWeightedSum(c.p, c.in, y, Addr(0xD000));
  EXPECT_EQ(s.y, y);
  EXPECT_EQ(s.weights, c.in.topk_weights.data);
  EXPECT_EQ(s.tokens, 8);
  EXPECT_EQ(s.top_k, 4);
  EXPECT_EQ(s.n, 192);
  EXPECT_EQ(s.out, Addr(0xD000));
}

}  // namespace
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
