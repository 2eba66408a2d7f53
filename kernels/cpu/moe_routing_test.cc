#include "kernels/cpu/moe_routing.h"

#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_test_util.h"

namespace kernelserve {
namespace {

TEST(MoeRouting, GroupsPairsByExpertPaddedToBlocks) {
  const uint64_t seed = cpu_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::mt19937_64 rng(seed);
  for (int64_t block : {1, 4, 32}) {
    const int64_t tokens = 37, top_k = 5, experts = 11;
    std::vector<int32_t> ids(tokens * top_k);
    std::uniform_int_distribution<int32_t> ue(0, experts - 3);  // the last two experts get nothing
    for (int32_t& id : ids) id = ue(rng);
    auto rt = BuildMoeRouting(ids.data(), tokens, top_k, experts, block);
    ASSERT_TRUE(rt.ok()) << rt.status();
    EXPECT_EQ(rt->num_pairs, tokens * top_k);
    ASSERT_EQ(static_cast<int64_t>(rt->sorted_pairs.size()), rt->num_blocks() * block);
    std::vector<int> seen(tokens * top_k, 0);
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t lo = rt->expert_offset[e], hi = rt->expert_offset[e + 1];
      EXPECT_EQ((hi - lo) % block, 0);
      EXPECT_EQ(hi - lo, (rt->expert_count[e] + block - 1) / block * block);
      int32_t prev = -1;
      for (int64_t i = lo; i < hi; ++i) {
        EXPECT_EQ(rt->block_expert[i / block], e);
        const int32_t pr = rt->sorted_pairs[i];
        if (i - lo >= rt->expert_count[e]) {
          EXPECT_EQ(pr, -1);  // padding last
          continue;
        }
        ASSERT_GE(pr, 0);
        EXPECT_EQ(ids[pr], e);
        EXPECT_GT(pr, prev);  // token-major order kept
        prev = pr;
        ++seen[pr];
      }
    }
    for (int s : seen) EXPECT_EQ(s, 1);
    EXPECT_EQ(rt->expert_count[experts - 1], 0);
  }
}

TEST(MoeRouting, RejectsBadIdsAndSizes) {
  const std::vector<int32_t> ids = {0, 3, 1, 4};
  auto rt = BuildMoeRouting(ids.data(), 2, 2, 4, 8);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.status().message(), "moe routing: topk_ids[1,1] = 4 is not an expert in 0..3");
  EXPECT_EQ(BuildMoeRouting(ids.data(), 2, 2, 5, 0).status().code(), absl::StatusCode::kInvalidArgument);
  auto empty = BuildMoeRouting(nullptr, 0, 2, 5, 8);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->num_blocks(), 0);
}

}  // namespace
}  // namespace kernelserve
