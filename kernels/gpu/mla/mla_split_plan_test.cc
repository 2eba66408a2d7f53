// The split plan's properties, on the CPU (no GPU needed).
#include "kernels/gpu/mla/mla_split_plan.h"

#include <algorithm>
#include <cstdint>

#include "gtest/gtest.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace {

constexpr int kH200Sms = 132;

int64_t Tiles(int64_t max_seq) { return (max_seq + 63) / 64; }

// What every plan must satisfy.
void ExpectValid(const MlaSplitPlan& plan, int q_len, int heads, int64_t max_seq) {
  EXPECT_EQ(plan.row_groups, (q_len * heads + 63) / 64);
  EXPECT_GT(plan.chunk, 0);
  EXPECT_EQ(plan.chunk % 64, 0) << "chunk " << plan.chunk;
  EXPECT_GE(plan.splits, 1);
  EXPECT_LE(plan.splits, 1024);
  EXPECT_LE(plan.splits, Tiles(max_seq));
  EXPECT_GE(plan.splits * plan.chunk, max_seq) << "the splits cover the longest request";
  EXPECT_LT((plan.splits - 1) * plan.chunk, max_seq) << "no split is empty for the longest request";
}

TEST(PlanMlaSplits, EveryPlanCoversTheLongestRequestInWholeTiles) {
  for (int batch : {1, 2, 3, 8, 16, 32, 64, 200}) {
    for (int q_len : {1, 2, 4, 8}) {
      for (int heads : {1, 12, 16, 64, 128}) {
        for (int64_t max_seq : {1, 63, 64, 65, 300, 1000, 8192, 65536, 150001}) {
          for (int num_splits : {0, 1, 2, 7, 64, 1024}) {
            for (int sms : {1, 78, 132}) {
              SCOPED_TRACE(testing::Message() << "B " << batch << " q_len " << q_len << " H " << heads << " S "
                                              << max_seq << " splits " << num_splits << " SMs " << sms);
              ExpectValid(PlanMlaSplits(batch, q_len, heads, max_seq, num_splits, sms), q_len, heads, max_seq);
            }
          }
        }
      }
    }
  }
}

// A kernel whose CTA holds fewer rows launches more CTAs per split: its
// plan takes fewer splits for the same round of SMs, the row groups (the
// partials' layout) staying in 64 rows.
TEST(PlanMlaSplits, SmallerCtasPlanFewerSplits) {
  const MlaSplitPlan rows64 = PlanMlaSplits(1, 1, 64, 150000, 0, 304);
  const MlaSplitPlan rows16 = PlanMlaSplits(1, 1, 64, 150000, 0, 304, 16);
  ExpectValid(rows16, 1, 64, 150000);
  EXPECT_EQ(rows16.row_groups, rows64.row_groups);
  EXPECT_LT(rows16.splits, rows64.splits);
  EXPECT_LE(rows16.splits * 4, 304);
  // One CTA per split either way at 16 rows.
  const MlaSplitPlan a = PlanMlaSplits(1, 1, 16, 150000, 0, 304), b = PlanMlaSplits(1, 1, 16, 150000, 0, 304, 16);
  EXPECT_EQ(a.splits, b.splits);
}

TEST(PlanMlaSplits, Deterministic) {
  const MlaSplitPlan a = PlanMlaSplits(3, 4, 16, 12345, 0, kH200Sms);
  for (int i = 0; i < 10; ++i) {
    const MlaSplitPlan b = PlanMlaSplits(3, 4, 16, 12345, 0, kH200Sms);
    EXPECT_EQ(a.row_groups, b.row_groups);
    EXPECT_EQ(a.splits, b.splits);
    EXPECT_EQ(a.chunk, b.chunk);
  }
}

// An explicit num_splits is honoured: chunks of ceil(tiles / n) tiles, so
// at most n splits (fewer where the last ones would be empty), never more
// than one per tile, whatever the batch or SM count.
TEST(PlanMlaSplits, NumSplitsOverrideHonoured) {
  for (int64_t max_seq : {1, 64, 100, 640, 777, 65536}) {
    for (int n : {1, 2, 3, 4, 6, 7, 1024}) {
      SCOPED_TRACE(testing::Message() << "S " << max_seq << " n " << n);
      const int64_t tiles = Tiles(max_seq);
      const int64_t want_chunk = (tiles + std::min<int64_t>(n, tiles) - 1) / std::min<int64_t>(n, tiles) * 64;
      for (int batch : {1, 64}) {
        for (int sms : {1, 132}) {
          const MlaSplitPlan plan = PlanMlaSplits(batch, 4, 16, max_seq, n, sms);
          EXPECT_EQ(plan.chunk, want_chunk);
          EXPECT_LE(plan.splits, n);
        }
      }
    }
  }
  EXPECT_EQ(PlanMlaSplits(2, 4, 16, 777, 7, kH200Sms).splits, 7);  // 13 tiles: 2 per split
  EXPECT_EQ(PlanMlaSplits(2, 4, 16, 640, 6, kH200Sms).splits, 5);  // 10 tiles: 2 per split
  const MlaSplitPlan one = PlanMlaSplits(2, 4, 16, 1000, 1, kH200Sms);
  EXPECT_EQ(one.splits, 1);
  EXPECT_EQ(one.chunk, 1024);
}

// A grid that fills whole waves of the device already is never split
// (splitting adds waves, a start cost per CTA and the merge).
TEST(PlanMlaSplits, WholeWavesAreNotSplit) {
  // 132 requests x 1 row group; 66 x 2 row groups (q_len 8, H 16).
  EXPECT_EQ(PlanMlaSplits(132, 4, 16, 65536, 0, kH200Sms).splits, 1);
  EXPECT_EQ(PlanMlaSplits(66, 8, 16, 65536, 0, kH200Sms).splits, 1);
  EXPECT_EQ(PlanMlaSplits(264, 1, 16, 8192, 0, kH200Sms).splits, 1);
}

// One or two requests on an idle device are split to use it, into one wave
// at most.
TEST(PlanMlaSplits, SmallBatchesSplitIntoOneWave) {
  for (int batch : {1, 2}) {
    SCOPED_TRACE(batch);
    const MlaSplitPlan plan = PlanMlaSplits(batch, 4, 16, 150000, 0, kH200Sms);
    EXPECT_GT(plan.splits, 1);
    EXPECT_LE(static_cast<int64_t>(batch) * plan.row_groups * plan.splits, kH200Sms);
  }
  // Short sequences: one tile cannot be split.
  EXPECT_EQ(PlanMlaSplits(1, 1, 1, 64, 0, kH200Sms).splits, 1);
  EXPECT_EQ(PlanMlaSplits(1, 1, 1, 1, 0, kH200Sms).splits, 1);
}

// The plans of the seed's (B, S) table at H = 16, q_len = 4 on 132 SMs,
// pinned: a change of the cost model shows here (and in the benchmark).
TEST(PlanMlaSplits, SeedShapesOnTheH200) {
  struct Want {
    int batch;
    int64_t seq;
    int splits;
    int64_t chunk;
  };
  for (const Want& w : {Want{1, 150000, 131, 1152}, Want{2, 150000, 66, 2304}, Want{8, 8192, 16, 512},
                        Want{8, 32768, 16, 2048}, Want{8, 65536, 16, 4096}, Want{8, 150000, 33, 4608},
                        Want{16, 150000, 8, 18752}, Want{32, 8192, 4, 2048}}) {
    SCOPED_TRACE(testing::Message() << "(" << w.batch << ", " << w.seq << ")");
    const MlaSplitPlan plan = PlanMlaSplits(w.batch, 4, 16, w.seq, 0, kH200Sms);
    EXPECT_EQ(plan.row_groups, 1);
    EXPECT_EQ(plan.splits, w.splits);
    EXPECT_EQ(plan.chunk, w.chunk);
  }
}

// The RegA kernel's CTA class: the smallest of 16, 32 and 64 rows that holds
// every row of a request, whatever the split of q_len x H.
TEST(RegACtaRows, SmallestClassThatHoldsAllRows) {
  for (int64_t q_len = 1; q_len <= 8; ++q_len) {
    for (int64_t heads : {1, 2, 3, 4, 5, 8, 12, 16, 17, 32, 64, 128}) {
      SCOPED_TRACE(testing::Message() << "q_len " << q_len << " H " << heads);
      const int64_t rows = q_len * heads;
      EXPECT_EQ(RegACtaRows(q_len, heads), rows <= 16 ? 16 : rows <= 32 ? 32 : 64);
    }
  }
  EXPECT_EQ(RegACtaRows(1, 16), 16);
  EXPECT_EQ(RegACtaRows(2, 8), 16);
  EXPECT_EQ(RegACtaRows(1, 17), 32);
  EXPECT_EQ(RegACtaRows(2, 16), 32);
  EXPECT_EQ(RegACtaRows(1, 32), 32);
  EXPECT_EQ(RegACtaRows(3, 11), 64);
  EXPECT_EQ(RegACtaRows(4, 16), 64);
  EXPECT_EQ(RegACtaRows(1, 128), 64);
}

// The plans of a `cta_rows` CTA at q_len x H 16 are those of 64-row CTAs at
// the shapes (one CTA per request and split either way).
void ExpectSameAsSixtyFourRowPlans(int q_len, int cta_rows) {
  for (int64_t seq : {8192, 65536, 150000}) {
    for (int batch : {1, 8, 16}) {
      SCOPED_TRACE(testing::Message() << "(" << batch << ", " << seq << ") q_len " << q_len);
      const MlaSplitPlan a = PlanMlaSplits(batch, q_len, 16, seq, 0, kH200Sms, cta_rows);
      const MlaSplitPlan b = PlanMlaSplits(batch, q_len, 16, seq, 0, kH200Sms);
      ExpectValid(a, q_len, 16, seq);
      EXPECT_EQ(a.splits, b.splits);
      EXPECT_EQ(a.chunk, b.chunk);
    }
  }
}

TEST(PlanMlaSplits, SixteenRowPlansOnTheH200) {
  ExpectSameAsSixtyFourRowPlans(1, 16);
  EXPECT_EQ(PlanMlaSplits(8, 1, 16, 65536, 0, kH200Sms, 16).splits, 16);   // 128 CTAs, one wave
  EXPECT_EQ(PlanMlaSplits(8, 1, 16, 150000, 0, kH200Sms, 16).splits, 33);  // 264 CTAs, two whole waves
}

TEST(PlanMlaSplits, ThirtyTwoRowPlansOnTheH200) {
  ExpectSameAsSixtyFourRowPlans(2, 32);
  EXPECT_EQ(PlanMlaSplits(8, 2, 16, 65536, 0, kH200Sms, 32).splits, 16);
  EXPECT_EQ(PlanMlaSplits(8, 2, 16, 150000, 0, kH200Sms, 32).splits, 33);
}

}  // namespace
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
