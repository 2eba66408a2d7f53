// The dense-tail split's pure functions on the CPU. The merge (the inline
// function every chip's merge kernel runs): one row's scores and values split
// into chunks at random points, each chunk's (m, l, O) computed in fp32 the
// way the forwards leave them, merged, against an fp64 softmax over all the
// keys in one pass. The cost model and the forced split: the plans of the
// sm90 kernel's seed shapes, the bounds, the counts.
#include "kernels/gpu/attention/dense_tail.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace {

constexpr int kCols = 8;

struct Partials {
  std::vector<float> ml;  // (m, l) per chunk
  std::vector<float> o;   // kCols per chunk
};

// t: the row's scores in log2 units; v: kCols values per key; cuts: chunk
// boundaries (0 = c_0 <= c_1 <= ... = keys), empty chunks allowed.
Partials ChunkPartials(const std::vector<float>& t, const std::vector<float>& v, const std::vector<int>& cuts) {
  Partials p;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    float m = -std::numeric_limits<float>::infinity();
    for (int j = cuts[c]; j < cuts[c + 1]; ++j) m = std::fmax(m, t[j]);
    float l = 0.f;
    std::vector<float> o(kCols, 0.f);
    if (m != -std::numeric_limits<float>::infinity()) {
      for (int j = cuts[c]; j < cuts[c + 1]; ++j) {
        const float e = std::exp2(t[j] - m);
        l += e;
        for (int d = 0; d < kCols; ++d) o[d] += e * v[j * kCols + d];
      }
    }
    p.ml.push_back(m);
    p.ml.push_back(l);
    p.o.insert(p.o.end(), o.begin(), o.end());
  }
  return p;
}

std::vector<double> Fp64Softmax(const std::vector<float>& t, const std::vector<float>& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (float x : t) m = std::fmax(m, x);
  std::vector<double> o(kCols, 0.0);
  if (m == -std::numeric_limits<double>::infinity()) return o;
  double l = 0;
  for (size_t j = 0; j < t.size(); ++j) {
    const double e = std::exp2(static_cast<double>(t[j]) - m);
    l += e;
    for (int d = 0; d < kCols; ++d) o[d] += e * v[j * kCols + d];
  }
  for (double& x : o) x /= l;
  return o;
}

TEST(DenseTailMerge, RandomChunksMatchOneFp64Pass) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int trial = 0; trial < 500; ++trial) {
    const int keys = 1 + static_cast<int>(rng() % 700);
    const int chunks = 1 + static_cast<int>(rng() % 16);
    // Scores spread over several binades, some keys masked (-Inf), values
    // with a non-zero mean.
    const float spread = 1.f + static_cast<float>(rng() % 40);
    std::vector<float> t(keys), v(static_cast<size_t>(keys) * kCols);
    for (int j = 0; j < keys; ++j) {
      t[j] = rng() % 10 == 0 ? -std::numeric_limits<float>::infinity() : spread * normal(rng);
    }
    for (float& x : v) x = 0.5f + normal(rng);
    std::vector<int> cuts = {0};
    for (int c = 1; c < chunks; ++c) cuts.push_back(static_cast<int>(rng() % (keys + 1)));
    cuts.push_back(keys);
    std::sort(cuts.begin(), cuts.end());
    const Partials p = ChunkPartials(t, v, cuts);
    const std::vector<double> want = Fp64Softmax(t, v);
    double err = 0, norm = 0;
    for (int d = 0; d < kCols; ++d) {
      const float got = MergeChunks(chunks, p.ml.data(), 2, p.o.data() + d, kCols);
      ASSERT_FALSE(std::isnan(got)) << "trial " << trial << " column " << d;
      err += (got - want[d]) * (got - want[d]);
      norm += want[d] * want[d];
    }
    if (norm == 0) {
      EXPECT_EQ(err, 0) << "trial " << trial;  // every key masked: zeros
      continue;
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << "trial " << trial << ": " << keys << " keys, " << chunks << " chunks";
  }
}

TEST(DenseTailMerge, EmptyChunksAreSkippedAndNoKeyGivesZero) {
  const float inf = std::numeric_limits<float>::infinity();
  // Chunk 1 empty (its O poisoned: it must not be read into the sum).
  const float ml[6] = {3.f, 2.f, -inf, 0.f, 5.f, 1.f};
  const float o[3] = {4.f, std::nanf(""), 1.f};
  // (2^(3-5) * 4 + 1) / (2^(3-5) * 2 + 1) = 2 / 1.5
  EXPECT_FLOAT_EQ(MergeChunks(3, ml, 2, o, 1), 2.f / 1.5f);
  const float none[4] = {-inf, 0.f, -inf, 0.f};
  const float zeros[2] = {0.f, 0.f};
  EXPECT_EQ(MergeChunks(2, none, 2, zeros, 1), 0.f);
}

TEST(DenseTailMerge, OneChunkIsTheForwardsOwnNormalization) {
  const float ml[2] = {1.5f, 4.f};
  const float o[1] = {10.f};
  EXPECT_FLOAT_EQ(MergeChunks(1, ml, 2, o, 1), 2.5f);
}

// A chunk whose every score was NaN (a NaN query row) has m = -Inf and
// l = NaN: the row is NaN, as in the oracle, whether or not other chunks saw
// finite scores.
TEST(DenseTailMerge, AllNaNChunkMakesTheRowNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::nanf("");
  const float ml[4] = {-inf, nan, -inf, nan};
  const float o[2] = {0.f, 0.f};
  EXPECT_TRUE(std::isnan(MergeChunks(2, ml, 2, o, 1)));
  const float mixed[4] = {2.f, 1.f, -inf, nan};
  const float o2[2] = {3.f, 0.f};
  EXPECT_TRUE(std::isnan(MergeChunks(2, mixed, 2, o2, 1)));
}

TEST(DenseTailMerge, NaNValueInOneChunkPropagates) {
  const float ml[4] = {1.f, 2.f, 3.f, 1.f};
  const float o[2] = {std::nanf(""), 1.f};
  EXPECT_TRUE(std::isnan(MergeChunks(2, ml, 2, o, 1)));
}

TEST(DenseTailChunks, CoverTheTilesInOrderWithoutOverlap) {
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

constexpr DenseTailWeights kWeights{1, 2, 16, 2};

TEST(DenseTailPlan, TheModelsArithmetic) {
  // 3072 items on 132 slots: 36 left, 64 tiles: 3 chunks.
  DenseTailPlan d = PlanDenseTail(3072, 132, 64, kWeights);
  EXPECT_TRUE(d.on);
  EXPECT_EQ(d.splits, 3);
  EXPECT_EQ(d.cost_off, 64);
  EXPECT_EQ(d.cost_on, 22 + 1 + 2 + 2 * 1);
  EXPECT_EQ(d.ctas, 3036 + 108);
  // Short items: 4 tiles halve to 2, plus 1 + 2 + 1: no gain.
  d = PlanDenseTail(3072, 132, 4, kWeights);
  EXPECT_FALSE(d.on);
  EXPECT_EQ(d.cost_on, 2 + 1 + 2 + 1);
  EXPECT_EQ(d.ctas, 3072);
  // Heavier partials turn a split off.
  EXPECT_FALSE(PlanDenseTail(3072, 132, 64, DenseTailWeights{30, 2, 16, 2}).on);
  // No tail, no tiles: off.
  EXPECT_FALSE(PlanDenseTail(264, 132, 64, kWeights).on);
  EXPECT_FALSE(PlanDenseTail(100, 132, 0, kWeights).on);
}

TEST(DenseTailPlan, ForcedSplits) {
  DenseTailPlan d = ForceDenseTail(4, 132, 2, 3, kWeights);  // more chunks than tiles
  EXPECT_TRUE(d.on);
  EXPECT_EQ(d.splits, 3);
  EXPECT_EQ(d.tail_items, 4);
  EXPECT_EQ(d.ctas, 12);
  d = ForceDenseTail(264, 132, 64, 2, kWeights);  // whole waves: the last one
  EXPECT_TRUE(d.on);
  EXPECT_EQ(d.full_items, 132);
  EXPECT_EQ(d.tail_items, 132);
  d = ForceDenseTail(10, 132, 100, 0, kWeights);  // as many as allowed
  EXPECT_EQ(d.splits, 13);
  d = ForceDenseTail(10, 132, 1, 0, kWeights);  // one tile: nothing to split
  EXPECT_FALSE(d.on);
  EXPECT_EQ(d.ctas, 10);
}

}  // namespace
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
