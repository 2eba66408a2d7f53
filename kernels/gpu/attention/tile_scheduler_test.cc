// The tile scheduler's pure functions against brute force over small shapes.
#include "kernels/gpu/attention/tile_scheduler.h"

#include <cstdint>
#include <functional>
#include <queue>
#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace {

// Every work item exactly once, for both orders, odd sizes and a last
// section smaller than the others.
TEST(TileSchedulerTest, EveryTileOnce) {
  for (int section : {0, 1, 2, 3, 4, 6, 7}) {
    const TileOrder o{9, 3, 2, section};
    std::set<std::tuple<int, int, int>> seen;
    for (int u = 0; u < TileCount(o); ++u) {
      const WorkTile t = TileAt(u, o);
      ASSERT_GE(t.m_block, 0);
      ASSERT_LT(t.m_block, o.m_blocks);
      ASSERT_GE(t.head, 0);
      ASSERT_LT(t.head, o.heads);
      ASSERT_GE(t.batch, 0);
      ASSERT_LT(t.batch, o.batch);
      EXPECT_TRUE(seen.insert({t.m_block, t.head, t.batch}).second) << "section " << section << " u " << u;
    }
    EXPECT_EQ(static_cast<int>(seen.size()), TileCount(o));
  }
}

// Without sections: one (head, batch) after another, its query tiles last
// first (the grid order of the kernel's earlier (x, y, z) grid).
TEST(TileSchedulerTest, UnsectionedOrderIsPerHeadLongestFirst) {
  const TileOrder o{8, 3, 2, 0};
  int u = 0;
  for (int b = 0; b < o.batch; ++b) {
    for (int h = 0; h < o.heads; ++h) {
      for (int x = 0; x < o.m_blocks; ++x, ++u) {
        const WorkTile t = TileAt(u, o);
        EXPECT_EQ(t.m_block, o.m_blocks - 1 - x);
        EXPECT_EQ(t.head, h);
        EXPECT_EQ(t.batch, b);
      }
    }
  }
}

// Sections: within one, query tiles never grow along the order and the
// section's pairs come together; the sections follow each other.
TEST(TileSchedulerTest, SectionsAreLongestFirst) {
  const TileOrder o{5, 4, 2, 3};  // 8 pairs: sections of 3, 3, 2
  int prev_m = o.m_blocks, prev_sec = 0;
  for (int u = 0; u < TileCount(o); ++u) {
    const WorkTile t = TileAt(u, o);
    const int hb = t.batch * o.heads + t.head;
    const int sec = hb / o.section;
    ASSERT_GE(sec, prev_sec) << u;
    if (sec != prev_sec) prev_m = o.m_blocks;
    EXPECT_LE(t.m_block, prev_m) << u;
    prev_m = t.m_block;
    prev_sec = sec;
  }
  // The first three items: the last query tile of the first section's pairs.
  for (int u = 0; u < 3; ++u) {
    const WorkTile t = TileAt(u, o);
    EXPECT_EQ(t.m_block, 4);
    EXPECT_EQ(t.batch * o.heads + t.head, u);
  }
  // The last section has two pairs.
  const WorkTile last = TileAt(TileCount(o) - 1, o);
  EXPECT_EQ(last.m_block, 0);
  EXPECT_EQ(last.batch * o.heads + last.head, 7);
}

TEST(TileSchedulerTest, CausalSectionKeepsKvWithinTheBudget) {
  // d128, 8192 keys: 4 MiB of K and V per head, 8 heads in 32 MiB.
  EXPECT_EQ(CausalSection(24, 2, 1, 8192, 128), 8);
  EXPECT_EQ(CausalSection(32, 1, 1, 16384, 128), 4);
  EXPECT_EQ(CausalSection(16, 1, 1, 32768, 128), 2);
  // GQA: four query heads per KV head share its bytes.
  EXPECT_EQ(CausalSection(32, 1, 4, 16384, 128), 16);
  // Never more than the pairs, never fewer than one.
  EXPECT_EQ(CausalSection(2, 1, 1, 64, 64), 2);
  EXPECT_EQ(CausalSection(8, 1, 1, 1 << 22, 256), 1);
}

// Greedy list scheduling (each CTA to the SM that frees first, as the
// hardware hands them out) of a causal (2, 24, 8192) d128 grid on 132 SMs, a
// CTA's time its key tiles: the sectioned order ends within 0.5 % of the
// perfect balance, the per-head order 3.9 % after it (its last head's
// longest tile starts near the end).
double Makespan(const TileOrder& o, int slots) {
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> free_at;
  for (int s = 0; s < slots; ++s) free_at.push(0);
  int64_t end = 0, total = 0;
  for (int u = 0; u < TileCount(o); ++u) {
    const int len = KvBlocks(o.m_blocks * 128, TileAt(u, o).m_block * 128, 128, 128, 0, true);
    const int64_t t = free_at.top() + len;
    free_at.pop();
    free_at.push(t);
    end = t > end ? t : end;
    total += len;
  }
  return static_cast<double>(end) / (static_cast<double>(total) / slots);
}

TEST(TileSchedulerTest, SectionedCausalOrderBalancesTheGrid) {
  const int section = CausalSection(24, 2, 1, 8192, 128);
  EXPECT_LT(Makespan(TileOrder{64, 24, 2, section}, 132), 1.005);
  EXPECT_GT(Makespan(TileOrder{64, 24, 2, 0}, 132), 1.03);
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
