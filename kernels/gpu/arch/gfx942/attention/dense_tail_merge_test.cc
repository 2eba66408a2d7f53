// The dense-tail merge (the inline function the merge kernels run) on
// the CPU: one row's scores and values split into chunks at random points,
// each chunk's (m, l, O) computed in fp32 the way the forward leaves them,
// merged, against an fp64 softmax over all the keys in one pass.
#include "kernels/gpu/arch/gfx942/attention/dense_tail_merge.h"

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
namespace gfx942 {
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

}  // namespace
}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
