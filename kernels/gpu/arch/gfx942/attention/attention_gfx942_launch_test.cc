// The gfx942 MHA forward launch on the CPU: the figures the code objects are
// held to, the work order, the dense-tail cost model and plan, the workspace
// and the grids, the shapes served.
#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/attention/attention_params.h"
#include "kernels/gpu/launch_test_fixtures.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {
namespace {

using gpu_test::FakeAddr;

constexpr int kMi300xCus = 304;

TEST(Gfx942AttentionLaunch, TheFiguresTheCodeObjectsAreHeldTo) {
  // attention_gfx942_hip_test and attention_aux_gfx942_hip_test: every kernel
  // takes this struct.
  EXPECT_EQ(sizeof(Gfx942AttnParams), 224u);
  EXPECT_EQ(sizeof(FlashFwdParams), 168u);
  EXPECT_EQ(kLdsBytes, 52224);  // two 32-key K tiles + eight staged 16-row Q tiles, rows of 272 bytes
  EXPECT_EQ(kVtLdsBytes, 17408);
  EXPECT_EQ(kThreads, 8 * 64);
  EXPECT_EQ(kRows, 8 * 3 * 16);
  // One CTA per CU: a second would need 2 x 52224 bytes of the CU's 64 KiB.
  EXPECT_GT(2 * kLdsBytes, 64 * 1024);
  // Eight waves on four SIMDs is two per SIMD: 512 / 2 = 256 VGPR + AGPR,
  // the attention_gfx942_hip_test limit.
  EXPECT_EQ(512 / (kThreads / 64 / 4), 256);
}

struct Call {
  AttentionParams p;
  FlashFwdParams f;
};

Call Make(Layout layout, bool causal, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t skv,
          Rounding rounding = Rounding::kRtne) {
  Call c;
  c.p.layout = layout;
  c.p.causal = causal;
  c.p.rounding = rounding;
  const bool bshd = layout == Layout::kBshd;
  const TensorDesc q{DType::kBf16, bshd ? std::vector<int64_t>{b, sq, hq, 128} : std::vector<int64_t>{b, hq, sq, 128}};
  const TensorDesc kv{DType::kBf16,
                      bshd ? std::vector<int64_t>{b, skv, hkv, 128} : std::vector<int64_t>{b, hkv, skv, 128}};
  const absl::Status st = c.p.Validate(q, kv, kv);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(Unsupported(c.p), "");
  const TensorView qv{q, FakeAddr(0x1000)}, kv_k{kv, FakeAddr(0x2000)}, kv_v{kv, FakeAddr(0x3000)},
      ov{c.p.OutputDesc(), FakeAddr(0x4000)};
  auto fp = MakeFlashFwdParams(c.p, qv, kv_k, kv_v, ov);
  EXPECT_TRUE(fp.ok()) << fp.status();
  if (fp.ok()) c.f = *fp;
  return c;
}

TEST(Gfx942AttentionLaunch, WorkOrderVisitsEveryItemOnceLongestBlocksFirst) {
  const int q_blocks = 5, heads = 3, batch = 2;
  std::set<std::vector<int>> seen;
  int prev_qb = q_blocks;
  for (int u = 0; u < q_blocks * heads * batch; ++u) {
    const WorkItem w = WorkItemAt(u, q_blocks, heads, batch);
    ASSERT_GE(w.qb, 0);
    ASSERT_LT(w.head, heads);
    ASSERT_LT(w.batch, batch);
    EXPECT_LE(w.qb, prev_qb);  // non-increasing: under a causal mask the longest items go first
    prev_qb = w.qb;
    EXPECT_TRUE(seen.insert({w.qb, w.head, w.batch}).second);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(q_blocks * heads * batch));
}

TEST(Gfx942AttentionLaunch, ChunksCoverTheTilesInOrderWithoutOverlap) {
  for (int n : {0, 1, 3, 7, 64, 257}) {
    for (int splits : {1, 2, 3, 16}) {
      EXPECT_EQ(ChunkBegin(n, 0, splits), 0);
      EXPECT_EQ(ChunkBegin(n, splits, splits), n);
      for (int s = 0; s < splits; ++s) {
        const int len = ChunkBegin(n, s + 1, splits) - ChunkBegin(n, s, splits);
        EXPECT_GE(len, n / splits);
        EXPECT_LE(len, n / splits + 1);
      }
    }
  }
}

TEST(DenseTailPlan, OffWhenTheGridTilesTheCusEvenly) {
  for (int rounds : {1, 2, 5}) {
    const DenseTailPlan d = PlanDenseTail(rounds * kMi300xCus, kMi300xCus, 256);
    EXPECT_FALSE(d.on);
    EXPECT_EQ(d.splits, 1);
    EXPECT_EQ(d.full_items, rounds * kMi300xCus);
    EXPECT_EQ(d.tail_items, 0);
    EXPECT_EQ(d.ctas, rounds * kMi300xCus);
  }
}

TEST(DenseTailPlan, OffWhenTheMergeCostsMoreThanTheTailSaves) {
  // (2, 24, 8192) work items over short KV: 16 K tiles per item; halving
  // them saves 8 tile-steps, writing and merging partials costs more.
  const DenseTailPlan d = PlanDenseTail(1056, kMi300xCus, 16);
  EXPECT_FALSE(d.on);
  EXPECT_GE(d.cost_on, d.cost_off);
  EXPECT_EQ(d.ctas, 1056);
  // Too few tiles for two chunks of kMinTilesPerSplit.
  EXPECT_FALSE(PlanDenseTail(1056, kMi300xCus, 7).on);
}

TEST(DenseTailPlan, OffWhenTheTailLeavesFewerIdleCusThanItHasItems) {
  // 200 tail items on 304 CUs: no second CU for any of them.
  const DenseTailPlan d = PlanDenseTail(2 * kMi300xCus + 200, kMi300xCus, 512);
  EXPECT_FALSE(d.on);
  EXPECT_EQ(d.splits, 1);
}

TEST(DenseTailPlan, OnForTheSeedsFractionalLastRound) {
  // (2, 24, 8192) non-causal: 22 blocks of 384 rows x 48 heads = 1056 items,
  // 3 full rounds of 304 and 144 left; 256 K tiles of 32 keys each.
  const DenseTailPlan d = PlanDenseTail(1056, kMi300xCus, 256);
  EXPECT_TRUE(d.on);
  EXPECT_EQ(d.tail_items, 144);
  EXPECT_EQ(d.full_items, 912);
  EXPECT_EQ(d.splits, 2);  // 144 x 2 = 288 <= 304 CUs
  EXPECT_EQ(d.ctas, 912 + 288);
  EXPECT_EQ(d.cost_off, 256);
  EXPECT_EQ(d.cost_on, 128 + kPartialTiles + kMergeLaunchTiles + 2 * kPartialTiles);
  EXPECT_LT(d.cost_on, d.cost_off);
}

TEST(DenseTailPlan, OneSmallRoundSpreadsAcrossTheCusUpToTheSplitLimit) {
  // 48 items on 304 CUs: 6 CUs each.
  DenseTailPlan d = PlanDenseTail(48, kMi300xCus, 64);
  EXPECT_TRUE(d.on);
  EXPECT_EQ(d.splits, 6);
  EXPECT_EQ(d.full_items, 0);
  EXPECT_EQ(d.ctas, 288);
  // 8 items: bounded by kMaxSplits.
  d = PlanDenseTail(8, kMi300xCus, 1024);
  EXPECT_TRUE(d.on);
  EXPECT_EQ(d.splits, kMaxSplits);
  // ... and by kMinTilesPerSplit.
  d = PlanDenseTail(8, kMi300xCus, 40);
  EXPECT_TRUE(d.on);
  EXPECT_EQ(d.splits, 10);
}

TEST(DenseTailPlan, SplitCtasNeverExceedTheCusAndTheCountsAddUp) {
  for (int items = 1; items < 3 * kMi300xCus; items += 7) {
    for (int tiles : {1, 8, 33, 256, 4096}) {
      const DenseTailPlan d = PlanDenseTail(items, kMi300xCus, tiles);
      EXPECT_EQ(d.full_items + d.tail_items, d.on ? items : d.full_items);
      EXPECT_EQ(d.ctas, d.full_items + d.tail_items * d.splits);
      if (!d.on) {
        EXPECT_EQ(d.full_items, items);
        EXPECT_EQ(d.splits, 1);
        continue;
      }
      EXPECT_EQ(d.full_items % kMi300xCus, 0);
      EXPECT_LE(d.tail_items * d.splits, kMi300xCus);
      EXPECT_GE(d.splits, 2);
      EXPECT_LE(d.splits, kMaxSplits);
      EXPECT_LE(d.splits * kMinTilesPerSplit, tiles);
      EXPECT_LT(d.cost_on, d.cost_off);
    }
  }
}

TEST(Gfx942AttentionLaunch, SeedShapeSplitsItsTailAndSizesTheWorkspace) {
  for (Layout layout : {Layout::kBhsd, Layout::kBshd}) {
    const Call c = Make(layout, false, 2, 24, 24, 8192, 8192, Rounding::kRtz);
    AttentionLaunch l = PlanAttention(c.f, false, kMi300xCus);
    EXPECT_STREQ(l.kernel, kKernel);
    EXPECT_TRUE(l.tail.on);
    EXPECT_EQ(l.params.q_blocks, 22);
    EXPECT_EQ(l.params.full_items, 912);
    EXPECT_EQ(l.params.tail_items, 144);
    EXPECT_EQ(l.params.splits, 2);
    EXPECT_EQ(l.params.vt_len, 8192);
    EXPECT_EQ(l.params.vt_head_stride, 128 * 8192);
    EXPECT_EQ(l.params.f.rounding, kFlashRtz);
    EXPECT_EQ(l.fwd_grid.x, 912u + 288u);
    EXPECT_EQ(l.vt_grid.x, 8192u / 64);
    EXPECT_EQ(l.vt_grid.y, 24u);
    EXPECT_EQ(l.vt_grid.z, 2u);
    EXPECT_EQ(l.merge_grid.x, 144u * 384 / 2);
    // V^T, then 288 partial CTAs of 384 rows: O (128 fp32) and (m, l).
    const size_t vt = size_t{2} * 24 * 128 * 8192 * 2;
    EXPECT_EQ(l.workspace.vt, 0u);
    EXPECT_EQ(l.workspace.part_o, vt);
    EXPECT_EQ(l.workspace.part_ml, vt + size_t{288} * 384 * 128 * 4);
    EXPECT_EQ(l.workspace.bytes, vt + size_t{288} * 384 * 128 * 4 + size_t{288} * 384 * 2 * 4);
    SetWorkspace(l, FakeAddr(0x100000));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(l.params.vt), 0x100000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(l.params.part_o), 0x100000u + vt);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(l.params.part_ml), 0x100000u + vt + size_t{288} * 384 * 128 * 4);
    EXPECT_EQ(l.params.f.q_row_stride, layout == Layout::kBshd ? 24 * 128 : 128);
  }
}

TEST(Gfx942AttentionLaunch, EvenGridHasNoPartialsOnlyVt) {
  // 304 items: 1 x 38 heads x 8 blocks of 384 rows = 3072 rows.
  const Call c = Make(Layout::kBhsd, false, 1, 38, 38, 3072, 1000);
  AttentionLaunch l = PlanAttention(c.f, false, kMi300xCus);
  EXPECT_FALSE(l.tail.on);
  EXPECT_EQ(l.fwd_grid.x, 304u);
  EXPECT_EQ(l.params.splits, 1);
  EXPECT_EQ(l.params.full_items, 304);
  EXPECT_EQ(l.params.vt_len, 1024);  // 1000 keys rounded up to 64
  EXPECT_EQ(l.workspace.bytes, size_t{38} * 128 * 1024 * 2);
  SetWorkspace(l, FakeAddr(0x200000));
  EXPECT_EQ(l.params.part_o, nullptr);
  EXPECT_EQ(l.params.part_ml, nullptr);
}

TEST(Gfx942AttentionLaunch, CausalGqaCrossAttentionTakesTheShortestItemsAsTheTail) {
  // 2 x 8 heads (GQA group 4) x 6 blocks = 96 items < 304: all of them are
  // the last partial round; the longest is block 5, whose last row 2047
  // sees keys up to 2047 + 1000 = 3047: 96 tiles of 32.
  const Call c = Make(Layout::kBshd, true, 2, 8, 2, 2048, 3048);
  EXPECT_EQ(c.f.group, 4);
  EXPECT_EQ(c.f.causal_offset, 1000);
  EXPECT_EQ(ItemKvTiles(c.f, 5, true), 96);
  EXPECT_EQ(ItemKvTiles(c.f, 0, true), (383 + 1000) / 32 + 1);
  EXPECT_EQ(ItemKvTiles(c.f, 0, false), 96);  // 3048 keys
  AttentionLaunch l = PlanAttention(c.f, true, kMi300xCus);
  EXPECT_STREQ(l.kernel, kCausalKernel);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.cost_off, 96);
  EXPECT_EQ(l.params.tail_items, 96);
  EXPECT_EQ(l.params.splits, 3);  // 304 / 96
  EXPECT_EQ(l.fwd_grid.x, 288u);
  EXPECT_EQ(l.vt_grid.y, 2u);  // V^T per KV head
}

TEST(Gfx942AttentionLaunch, CausalLastRoundIsCostedByItsLongestItem) {
  // 1 x 32 heads x 43 blocks (16384 rows) causal, square: 1376 items, 4 full
  // rounds (1216) and 160 left: blocks 4 .. 0 (32 items per block), the
  // longest block 4, whose last row 1919 sees 1920 keys: 60 tiles. 160 tail
  // items leave no second CU for any: off.
  const Call c = Make(Layout::kBhsd, true, 1, 32, 32, 16384, 16384);
  AttentionLaunch l = PlanAttention(c.f, true, kMi300xCus);
  EXPECT_EQ(l.params.q_blocks, 43);
  EXPECT_EQ(WorkItemAt(1216, 43, 32, 1).qb, 4);
  EXPECT_EQ(l.tail.cost_off, 60);
  EXPECT_FALSE(l.tail.on);
  EXPECT_EQ(l.fwd_grid.x, 1376u);
  // 4 heads: 172 items, all in one partial round, 304 / 172 = 1 CU each: off;
  // 2 heads: 86 items, 3 CUs each, the longest (block 42) 512 tiles: on.
  l = PlanAttention(Make(Layout::kBhsd, true, 1, 4, 4, 16384, 16384).f, true, kMi300xCus);
  EXPECT_FALSE(l.tail.on);
  l = PlanAttention(Make(Layout::kBhsd, true, 1, 2, 2, 16384, 16384).f, true, kMi300xCus);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.cost_off, 512);
  EXPECT_EQ(l.params.splits, 3);
  EXPECT_EQ(l.fwd_grid.x, 86u * 3);
}

TEST(Gfx942AttentionLaunch, OnlyHeadDim128) {
  AttentionParams p;
  const TensorDesc t{DType::kBf16, {1, 2, 64, 64}};
  ASSERT_TRUE(p.Validate(t, t, t).ok());
  EXPECT_EQ(Unsupported(p), "attention: the hip backend serves head_dim 128 (got 64)");
}

TEST(Gfx942AttentionLaunch, KeysBeyondThe31BitBufferOffsetsAreUnsupported) {
  AttentionParams p;
  p.layout = Layout::kBshd;
  const TensorDesc q{DType::kBf16, {1, 1, 8, 128}}, kv{DType::kBf16, {1, 1 << 20, 8, 128}};
  ASSERT_TRUE(p.Validate(q, kv, kv).ok());
  EXPECT_EQ(Unsupported(p),
            "attention: the hip backend addresses one head's K rows with 31-bit byte offsets: seq_kv 1048576 at a "
            "row stride of 1024 elements is too long");
}

}  // namespace
}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
