// The gfx942 MLA decode launch on the CPU: grid, split plan, merge and
// workspace for the shapes the kernel serves.
#include "kernels/gpu/arch/gfx942/mla/mla_gfx942_launch.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/launch_test_fixtures.h"
#include "kernels/gpu/mla/mla_decode_args.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace gfx942 {
namespace {

constexpr int kMi300xCus = 304;

using gpu_test::FakeAddr;

struct Contiguous {
  MlaDecodeParams p;
  MlaDecodeInputs in;
  Contiguous(int64_t b, int64_t q_len, int64_t h, int64_t s, int64_t splits) {
    p.num_splits = splits;
    const TensorDesc q{DType::kBf16, {b, q_len, h, kMlaLatentDim}}, pe{DType::kBf16, {b, q_len, h, kMlaRopeDim}};
    const TensorDesc kv{DType::kFp8E4M3Fnuz, {b, s, kMlaRowDim}};
    const absl::Status st = p.Validate(q, pe, kv, false, 1, nullptr, nullptr, nullptr, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    in.q_lat = TensorView{q, FakeAddr(0x1000)};
    in.q_pe = TensorView{pe, FakeAddr(0x2000)};
    in.kv = TensorView{kv, FakeAddr(0x3000)};
  }
};

// The code-object check (mla_gfx942_hip_test) holds the kernel's argument
// segment to 136 bytes and its LDS to 18944: the host passes that struct
// and the kernel states that LDS.
TEST(Gfx942MlaLaunch, TheFiguresTheCodeObjectIsHeldTo) {
  EXPECT_EQ(sizeof(KParams), 136u);
  EXPECT_EQ(kLdsBytes, 18944);
  EXPECT_EQ(kThreads, 8 * 64);  // eight wave64s: 16 query rows x 256 columns each
  EXPECT_EQ(kRows % 16, 0);
  EXPECT_EQ(kTok % kTileTok, 0);
}

// The position CTA (mla_decode_pos_gfx942_hip_test holds its LDS to 57088):
// four consumers of 16 tokens make its 64-token tile, one CTA per CU.
TEST(Gfx942MlaLaunch, TheFiguresThePositionCodeObjectIsHeldTo) {
  EXPECT_EQ(kPosRows, 16);
  EXPECT_EQ(kPosConsumers * 16, kPosTileTok);
  EXPECT_EQ(kTok % kPosTileTok, 0);  // a split's chunk holds whole tiles
  EXPECT_EQ(kPosTileBytes, 64 * 592);
  EXPECT_EQ(kPosStatsBytes, 4 * 16 * 2 * 4);
  EXPECT_EQ(kPosQBytes, 16 * (576 * 2 + 16));
  EXPECT_EQ(kPosLdsBytes, 57088);
  EXPECT_LE(kPosLdsBytes, 64 * 1024);
  EXPECT_GT(2 * kPosLdsBytes, 64 * 1024);  // one CTA per CU, as the register budget says
  // The producers move a tile in whole 16-byte pieces; a combine round's
  // three partial quarters fit over the tile.
  EXPECT_EQ(64 * 576 / 16 % (kThreads - kPosConsumers * 64), 0);
  EXPECT_LE(3 * 16 * 128 * 4, kPosTileBytes);
  EXPECT_EQ(kRows % kPosRows, 0);  // a position CTA's rows lie in one 64-row partial group
}

// The CTA choice: the position CTA below q_len 4; the window CTA at q_len
// 4..8 up to half the CUs of CTAs per split (the seed's 152 of 304).
TEST(Gfx942MlaLaunch, ChooseCtaByQLenAndTheWindowCap) {
  for (int q_len : {1, 2, 3}) {
    for (int batch : {1, 8, 32, 200}) EXPECT_EQ(ChooseCta(batch, q_len, 16, kMi300xCus), Cta::kPosition) << q_len;
  }
  // q_len 4, H 16: one 64-row group per request.
  EXPECT_EQ(ChooseCta(1, 4, 16, kMi300xCus), Cta::kWindow);
  EXPECT_EQ(ChooseCta(152, 4, 16, kMi300xCus), Cta::kWindow);
  EXPECT_EQ(ChooseCta(153, 4, 16, kMi300xCus), Cta::kPosition);
  // q_len 8, H 16: two groups.
  EXPECT_EQ(ChooseCta(76, 8, 16, kMi300xCus), Cta::kWindow);
  EXPECT_EQ(ChooseCta(77, 8, 16, kMi300xCus), Cta::kPosition);
  // q_len 8, H 8: one group. The cap scales with the CUs.
  EXPECT_EQ(ChooseCta(152, 8, 8, kMi300xCus), Cta::kWindow);
  EXPECT_EQ(ChooseCta(40, 4, 16, 80), Cta::kWindow);
  EXPECT_EQ(ChooseCta(41, 4, 16, 80), Cta::kPosition);
}

TEST(Gfx942MlaLaunch, PositionCtaGridSplitsAndPartials) {
  // q_len 3 x 16 heads = 48 rows: three position CTAs per request, one
  // 64-row partial group.
  Contiguous c(8, 3, 16, 8192, 4);
  DecodeLaunch l = PlanDecode(c.p, c.in, FakeAddr(0x4000), kMi300xCus);
  EXPECT_EQ(l.cta, Cta::kPosition);
  EXPECT_STREQ(l.kernel, kDecodePosKernel);
  EXPECT_EQ(l.grid.x, 4u);
  EXPECT_EQ(l.grid.y, 3u);
  EXPECT_EQ(l.grid.z, 8u);
  EXPECT_EQ(l.params.row_groups, 1);  // the merge's and the workspace's groups of 64
  EXPECT_EQ(l.params.rows, 48);
  ASSERT_TRUE(l.merge);
  EXPECT_EQ(l.merge_grid.x, 48u);
  EXPECT_EQ(l.workspace_bytes, static_cast<size_t>(8 * 1 * 4 * kRows) * (kDL + 2) * sizeof(float));
  // The window CTA at q_len 4 on the same batch.
  Contiguous w(8, 4, 16, 8192, 4);
  l = PlanDecode(w.p, w.in, FakeAddr(0x4000), kMi300xCus);
  EXPECT_EQ(l.cta, Cta::kWindow);
  EXPECT_STREQ(l.kernel, kDecodeKernel);
  EXPECT_EQ(l.grid.y, 1u);
}

TEST(Gfx942MlaLaunch, PositionCtaPlansItsSplitsOverItsOwnCtas) {
  // One request, q_len 1, H 16: one position CTA per split, the CUs filled
  // once; at H 64 (four position CTAs per split) a quarter as many splits.
  Contiguous one(1, 1, 16, 150000, 0), wide(1, 1, 64, 150000, 0);
  const DecodeLaunch a = PlanDecode(one.p, one.in, FakeAddr(0x4000), kMi300xCus);
  const DecodeLaunch b = PlanDecode(wide.p, wide.in, FakeAddr(0x4000), kMi300xCus);
  EXPECT_EQ(a.cta, Cta::kPosition);
  EXPECT_EQ(b.cta, Cta::kPosition);
  EXPECT_EQ(b.grid.y, 4u);
  EXPECT_LE(a.grid.x * a.grid.y * a.grid.z, static_cast<unsigned>(kMi300xCus));
  EXPECT_LE(b.grid.x * b.grid.y * b.grid.z, static_cast<unsigned>(kMi300xCus));
  EXPECT_GT(a.grid.x, 2 * b.grid.x);
  // Fixed at plan time: planned again, the same kernel, grid and chunk.
  const DecodeLaunch again = PlanDecode(wide.p, wide.in, FakeAddr(0x4000), kMi300xCus);
  EXPECT_STREQ(again.kernel, b.kernel);
  EXPECT_EQ(again.grid.x, b.grid.x);
  EXPECT_EQ(again.params.chunk, b.params.chunk);
}

TEST(Gfx942MlaLaunch, OneSplitHasNoMergeAndNoWorkspace) {
  Contiguous c(3, 1, 16, 100, 1);
  DecodeLaunch l = PlanDecode(c.p, c.in, FakeAddr(0x4000), kMi300xCus);
  EXPECT_EQ(l.grid.x, 1u);
  EXPECT_EQ(l.grid.y, 1u);
  EXPECT_EQ(l.grid.z, 3u);
  EXPECT_FALSE(l.merge);
  EXPECT_EQ(l.workspace_bytes, 0u);
  SetWorkspace(l, FakeAddr(0x9000));
  EXPECT_EQ(l.params.part_o, nullptr);
  EXPECT_EQ(l.params.part_ml, nullptr);
  EXPECT_EQ(l.params.splits, 1);
  EXPECT_EQ(l.params.out, FakeAddr(0x4000));
}

TEST(Gfx942MlaLaunch, RequestedSplitsGridMergeAndWorkspace) {
  // q_len 8 x 16 heads = 128 rows: two groups of 64.
  Contiguous c(2, 8, 16, 8192, 4);
  DecodeLaunch l = PlanDecode(c.p, c.in, FakeAddr(0x4000), kMi300xCus);
  EXPECT_EQ(l.grid.x, 4u);
  EXPECT_EQ(l.grid.y, 2u);
  EXPECT_EQ(l.grid.z, 2u);
  EXPECT_EQ(l.params.chunk, 2048);
  EXPECT_EQ(l.params.chunk % kTileTok, 0);
  ASSERT_TRUE(l.merge);
  EXPECT_EQ(l.merge_grid.x, 128u);
  EXPECT_EQ(l.merge_grid.y, 2u);
  const int64_t partial_rows = 2 * 2 * 4 * kRows;
  EXPECT_EQ(l.workspace_bytes, static_cast<size_t>(partial_rows) * (kDL + 2) * sizeof(float));
  SetWorkspace(l, FakeAddr(0x10000));
  EXPECT_EQ(l.params.part_o, FakeAddr(0x10000));
  EXPECT_EQ(l.params.part_ml, static_cast<float*>(FakeAddr(0x10000)) + partial_rows * kDL);
}

TEST(Gfx942MlaLaunch, PlannedSplitsFillTheCusOnceAndCoverTheSequence) {
  // One long request: the plan splits it over the CUs in a single round.
  Contiguous c(1, 1, 16, 150000, 0);
  const DecodeLaunch l = PlanDecode(c.p, c.in, FakeAddr(0x4000), kMi300xCus);
  EXPECT_GT(l.grid.x, 1u);
  EXPECT_LE(l.grid.x * l.grid.y * l.grid.z, static_cast<unsigned>(kMi300xCus));
  EXPECT_GE(static_cast<int64_t>(l.grid.x) * l.params.chunk, 150000);
  EXPECT_LT(static_cast<int64_t>(l.grid.x - 1) * l.params.chunk, 150000);
  EXPECT_TRUE(l.merge);
  // The same call planned again is the same plan (fixed at plan time).
  const DecodeLaunch again = PlanDecode(c.p, c.in, FakeAddr(0x4000), kMi300xCus);
  EXPECT_EQ(again.grid.x, l.grid.x);
  EXPECT_EQ(again.params.chunk, l.params.chunk);
}

TEST(Gfx942MlaLaunch, PagedRaggedPassesThePoolAndTheWindows) {
  const gpu_test::MlaPagedRaggedCall c(4, 12, 4, 2);
  ASSERT_TRUE(c.validated.ok()) << c.validated;
  const MlaDecodeParams& p = c.p;
  const MlaDecodeInputs& in = c.in;
  const DecodeLaunch l = PlanDecode(p, in, FakeAddr(0x4000), kMi300xCus);
  EXPECT_EQ(l.params.paged, 1);
  EXPECT_EQ(l.params.page_size, 8);
  EXPECT_EQ(l.params.kv_seq, 0);
  EXPECT_EQ(l.params.seq_lens, in.seq_lens.data);
  EXPECT_EQ(l.params.kv_indices, in.kv_indices.data);
  EXPECT_EQ(l.params.kv_indptr, in.kv_indptr.data);
  EXPECT_EQ(l.params.q_lens, in.q_lens.data);
  EXPECT_EQ(l.params.rows, 48);
  EXPECT_EQ(l.grid.y, 1u);  // 48 rows: one group
  EXPECT_EQ(l.grid.z, 2u);
}

}  // namespace
}  // namespace gfx942
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
