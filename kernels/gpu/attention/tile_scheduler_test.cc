// The tile scheduler's pure functions against brute force over small shapes.
#include "kernels/gpu/attention/tile_scheduler.h"

#include <set>
#include <tuple>

#include "gtest/gtest.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace {

TEST(TileSchedulerTest, GridCoversEveryQueryRowOnce) {
  for (int seq_q : {1, 63, 64, 65, 128, 1000}) {
    for (int block_m : {64, 128}) {
      const TileGrid g = SingleTileGrid(seq_q, 3, 2, block_m);
      EXPECT_EQ(g.heads, 3);
      EXPECT_EQ(g.batch, 2);
      EXPECT_GE(g.m_blocks * block_m, seq_q);
      EXPECT_LT((g.m_blocks - 1) * block_m, seq_q);
    }
  }
}

TEST(TileSchedulerTest, EveryTileOnceLongestFirst) {
  const TileGrid g = SingleTileGrid(1000, 3, 2, 128);
  std::set<std::tuple<int, int, int>> seen;
  for (int z = 0; z < g.batch; ++z) {
    for (int y = 0; y < g.heads; ++y) {
      for (int x = 0; x < g.m_blocks; ++x) {
        const WorkTile t = SingleTileAt(x, y, z, g.m_blocks);
        EXPECT_EQ(t.m_block, g.m_blocks - 1 - x);
        EXPECT_EQ(t.head, y);
        EXPECT_EQ(t.batch, z);
        EXPECT_TRUE(seen.insert({t.m_block, t.head, t.batch}).second);
      }
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), g.m_blocks * g.heads * g.batch);
}

// The key tiles a query tile visits: up to the last key any of its rows sees
// (bottom-right aligned causal mask), none when no row sees a key.
TEST(TileSchedulerTest, KvBlocksMatchBruteForce) {
  for (bool causal : {false, true}) {
    for (int block_m : {64, 128}) {
      for (int block_n : {32, 64, 128}) {
        for (int seq_q : {1, 47, 128, 333}) {
          for (int seq_kv : {0, 1, 47, 128, 129, 333}) {
            const int offset = seq_kv - seq_q;
            for (int m0 = 0; m0 < seq_q; m0 += block_m) {
              int last_visible = -1;
              for (int i = m0; i < m0 + block_m; ++i) {
                for (int j = 0; j < seq_kv; ++j) {
                  if (!causal || j <= i + offset) last_visible = j > last_visible ? j : last_visible;
                }
              }
              const int want = last_visible < 0 ? 0 : last_visible / block_n + 1;
              EXPECT_EQ(KvBlocks(seq_kv, m0, block_m, block_n, offset, causal), want)
                  << "causal " << causal << " block " << block_m << "x" << block_n << " Sq " << seq_q << " Skv "
                  << seq_kv << " m0 " << m0;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
