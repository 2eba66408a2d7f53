#include "common/block_cache.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// Blocks are tags here; the free function records what the cache gave back.
struct Freed {
  std::vector<std::pair<void*, size_t>> blocks;
};

void* Tag(int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 * (i + 1))); }

TEST(BlockCache, ServesABlockOnlyToItsOwnBucket) {
  Freed freed;
  BlockCache cache(1 << 20, [&](void* p, size_t b) { freed.blocks.emplace_back(p, b); });
  EXPECT_EQ(cache.Take(4096), nullptr);
  cache.Put(Tag(0), 4096);
  EXPECT_EQ(cache.Take(8192), nullptr);
  EXPECT_EQ(cache.cached_bytes(), 4096u);
  EXPECT_EQ(cache.Take(4096), Tag(0));
  EXPECT_EQ(cache.Take(4096), nullptr);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_TRUE(freed.blocks.empty());
}

TEST(BlockCache, FreesWhatDoesNotFitAndEverythingAtRelease) {
  Freed freed;
  {
    BlockCache cache(3 * 4096, [&](void* p, size_t b) { freed.blocks.emplace_back(p, b); });
    for (int i = 0; i < 4; ++i) cache.Put(Tag(i), 4096);
    ASSERT_EQ(freed.blocks.size(), 1u) << "the fourth block is over the limit";
    EXPECT_EQ(freed.blocks[0].first, Tag(3));
    EXPECT_EQ(cache.cached_bytes(), 3 * 4096u);
    cache.Release();
    EXPECT_EQ(freed.blocks.size(), 4u);
    EXPECT_EQ(cache.cached_bytes(), 0u);
    cache.Put(Tag(5), 8192);
  }
  ASSERT_EQ(freed.blocks.size(), 5u) << "the destructor frees what is cached";
  EXPECT_EQ(freed.blocks[4], std::make_pair(Tag(5), size_t{8192}));
}

TEST(BlockCache, BucketsArePowersOfTwoThenHugePages) {
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_EQ(BlockCache::Bucket(0, 512), 512u);
  EXPECT_EQ(BlockCache::Bucket(513, 512), 1024u);
  EXPECT_EQ(BlockCache::Bucket(1, 4096), 4096u);
  EXPECT_EQ(BlockCache::Bucket(kMiB + 1, 512), 2 * kMiB);
  EXPECT_EQ(BlockCache::Bucket(2 * kMiB, 4096), 2 * kMiB);
  EXPECT_EQ(BlockCache::Bucket(5 * kMiB, 4096), 6 * kMiB);
}

// Blocks taken and put back from several threads are each handed out once.
TEST(BlockCache, EachBlockHasOneOwnerAcrossThreads) {
  BlockCache cache(64 * 4096, [](void*, size_t) {});
  for (int i = 0; i < 8; ++i) cache.Put(Tag(i), 4096);
  std::vector<std::thread> threads;
  std::vector<std::vector<void*>> taken(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2; ++i) taken[t].push_back(cache.Take(4096));
    });
  }
  for (auto& th : threads) th.join();
  std::vector<void*> all;
  for (auto& v : taken) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(std::count(all.begin(), all.end(), nullptr), 0);
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

}  // namespace
}  // namespace kernelserve
