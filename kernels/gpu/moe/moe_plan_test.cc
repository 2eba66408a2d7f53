// The MoE launch plan on the CPU: the dispatcher's choice of GEMM at the
// reference shapes, the shapes the backend serves, and the
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

MoePlan MmaSync() { return MoePlan{}; }

// A B-streamed CTA walks kRsStreamCols column tiles below kRsRows rows per
// expert, one from there.
MoePlan WgmmaRs(int stream_cols = kRsStreamCols) {
  MoePlan plan;
  plan.wgmma_rs = true;
  plan.rs_b_resident = true;
  plan.rs_stream_cols = stream_cols;
  return plan;
}

MoePlan Stream() {
  MoePlan plan;
  plan.stream = true;
  return plan;
}

void ExpectPlan(const MoeParams& p, const MoePlan& want) {
  const MoePlan got = PlanMoe(p);
  EXPECT_EQ(got, want) << "T=" << p.tokens << " stage " << static_cast<int>(p.stage) << ": stream " << got.stream
                       << " wgmma_rs " << got.wgmma_rs << " mma_rows " << got.mma_rows;
  EXPECT_EQ(MoeUnsupported(p, got), "") << "T=" << p.tokens;
}

// Rows per expert on the Kimi shard: T x 16 / 896.
TEST(MoePlanTest, KimiShard) {
  for (MoeStage stage : {MoeStage::kGateUp, MoeStage::kDown, MoeStage::kLayer}) {
    ExpectPlan(Kimi(stage, 8), Stream());   // ~1 row per expert: the weights stream
    ExpectPlan(Kimi(stage, 32), Stream());  // 0.6
    for (int64_t t : {4096, 8192}) ExpectPlan(Kimi(stage, t), WgmmaRs());  // 73, 146
    ExpectPlan(Kimi(stage, 16384), WgmmaRs(1));                            // 292
  }
  // 18 and 37 rows: gate/up and the layer on wgmma_rs, down on mma.sync.
  for (int64_t t : {1024, 2048}) {
    ExpectPlan(Kimi(MoeStage::kGateUp, t), WgmmaRs());
    ExpectPlan(Kimi(MoeStage::kLayer, t), WgmmaRs());
    ExpectPlan(Kimi(MoeStage::kDown, t), MmaSync());
  }
  // SwiGLU and the weighted sum change no plan.
  MoeParams swiglu = Kimi(MoeStage::kGateUp, 8192);
  swiglu.swiglu = true;
  EXPECT_EQ(PlanMoe(swiglu), PlanMoe(Kimi(MoeStage::kGateUp, 8192)));
}

TEST(MoePlanTest, GptOssLike) {
  ExpectPlan(GptOssLike(MoeStage::kGateUp, 8), Stream());
  ExpectPlan(GptOssLike(MoeStage::kGateUp, 2048), WgmmaRs());  // 64 rows per expert
  ExpectPlan(GptOssLike(MoeStage::kDown, 1024), MmaSync());    // 32
  ExpectPlan(GptOssLike(MoeStage::kDown, 2048), WgmmaRs());    // 64
  ExpectPlan(GptOssLike(MoeStage::kLayer, 8192), WgmmaRs(1));  // 256
  // gpt-oss-120b itself: K = I = 2880 is no multiple of 128.
  const MoeParams real = Shape(MoeStage::kGateUp, 8192, 4, 128, 2880, 2880, 2880);
  EXPECT_NE(MoeUnsupported(real, PlanMoe(real)).find("% 128"), std::string::npos);
}

TEST(MoePlanTest, Thresholds) {
  // Rows per expert = tokens * top_k / min(pairs, E); E = 8, top-1.
  auto plan = [](MoeStage stage, int64_t tokens) { return PlanMoe(Shape(stage, tokens, 1, 8, 256, 384, 256)); };
  for (MoeStage stage : {MoeStage::kGateUp, MoeStage::kDown, MoeStage::kLayer}) {
    EXPECT_EQ(plan(stage, 8 * 11), Stream());  // 11.9 rows
    EXPECT_EQ(plan(stage, 8 * 12 - 1), Stream());
  }
  EXPECT_EQ(plan(MoeStage::kGateUp, 8 * 12), WgmmaRs());  // 12 rows
  EXPECT_EQ(plan(MoeStage::kLayer, 8 * 12), WgmmaRs());
  EXPECT_EQ(plan(MoeStage::kDown, 8 * 12), MmaSync());
  EXPECT_EQ(plan(MoeStage::kDown, 8 * 64 - 1), MmaSync());  // 63.9 rows
  EXPECT_EQ(plan(MoeStage::kDown, 8 * 64), WgmmaRs());      // 64 rows
  // A B-streamed CTA's walk: below one full routing tile per expert.
  EXPECT_EQ(plan(MoeStage::kGateUp, 8 * kRsRows - 1), WgmmaRs());
  EXPECT_EQ(plan(MoeStage::kGateUp, 8 * kRsRows), WgmmaRs(1));
  // Fewer pairs than experts: the mean over the experts the pairs can reach.
  EXPECT_EQ(PlanMoe(Shape(MoeStage::kGateUp, 3, 2, 8, 256, 384, 256)), Stream());
  // No pairs at all.
  EXPECT_EQ(PlanMoe(Shape(MoeStage::kGateUp, 0, 4, 8, 256, 384, 256)), Stream());
}

TEST(MoePlanTest, UnsupportedShapesAndPlans) {
  for (MoeStage stage : {MoeStage::kGateUp, MoeStage::kDown, MoeStage::kLayer}) {
    const MoeParams p = Kimi(stage, 8192);
    for (const MoePlan& plan : {Stream(), WgmmaRs(), MmaSync()}) EXPECT_EQ(MoeUnsupported(p, plan), "");
    MoePlan both = Stream();
    both.wgmma_rs = true;
    EXPECT_NE(MoeUnsupported(p, both).find("not both"), std::string::npos);
    MoePlan m128 = MmaSync();
    m128.mma_rows = 128;
    EXPECT_NE(MoeUnsupported(p, m128).find("64-row tiles"), std::string::npos);
    MoePlan resident_mma = MmaSync();
    resident_mma.rs_b_resident = true;
    EXPECT_NE(MoeUnsupported(p, resident_mma).find("wgmma_rs's"), std::string::npos);
    for (int cols : {0, -1}) {
      MoePlan no_walk = WgmmaRs();
      no_walk.rs_stream_cols = cols;
      EXPECT_NE(MoeUnsupported(p, no_walk).find("at least one column tile"), std::string::npos);
      no_walk = WgmmaRs();
      no_walk.rs_resident_cols = cols;
      EXPECT_NE(MoeUnsupported(p, no_walk).find("at least one column tile"), std::string::npos);
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
  // wgmma_rs keeps 32-bit 16-byte-chunk offsets into the activations.
  p = Shape(MoeStage::kGateUp, 1 << 20, 1, 8, 1 << 15, 128, 256);  // 2^20 rows x 2^12 chunks
  EXPECT_NE(MoeUnsupported(p, WgmmaRs()).find("2^32"), std::string::npos);
  EXPECT_EQ(MoeUnsupported(p, MmaSync()), "");
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
      for (const MoePlan& plan : {Stream(), MmaSync(), WgmmaRs()}) {
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

TEST(MoePlanTest, TileRowsFollowTheKernel) {
  EXPECT_EQ(Stream().TileRows(), kStreamRows);
  EXPECT_EQ(MmaSync().TileRows(), 64);
  EXPECT_EQ(WgmmaRs().TileRows(), kRsRows);
}

}  // namespace
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
