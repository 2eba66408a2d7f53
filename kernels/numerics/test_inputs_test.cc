#include "kernels/numerics/test_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace numerics {
namespace {

TEST(TestInputs, GaussianIsSeededAndHasTheRequestedMoments) {
  HostTensor a = GaussianBf16({64, 1024}, 7, 0.5, 2.0);
  HostTensor b = GaussianBf16({64, 1024}, 7, 0.5, 2.0);
  HostTensor c = GaussianBf16({64, 1024}, 8, 0.5, 2.0);
  EXPECT_EQ(a.storage(), b.storage());
  EXPECT_NE(a.storage(), c.storage());
  const std::vector<double> x = ToDoubles(a.view());
  double m = 0, v = 0;
  for (double e : x) m += e;
  m /= x.size();
  for (double e : x) v += (e - m) * (e - m);
  v /= x.size();
  EXPECT_NEAR(m, 0.5, 0.03);
  EXPECT_NEAR(std::sqrt(v), 2.0, 0.03);
}

// The long-tail input has the properties DESIGN §4 asks for, measured on the
// scores of the last queries (which see all keys).
TEST(TestInputs, LongTailShape) {
  LongTailOptions o;
  o.seq_q = 8;
  o.seq_kv = 4096;
  AttentionTensors in = LongTailAttention(o);
  ASSERT_EQ(in.q.shape(), (Shape{1, 1, 8, 128}));
  ASSERT_EQ(in.v.shape(), (Shape{1, 1, 4096, 128}));
  const std::vector<double> q = ToDoubles(in.q.view()), k = ToDoubles(in.k.view()), v = ToDoubles(in.v.view());
  double vmean = 0;
  for (double e : v) vmean += e;
  EXPECT_NEAR(vmean / v.size(), 1.0, 0.02);
  const double scale = 1 / std::sqrt(128.0);
  for (int64_t i = 0; i < 8; ++i) {
    std::vector<double> t(4096);
    for (int64_t j = 0; j < 4096; ++j) {
      double s = 0;
      for (int d = 0; d < 128; ++d) s += q[i * 128 + d] * k[j * 128 + d];
      t[j] = s * scale * M_LOG2E;
    }
    const double mx = *std::max_element(t.begin(), t.end());
    double total = 0, tail = 0;
    int blocks_far = 0;
    for (int64_t b = 0; b < 64; ++b) {
      const double bm = *std::max_element(t.begin() + b * 64, t.begin() + b * 64 + 64);
      if (bm < mx - 8) ++blocks_far;
    }
    const int64_t pos = 4096 - 8 + i;
    for (int64_t j = 0; j < 4096; ++j) {
      const double p = std::exp2(t[j] - mx);
      total += p;
      if (j != 0 && std::abs(j - pos) > 2 * o.window) tail += p;
    }
    std::printf("row %lld: sink %.2f binades from the max, far blocks %d/64, tail mass %.2f\n",
                static_cast<long long>(i), t[0] - mx, blocks_far, tail / total);
    EXPECT_GT(blocks_far, 32);          // most blocks lie > 8 binades below the row max
    EXPECT_GT(tail / total, 0.1);       // the tail carries real mass
    EXPECT_LT(tail / total, 0.9);       // and the dominant keys matter too
    EXPECT_GT(t[0], mx - 4);            // the sink is near the top
  }
}

}  // namespace
}  // namespace numerics
}  // namespace kernelserve
