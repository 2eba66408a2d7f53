// The MoE launch plan on the CPU: the dispatcher's choice of GEMM and row
// tile at the reference shapes, the shapes the backend serves, and the
// workspace layout.
#include "kernels/gpu/moe/moe_plan.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace {

// Validated params as MoeParams::Validate fills them.
MoeParams Shape(MoeStage stage, int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                int64_t out_dim) {
  MoeParams p;
  p.stage = stage;
  p.tokens = tokens;
  p.top_k = top_k;
  p.experts = experts;
  p.hidden = hidden;
  p.inter = inter;
  p.out_dim = out_dim;
  p.weighted_sum = stage == MoeStage::kLayer;
  p.swiglu = stage == MoeStage::kLayer;
  return p;
}

// The seed's Kimi-K3 TP8 shard: E = 896, K = 3584, I = 384, N = 3584, top-16.
MoeParams Kimi(MoeStage stage, int64_t tokens) { return Shape(stage, tokens, 16, 896, 3584, 384, 3584); }

// gpt-oss-like: 128 experts, top-4, K = I = N = 3072 (gpt-oss-120b's 2880
// rounded up to the backend's K multiple).
MoeParams GptOssLike(MoeStage stage, int64_t tokens) { return Shape(stage, tokens, 4, 128, 3072, 3072, 3072); }

MoePlan Plan(int wgmma_rows, int mma_rows) {
  MoePlan plan;
  plan.wgmma_rows = wgmma_rows;
  plan.mma_rows = mma_rows;
  return plan;
}

MoePlan Stream() {
  MoePlan plan;
  plan.stream = true;
  return plan;
}

// Decode: every GEMM of the call streams the weights.
void ExpectStream(const MoeParams& p) {
  EXPECT_EQ(PlanMoe(p), Stream()) << "T=" << p.tokens << " stage " << static_cast<int>(p.stage);
  EXPECT_EQ(MoeUnsupported(p, Stream()), "") << "T=" << p.tokens;
}

void ExpectPlan(const MoeParams& p, int wgmma_rows, int mma_rows) {
  const MoePlan got = PlanMoe(p);
  EXPECT_FALSE(got.stream) << "T=" << p.tokens;
  EXPECT_EQ(got.wgmma_rows, wgmma_rows) << "T=" << p.tokens << " stage " << static_cast<int>(p.stage);
  EXPECT_EQ(got.mma_rows, mma_rows) << "T=" << p.tokens << " stage " << static_cast<int>(p.stage);
  EXPECT_EQ(MoeUnsupported(p, got), "") << "T=" << p.tokens;
}

TEST(MoePlanTest, KimiShardGateUp) {
  // ~1 row per expert: the weights stream.
  ExpectStream(Kimi(MoeStage::kGateUp, 8));
  ExpectStream(Kimi(MoeStage::kGateUp, 32));
  // 73 rows per expert: 128 x 256 launches 1 x 3 CTAs per expert, 192 x 192 1 x 4.
  ExpectPlan(Kimi(MoeStage::kGateUp, 4096), 128, 64);
  // 146 rows: 2 x 3 against 1 x 4; 292 rows: 3 x 3 against 2 x 4.
  ExpectPlan(Kimi(MoeStage::kGateUp, 8192), 192, 64);
  ExpectPlan(Kimi(MoeStage::kGateUp, 16384), 192, 128);
  // SwiGLU pairs the same weight rows: the same plan.
  MoeParams swiglu = Kimi(MoeStage::kGateUp, 8192);
  swiglu.swiglu = true;
  EXPECT_EQ(PlanMoe(swiglu), PlanMoe(Kimi(MoeStage::kGateUp, 8192)));
}

TEST(MoePlanTest, KimiShardDownAndLayerStreamOrRunMmaSync) {
  for (MoeStage stage : {MoeStage::kDown, MoeStage::kLayer}) {
    ExpectStream(Kimi(stage, 8));
    ExpectStream(Kimi(stage, 32));
    ExpectPlan(Kimi(stage, 8192), 0, 64);
    ExpectPlan(Kimi(stage, 16384), 0, 128);
  }
}

TEST(MoePlanTest, GptOssLike) {
  ExpectStream(GptOssLike(MoeStage::kGateUp, 8));
  ExpectPlan(GptOssLike(MoeStage::kGateUp, 2048), 0, 64);   // 64 rows per expert: below 72
  ExpectPlan(GptOssLike(MoeStage::kGateUp, 4096), 128, 64);  // 128 rows: 1 x 24 CTAs against 1 x 32
  ExpectPlan(GptOssLike(MoeStage::kGateUp, 8192), 128, 128); // 256 rows: 2 x 24 against 2 x 32
  ExpectPlan(GptOssLike(MoeStage::kLayer, 8192), 0, 128);
  // gpt-oss-120b itself: K = I = 2880 is no multiple of 128.
  const MoeParams real = Shape(MoeStage::kGateUp, 8192, 4, 128, 2880, 2880, 2880);
  EXPECT_NE(MoeUnsupported(real, PlanMoe(real)).find("% 128"), std::string::npos);
}

TEST(MoePlanTest, Thresholds) {
  // Rows per expert = tokens * top_k / min(pairs, E); E = 8, top-1.
  auto rows = [](int64_t tokens) { return PlanMoe(Shape(MoeStage::kGateUp, tokens, 1, 8, 256, 384, 256)); };
  EXPECT_EQ(rows(8 * 11), Stream());    // 11.9 rows
  EXPECT_EQ(rows(8 * 12 - 1), Stream());
  EXPECT_EQ(rows(8 * 12), Plan(0, 64));  // 12 rows
  EXPECT_EQ(rows(8 * 255).mma_rows, 64);
  EXPECT_EQ(rows(8 * 256).mma_rows, 128);
  EXPECT_EQ(rows(8 * 71 + 7).wgmma_rows, 0);  // 71.9 rows
  EXPECT_EQ(rows(8 * 72).wgmma_rows, 128);    // 72 rows
  // Fewer pairs than experts: the mean over the experts the pairs can reach.
  EXPECT_EQ(PlanMoe(Shape(MoeStage::kGateUp, 3, 2, 8, 256, 384, 256)), Stream());
  // No pairs at all.
  EXPECT_EQ(PlanMoe(Shape(MoeStage::kGateUp, 0, 4, 8, 256, 384, 256)), Stream());
}

TEST(MoePlanTest, TiedCtaCountsTake128x256) {
  // I = 192: 384 weight rows are 2 column tiles in both tilings; 100 rows
  // per expert are one row tile in both.
  ExpectPlan(Shape(MoeStage::kGateUp, 200, 4, 8, 256, 192, 256), 128, 64);
}

TEST(MoePlanTest, UnsupportedShapesAndPlans) {
  const MoeParams gu = Kimi(MoeStage::kGateUp, 8192);
  EXPECT_EQ(MoeUnsupported(gu, Plan(128, 64)), "");
  EXPECT_EQ(MoeUnsupported(gu, Plan(192, 64)), "");
  for (int mma : {64, 128}) EXPECT_EQ(MoeUnsupported(gu, Plan(0, mma)), "") << mma;
  EXPECT_EQ(MoeUnsupported(gu, Stream()), "");
  EXPECT_NE(MoeUnsupported(gu, Plan(256, 64)), "");
  EXPECT_NE(MoeUnsupported(gu, Plan(0, 16)).find("64- and 128-row"), std::string::npos);
  MoePlan both = Stream();
  both.wgmma_rows = 128;
  EXPECT_NE(MoeUnsupported(gu, both).find("one GEMM kernel"), std::string::npos);
  MoePlan rs_and_stream = Stream();
  rs_and_stream.wgmma_rs = 128;
  EXPECT_NE(MoeUnsupported(gu, rs_and_stream).find("one GEMM kernel"), std::string::npos);
  // A layer's down half reads the routing tiles on mma.sync; down has no wgmma kernel.
  for (MoeStage stage : {MoeStage::kDown, MoeStage::kLayer}) {
    for (int w : {128, 192}) {
      EXPECT_NE(MoeUnsupported(Kimi(stage, 8192), Plan(w, 64)).find("gate/up projection alone"), std::string::npos);
    }
  }
  MoeParams p = Kimi(MoeStage::kGateUp, 8);
  p.hidden = 96;
  EXPECT_NE(MoeUnsupported(p, PlanMoe(p)).find("K (hidden) % 128"), std::string::npos);
  p = Kimi(MoeStage::kDown, 8);
  p.inter = 192;
  EXPECT_NE(MoeUnsupported(p, PlanMoe(p)).find("I % 128"), std::string::npos);
  p = Kimi(MoeStage::kDown, 8);
  p.out_dim = 201;
  EXPECT_NE(MoeUnsupported(p, PlanMoe(p)).find("even N"), std::string::npos);
  p = Kimi(MoeStage::kGateUp, 8);
  p.inter = 97;
  EXPECT_NE(MoeUnsupported(p, PlanMoe(p)).find("even I"), std::string::npos);
  p = Kimi(MoeStage::kGateUp, 8);
  p.experts = kMaxExperts + 1;
  EXPECT_NE(MoeUnsupported(p, PlanMoe(p)).find("4096 experts"), std::string::npos);
  p.experts = kMaxExperts;
  EXPECT_EQ(MoeUnsupported(p, PlanMoe(p)), "");
  p = Kimi(MoeStage::kGateUp, (int64_t{1} << 31) / 128 / 16);
  EXPECT_NE(MoeUnsupported(p, PlanMoe(p)).find("too many"), std::string::npos);
}

// The tiles the scan makes for per-expert row counts.
int64_t TilesFor(const std::vector<int64_t>& counts, int rows) {
  int64_t tiles = 0;
  for (int64_t c : counts) tiles += (c + rows - 1) / rows;
  return tiles;
}

TEST(MoePlanTest, WorkspaceHoldsEveryRouting) {
  for (MoeStage stage : {MoeStage::kGateUp, MoeStage::kDown, MoeStage::kLayer}) {
    for (int64_t tokens : {1, 5, 40, 600}) {
      MoeParams p = Shape(stage, tokens, 4, 8, 256, 128, 256);
      p.weighted_sum = stage != MoeStage::kGateUp;
      const int64_t pairs = tokens * 4;
      for (const MoePlan& plan : {Stream(), Plan(0, 64), Plan(0, 128), Plan(128, 64), Plan(192, 64)}) {
        const MoeWorkspace w = MoeWorkspaceLayout(p, plan);
        const int rows = plan.TileRows();
        // Experts with 0, 1 and all rows; an even spread; as many ones as fit.
        std::vector<std::vector<int64_t>> routings = {{pairs, 0, 0, 0, 0, 0, 0, 0},
                                                      {pairs - 7, 1, 1, 1, 1, 1, 1, 1}};
        std::vector<int64_t> even(8, pairs / 8);
        even[0] += pairs % 8;
        routings.push_back(even);
        std::vector<int64_t> ones(8, 0);
        for (int64_t i = 0; i < pairs; ++i) ones[i % 8] += 1;
        routings.push_back(ones);
        for (const auto& r : routings) {
          if (*std::min_element(r.begin(), r.end()) < 0) continue;
          EXPECT_LE(TilesFor(r, rows), w.max_tiles) << "tokens " << tokens << " rows " << rows;
        }
        EXPECT_EQ(w.counts, 0u);
        EXPECT_EQ(w.cursor, w.counts + 4 * 8);  // adjacent: one memset clears both
        EXPECT_EQ(w.sorted % 256, 0u);
        EXPECT_GE(w.sorted, w.num_tiles + 4);
        EXPECT_EQ(w.h % 256, 0u);
        EXPECT_GE(w.h, w.sorted + static_cast<size_t>(w.max_tiles) * rows * 4);
        EXPECT_EQ(w.y % 256, 0u);
        const size_t h_bytes = stage == MoeStage::kLayer ? static_cast<size_t>(pairs) * 128 * 2 : 0;
        const size_t y_bytes = stage == MoeStage::kGateUp ? 0 : static_cast<size_t>(pairs) * 256 * 4;
        EXPECT_GE(w.y, w.h + h_bytes);
        EXPECT_EQ(w.bytes, w.y + y_bytes);
      }
    }
  }
}

TEST(MoePlanTest, TileRowsFollowTheGateUpKernel) {
  EXPECT_EQ(Stream().TileRows(), kStreamRows);
  EXPECT_EQ(Plan(0, 64).TileRows(), 64);
  EXPECT_EQ(Plan(0, 128).TileRows(), 128);
  EXPECT_EQ(Plan(192, 64).TileRows(), 192);
}

}  // namespace
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
