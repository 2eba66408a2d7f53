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
  // attention_gfx942_hdim*_hip_test and attention_aux_gfx942_hdim*_hip_test:
  // every kernel takes this struct.
  EXPECT_EQ(sizeof(Gfx942AttnParams), 224u);
  EXPECT_EQ(sizeof(FlashFwdParams), 168u);
  EXPECT_EQ(kThreads, 8 * 64);
  // d128, the seed's CTA: three 16-row tiles per wave, two K tiles of 32
  // rows of 272 bytes and eight staged Q tiles: one CTA per CU (a second
  // would need 2 x 52224 bytes of the CU's 64 KiB); eight waves on four SIMDs
  // is two per SIMD: 512 / 2 = 256 VGPR + AGPR.
  EXPECT_EQ(kHdim128.rows(), 8 * 3 * 16);
  EXPECT_EQ(kHdim128.lds_bytes(), 2 * 32 * 272 + 8 * 16 * 272);
  EXPECT_EQ(kHdim128.lds_bytes(), 52224);
  EXPECT_GT(2 * kHdim128.lds_bytes(), kCuLdsBytes);
  EXPECT_EQ(kHdim128.max_regs(), 256);
  // d64: the same CTA at rows of 144 bytes, 27648 bytes: two CTAs per CU
  // fit (55296), so four waves per SIMD and 128 registers.
  EXPECT_EQ(kHdim64.rows(), 384);
  EXPECT_EQ(kHdim64.lds_bytes(), 2 * 32 * 144 + 8 * 16 * 144);
  EXPECT_EQ(kHdim64.lds_bytes(), 27648);
  EXPECT_LE(2 * kHdim64.lds_bytes(), kCuLdsBytes);
  EXPECT_GT(3 * kHdim64.lds_bytes(), kCuLdsBytes);
  EXPECT_EQ(kHdim64.waves_per_simd(), 4);
  EXPECT_EQ(kHdim64.max_regs(), 128);
  // d256: rows of 528 bytes; one staged Q tile per wave would be 8 x 16 x
  // 528 = 67584 bytes, over the CU's LDS by itself, so both tiles are in
  // registers and the wave owns two: 256 rows per CTA, 33792 bytes (the K
  // tiles), one CTA per CU (two would need 67584), 256 registers.
  EXPECT_EQ(kHdim256.rows(), 8 * 2 * 16);
  EXPECT_GT(8 * 16 * kHdim256.row_bytes(), kCuLdsBytes);
  EXPECT_EQ(kHdim256.q_stage_bytes(), 0);
  EXPECT_EQ(kHdim256.lds_bytes(), 2 * 32 * 528);
  EXPECT_EQ(kHdim256.lds_bytes(), 33792);
  EXPECT_GT(2 * kHdim256.lds_bytes(), kCuLdsBytes);
  EXPECT_EQ(kHdim256.max_regs(), 256);
  // Per lane, O alone: 3 x 4 tiles x 4 fp32 at d64, 3 x 8 x 4 at d128,
  // 2 x 16 x 4 at d256, and the register Q tiles head_dim / 8 VGPRs each.
  for (const FwdShape& s : {kHdim64, kHdim128, kHdim256}) {
    const int o = s.q_tiles_per_wave * s.n_tiles() * 4, q = s.reg_q_tiles * s.head_dim / 8;
    EXPECT_LT(o + q, s.max_regs()) << s.head_dim;
    EXPECT_LE(s.lds_bytes() * s.ctas_per_cu, kCuLdsBytes) << s.head_dim;
    EXPECT_EQ(ShapeOf(s.head_dim).head_dim, s.head_dim);
    EXPECT_EQ(KernelsOf(s.head_dim).head_dim, s.head_dim);
    EXPECT_EQ(MergeRowsPerBlock(s) * s.head_dim, kAuxThreads);
    EXPECT_EQ(s.rows() % MergeRowsPerBlock(s), 0);
  }
  // The transposes' LDS: 64 keys of padded rows.
  EXPECT_EQ(VtLdsBytes(kHdim64), 9216);
  EXPECT_EQ(VtLdsBytes(kHdim128), 17408);
  EXPECT_EQ(VtLdsBytes(kHdim256), 33792);
  EXPECT_STREQ(KernelsOf(64).fwd, "KsAttentionFwdBf16Hdim64Gfx942");
  EXPECT_STREQ(KernelsOf(256).merge, "KsAttentionMergeHdim256Gfx942");
}

struct Call {
  AttentionParams p;
  FlashFwdParams f;
};

Call Make(Layout layout, bool causal, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t skv,
          Rounding rounding = Rounding::kRtne, int64_t d = 128) {
  Call c;
  c.p.layout = layout;
  c.p.causal = causal;
  c.p.rounding = rounding;
  const bool bshd = layout == Layout::kBshd;
  const TensorDesc q{DType::kBf16, bshd ? std::vector<int64_t>{b, sq, hq, d} : std::vector<int64_t>{b, hq, sq, d}};
  const TensorDesc kv{DType::kBf16,
                      bshd ? std::vector<int64_t>{b, skv, hkv, d} : std::vector<int64_t>{b, hkv, skv, d}};
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
    AttentionLaunch l = PlanAttention(c.f, 128, false, kMi300xCus);
    EXPECT_STREQ(l.kernel, KernelsOf(128).fwd);
    EXPECT_STREQ(l.v_transpose, KernelsOf(128).v_transpose);
    EXPECT_STREQ(l.merge, KernelsOf(128).merge);
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
  AttentionLaunch l = PlanAttention(c.f, 128, false, kMi300xCus);
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
  EXPECT_EQ(ItemKvTiles(c.f, 384, 5, true), 96);
  EXPECT_EQ(ItemKvTiles(c.f, 384, 0, true), (383 + 1000) / 32 + 1);
  EXPECT_EQ(ItemKvTiles(c.f, 384, 0, false), 96);  // 3048 keys
  AttentionLaunch l = PlanAttention(c.f, 128, true, kMi300xCus);
  EXPECT_STREQ(l.kernel, KernelsOf(128).causal);
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
  AttentionLaunch l = PlanAttention(c.f, 128, true, kMi300xCus);
  EXPECT_EQ(l.params.q_blocks, 43);
  EXPECT_EQ(WorkItemAt(1216, 43, 32, 1).qb, 4);
  EXPECT_EQ(l.tail.cost_off, 60);
  EXPECT_FALSE(l.tail.on);
  EXPECT_EQ(l.fwd_grid.x, 1376u);
  // 4 heads: 172 items, all in one partial round, 304 / 172 = 1 CU each: off;
  // 2 heads: 86 items, 3 CUs each, the longest (block 42) 512 tiles: on.
  l = PlanAttention(Make(Layout::kBhsd, true, 1, 4, 4, 16384, 16384).f, 128, true, kMi300xCus);
  EXPECT_FALSE(l.tail.on);
  l = PlanAttention(Make(Layout::kBhsd, true, 1, 2, 2, 16384, 16384).f, 128, true, kMi300xCus);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.tail.cost_off, 512);
  EXPECT_EQ(l.params.splits, 3);
  EXPECT_EQ(l.fwd_grid.x, 86u * 3);
}

TEST(Gfx942AttentionLaunch, HeadDims64And256HaveTheirOwnTilingsKernelsAndSlots) {
  // d64: 384-row blocks at two CTAs per CU, 608 slots on 304 CUs. (2, 24,
  // 8192) is 1056 items: 1 full round of 608 and 448 left, 448 > 608 / 2, so
  // no idle slot for a second chunk of any: off.
  Call c = Make(Layout::kBshd, false, 2, 24, 24, 8192, 8192, Rounding::kRtne, 64);
  AttentionLaunch l = PlanAttention(c.f, 64, false, kMi300xCus);
  EXPECT_EQ(l.shape.head_dim, 64);
  EXPECT_EQ(l.params.head_dim, 64);
  EXPECT_STREQ(l.kernel, "KsAttentionFwdBf16Hdim64Gfx942");
  EXPECT_STREQ(l.v_transpose, "KsAttentionVTransposeHdim64Gfx942");
  EXPECT_STREQ(l.merge, "KsAttentionMergeHdim64Gfx942");
  EXPECT_EQ(l.params.q_blocks, 22);
  EXPECT_FALSE(l.tail.on);
  EXPECT_EQ(l.fwd_grid.x, 1056u);
  EXPECT_EQ(l.params.vt_head_stride, 64 * 8192);
  EXPECT_EQ(l.workspace.bytes, size_t{2} * 24 * 64 * 8192 * 2);
  // 1 x 8 heads x 11 blocks = 88 items on 608 slots: 6 chunks each (608 /
  // 88), 4096 keys = 128 tiles; the partials and the merge at d64.
  c = Make(Layout::kBhsd, false, 1, 8, 8, 4096, 4096, Rounding::kRtne, 64);
  l = PlanAttention(c.f, 64, false, kMi300xCus);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.params.splits, 6);
  EXPECT_EQ(l.fwd_grid.x, 88u * 6);
  EXPECT_EQ(l.merge_grid.x, 88u * 384 / 4);
  const size_t vt64 = size_t{8} * 64 * 4096 * 2;
  EXPECT_EQ(l.workspace.part_o, vt64);
  EXPECT_EQ(l.workspace.part_ml, vt64 + size_t{88} * 6 * 384 * 64 * 4);
  // The same shape at d128 has half the slots: 3 chunks each.
  EXPECT_EQ(PlanAttention(Make(Layout::kBhsd, false, 1, 8, 8, 4096, 4096).f, 128, false, kMi300xCus).params.splits, 3);

  // d256: 256-row blocks, one CTA per CU. (2, 24, 8192): 32 blocks x 48 =
  // 1536 items, 5 full rounds (1520) and 16 left: 19 chunks by the idle CUs,
  // bounded at kMaxSplits; 256 tiles each.
  c = Make(Layout::kBhsd, false, 2, 24, 24, 8192, 8192, Rounding::kRtz, 256);
  l = PlanAttention(c.f, 256, false, kMi300xCus);
  EXPECT_EQ(l.params.head_dim, 256);
  EXPECT_STREQ(l.kernel, "KsAttentionFwdBf16Hdim256Gfx942");
  EXPECT_EQ(l.params.q_blocks, 32);
  EXPECT_TRUE(l.tail.on);
  EXPECT_EQ(l.params.full_items, 1520);
  EXPECT_EQ(l.params.tail_items, 16);
  EXPECT_EQ(l.params.splits, kMaxSplits);
  EXPECT_EQ(l.fwd_grid.x, 1520u + 16 * kMaxSplits);
  EXPECT_EQ(l.merge_grid.x, 16u * 256);  // one row per merge block
  const size_t vt256 = size_t{2} * 24 * 256 * 8192 * 2;
  EXPECT_EQ(l.workspace.part_o, vt256);
  EXPECT_EQ(l.workspace.part_ml, vt256 + size_t{16} * kMaxSplits * 256 * 256 * 4);
  // Causal d256: the causal kernel, 256-row blocks in the tile count.
  c = Make(Layout::kBshd, true, 1, 2, 1, 1000, 1000, Rounding::kRtne, 256);
  l = PlanAttention(c.f, 256, true, kMi300xCus);
  EXPECT_STREQ(l.kernel, "KsAttentionFwdBf16CausalHdim256Gfx942");
  EXPECT_EQ(l.params.q_blocks, 4);
  EXPECT_EQ(ItemKvTiles(c.f, 256, 0, true), 8);  // rows 0..255 see keys up to 255
}

TEST(Gfx942AttentionLaunch, OnlyHeadDims64128And256) {
  AttentionParams p;
  const TensorDesc t{DType::kBf16, {1, 2, 64, 96}};
  ASSERT_TRUE(p.Validate(t, t, t).ok());
  EXPECT_EQ(Unsupported(p), "attention: the hip backend serves head_dim 64, 128 or 256 (got 96)");
  for (int64_t d : {64, 128, 256}) {
    const TensorDesc td{DType::kBf16, {1, 2, 64, d}};
    ASSERT_TRUE(p.Validate(td, td, td).ok());
    EXPECT_EQ(Unsupported(p), "") << d;
  }
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
