#include "kernels/gpu/decode_attention/decode_split_plan.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/gpu/decode_attention/decode_attention_params.h"

namespace kernelserve {
namespace gpu {
namespace decode {
namespace {

// Every split holds a key of the longest request, the chunks cover it, and
// the grid's y extent stays in range.
void ExpectCovers(const DecodeSplitPlan &plan, int heads_kv, int64_t max_seq) {
  EXPECT_GE(plan.splits, 1);
  EXPECT_EQ(plan.chunk % kStepTokens, 0);
  EXPECT_GE(plan.splits * plan.chunk, max_seq);
  EXPECT_LT((plan.splits - 1) * plan.chunk, max_seq);
  EXPECT_LE(static_cast<int64_t>(plan.splits) * heads_kv, 65535);
}

TEST(DecodeSplitPlan, SmallBatchFillsTheSms) {
  // B=1, Hkv=8, q_len 1 x group 4: 8 CTAs per split; 132 SMs x 2 CTAs.
  const DecodeSplitPlan plan = PlanDecodeSplits(1, 8, 4, 128, 32768, 132, 2);
  ExpectCovers(plan, 8, 32768);
  EXPECT_EQ(plan.mt, 1);
  EXPECT_EQ(plan.row_groups, 1);
  EXPECT_GE(plan.splits * 8, 132);      // at least one CTA per SM
  EXPECT_LE(plan.splits * 8, 132 * 2);  // no more than one wave
}

TEST(DecodeSplitPlan, LargeBatchDoesNotSplit) {
  const DecodeSplitPlan plan = PlanDecodeSplits(256, 8, 4, 128, 4096, 132, 2);
  ExpectCovers(plan, 8, 4096);
  EXPECT_EQ(plan.splits, 1);
}

TEST(DecodeSplitPlan, RowsPickTheMTiles) {
  EXPECT_EQ(PlanDecodeSplits(1, 8, 16, 128, 100, 132, 2).mt, 1);
  const DecodeSplitPlan two = PlanDecodeSplits(1, 8, 32, 128, 100, 132, 2);
  EXPECT_EQ(two.mt, 2);
  EXPECT_EQ(two.row_groups, 1);
  const DecodeSplitPlan d256 = PlanDecodeSplits(1, 8, 32, 256, 100, 132, 2);
  EXPECT_EQ(d256.mt, 1);
  EXPECT_EQ(d256.row_groups, 2);
  EXPECT_EQ(PlanDecodeSplits(1, 1, 64, 64, 100, 132, 2).row_groups, 2);
  EXPECT_EQ(PlanDecodeSplits(1, 1, 33, 64, 100, 132, 2).row_groups, 2);
}

TEST(DecodeSplitPlan, CoversEveryLength) {
  for (int64_t s : {1, 2, 63, 64, 65, 1000, 4096, 32767, 32768, 1 << 20}) {
    for (int heads_kv : {1, 8, 300}) {
      SCOPED_TRACE(testing::Message() << "max_seq " << s << " heads_kv " << heads_kv);
      ExpectCovers(PlanDecodeSplits(1, heads_kv, 4, 128, s, 132, 2), heads_kv, s);
      ExpectCovers(PlanDecodeSplits(7, heads_kv, 8, 64, s, 1, 1), heads_kv, s);
    }
  }
}

}  // namespace
}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve
