// The sm90 forward's launch plan on the CPU: the dense-tail split at the
// seed shapes on an H100's 132 SMs (one CTA per SM), the forced and disabled
// splits, the causal order's sections, the workspace and the merge's grid.
#include "kernels/gpu/arch/sm90/attention/ws_plan.h"

#include <cstddef>

#include "gtest/gtest.h"
#include "kernels/gpu/attention/dense_tail.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/tile_scheduler.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace {

constexpr int kH100Sms = 132;

// Self-attention params as MakeFlashFwdParams leaves them (only what the plan reads).
FlashFwdParams Shape(int batch, int heads_q, int heads_kv, int seq_q, int seq_kv) {
  FlashFwdParams p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.group = heads_q / heads_kv;
  p.seq_q = seq_q;
  p.seq_kv = seq_kv;
  p.causal_offset = seq_kv - seq_q;
  return p;
}

WsLaunchPlan Plan(int b, int h, int s, int dim, bool causal, WsLaunchOptions opt = {}) {
  return PlanWsLaunch(Shape(b, h, h, s, s), dim, causal, kH100Sms, opt);
}

TEST(WsPlan, SeedShapesWithAPartialLastWaveSplitIt) {
  // (2, 24, 8192): 64 query tiles x 48 = 3072 items, 23 full waves and 36
  // left, 47 key tiles of 176 each: 3 chunks of 15-16 (36 x 3 = 108 <= 132
  // SMs).
  WsLaunchPlan l = Plan(2, 24, 8192, 128, false);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.tail_items, 36);
  EXPECT_EQ(l.tail.full_items, 3036);
  EXPECT_EQ(l.tail.splits, 3);
  EXPECT_EQ(l.tail.ctas, 3036 + 108);
  EXPECT_EQ(l.tail.cost_off, 47);
  EXPECT_EQ(l.tail.cost_on, 16 + 1 + 2 + 2);  // ceil(47 / 3), partials, launch, merge
  // (1, 32, 16384) and (1, 16, 32768): 4096 items, 31 waves and 4 left;
  // 94 and 187 key tiles: 16 chunks each (the bound).
  l = Plan(1, 32, 16384, 128, false);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.tail_items, 4);
  EXPECT_EQ(l.tail.splits, 16);
  EXPECT_EQ(l.tail.cost_off, 94);
  EXPECT_EQ(l.tail.cost_on, 6 + 1 + 2 + 1);
  l = Plan(1, 16, 32768, 128, false);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.splits, 16);
  EXPECT_EQ(l.tail.ctas, 4092 + 64);
  EXPECT_EQ(l.tail.cost_off, 187);
  // d256's 64-key tiles: 512, the same split.
  l = Plan(1, 16, 32768, 256, false);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.cost_off, 512);
  EXPECT_EQ(l.tail.splits, 16);
}

TEST(WsPlan, OffWithoutIdleSmsForASecondChunk) {
  // (2, 24, 16384): 6144 items, 46 waves and 72 left: 72 x 2 > 132.
  const WsLaunchPlan l = Plan(2, 24, 16384, 128, false);
  EXPECT_FALSE(l.tail.on);
  EXPECT_EQ(l.tail.ctas, 6144);
  EXPECT_EQ(l.tail.full_items, 6144);
  EXPECT_EQ(l.tail.splits, 1);
  EXPECT_EQ(l.workspace_bytes, 0u);
  // A grid of whole waves: 132 items.
  EXPECT_FALSE(PlanWsLaunch(Shape(1, 66, 66, 256, 256), 128, false, kH100Sms, {}).tail.on);
}

TEST(WsPlan, CausalSeedShapesEndOnTheirShortestItemsAndStayUnsplit) {
  // The sectioned order leaves the shortest query tiles for the last wave:
  // (2, 24, 8192) in sections of 8 pairs ends on m_blocks 4..0 of the last
  // section, at most 5 key tiles: a split saves less than it costs.
  WsLaunchPlan l = Plan(2, 24, 8192, 128, true);
  EXPECT_EQ(l.order.section, 8);
  EXPECT_EQ(l.tail_kv_tiles, 5);
  EXPECT_FALSE(l.tail.on);
  l = Plan(1, 32, 16384, 128, true);
  EXPECT_EQ(l.order.section, 4);
  EXPECT_EQ(l.tail_kv_tiles, 1);
  EXPECT_FALSE(l.tail.on);
  // The per-head order ends on the last head's tiles 35..0: the longest, 36
  // key tiles, is worth 3 chunks.
  WsLaunchOptions per_head;
  per_head.per_head_causal_order = true;
  l = Plan(2, 24, 8192, 128, true, per_head);
  EXPECT_EQ(l.order.section, 0);
  EXPECT_EQ(l.tail_kv_tiles, 36);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.splits, 3);
}

TEST(WsPlan, OverridesForceOrDisableTheSplit) {
  WsLaunchOptions off;
  off.dense_tail = 0;
  WsLaunchPlan l = Plan(1, 16, 32768, 128, false, off);
  EXPECT_FALSE(l.tail.on);
  EXPECT_EQ(l.tail.ctas, 4096);
  EXPECT_EQ(l.tail.cost_off, 187);
  // Forced on a small grid: every item is in the (only, partial) wave.
  WsLaunchOptions three;
  three.dense_tail = 3;
  l = PlanWsLaunch(Shape(1, 2, 2, 256, 256), 128, true, kH100Sms, three);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.full_items, 0);
  EXPECT_EQ(l.tail.tail_items, 4);
  EXPECT_EQ(l.tail.splits, 3);  // items of 1 and 2 key tiles: empty chunks too
  EXPECT_EQ(l.tail.ctas, 12);
  // 1: as many as the idle SMs allow, bounded by the key tiles.
  WsLaunchOptions any;
  any.dense_tail = 1;
  l = PlanWsLaunch(Shape(1, 2, 2, 256, 4096), 128, false, kH100Sms, any);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.splits, 16);
  // Forced on a grid of whole waves: the last wave is split.
  l = PlanWsLaunch(Shape(1, 66, 66, 256, 256), 128, false, kH100Sms, three);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.tail_items, 132);
  EXPECT_EQ(l.tail.full_items, 0);
}

TEST(WsPlan, WorkspaceAndMergeGrid) {
  // (1, 16, 32768) d128: 4 items x 16 chunks x 128 rows of 128 fp32, then
  // (m, l) per row.
  const WsLaunchPlan l = Plan(1, 16, 32768, 128, false);
  ASSERT_TRUE(l.tail.on);
  const size_t rows = size_t{4} * 16 * 128;
  EXPECT_EQ(l.part_o, 0u);
  EXPECT_EQ(l.part_ml, rows * 128 * 4);
  EXPECT_EQ(l.workspace_bytes, rows * 128 * 4 + rows * 2 * 4);
  EXPECT_EQ(l.merge_grid_x, 4u);
  EXPECT_EQ(l.merge_grid_y, 64u);  // 2 rows of 128 columns per 256-thread block
  for (int dim : {64, 256}) {
    const WsLaunchPlan d = Plan(1, 16, 32768, dim, false);
    ASSERT_TRUE(d.tail.on);
    EXPECT_EQ(d.merge_grid_y * (kWsMergeThreads / dim), static_cast<unsigned>(kWsBlockM)) << dim;
    EXPECT_EQ(d.part_ml % 256, 0u);
  }
}

// Under the model, the chunks of a split fit in the SMs the last wave leaves
// idle, and the CTA counts add up, over many grids.
TEST(WsPlan, ModelSplitsFitTheIdleSms) {
  for (int heads : {1, 3, 7, 16, 24, 40}) {
    for (int seq : {100, 1000, 4096, 9000}) {
      for (bool causal : {false, true}) {
        for (int dim : {64, 128, 256}) {
          const WsLaunchPlan l = Plan(1, heads, seq, dim, causal);
          const int items = TileCount(l.order);
          EXPECT_EQ(l.tail.full_items + l.tail.tail_items, items);
          EXPECT_EQ(l.tail.ctas, l.tail.full_items + l.tail.tail_items * l.tail.splits);
          if (!l.tail.on) continue;
          EXPECT_EQ(l.tail.tail_items, items % kH100Sms);
          EXPECT_LE(l.tail.tail_items * l.tail.splits, kH100Sms);
          EXPECT_LE(l.tail.splits, kWsDenseTailWeights.max_splits);
          EXPECT_LT(l.tail.cost_on, l.tail.cost_off);
        }
      }
    }
  }
}

}  // namespace
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
