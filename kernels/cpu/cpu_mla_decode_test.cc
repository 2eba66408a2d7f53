// The cpu backend's MLA decode against the fp64 oracle. Tolerance as for
// bf16 attention (one bf16 rounding after fp32 accumulation): rel_rms < 1e-2,
// each element within one bf16 step of the rounded oracle or 2e-3 of the
// largest output, >= 90% bit-equal. The backend is deterministic, so a pool
// holding the same rows in permuted slots must give bitwise the contiguous
// result, and repeated runs must be bitwise equal; different split counts
// differ only by fp32 rounding (at most one bf16 step, or 2e-3 of the
// largest output for values that cancel to near zero).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/api/backend.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_test_util.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

using cpu_test::BitwiseEqual;
using cpu_test::Int32Tensor;
using cpu_test::FreshSeed;
using cpu_test::PoisonedBf16;

struct Problem {
  int64_t b, q_len, heads, s;
  DType kv_dtype;
  std::vector<int32_t> seq_lens, q_lens;  // empty: none
  HostTensor q_lat, q_pe, kv;             // kv contiguous [B,S,576]
};

Problem MakeProblem(int64_t b, int64_t q_len, int64_t heads, int64_t s, DType kv_dtype,
                    std::vector<int32_t> seq_lens, std::vector<int32_t> q_lens, uint64_t seed) {
  Problem pr{b, q_len, heads, s, kv_dtype, std::move(seq_lens), std::move(q_lens), {}, {}, {}};
  pr.q_lat = numerics::GaussianBf16({b, q_len, heads, kMlaLatentDim}, seed);
  pr.q_pe = numerics::GaussianBf16({b, q_len, heads, kMlaRopeDim}, seed + 1);
  pr.kv = HostTensor(kv_dtype, {b, s, kMlaRowDim});
  numerics::SeededRng rng(seed + 2);
  // Rows of about N(0, 16) in FP8, so kv_scale = 0.25 gives unit-scale keys.
  for (int64_t i = 0; i < pr.kv.num_elements(); ++i) {
    pr.kv.data<uint8_t>()[i] = numerics::FloatToFp8(static_cast<float>(4 * rng.Normal()), kv_dtype);
  }
  return pr;
}

struct Result {
  HostTensor out;
  std::vector<double> ref;
};

// Runs the problem contiguous (page_size 0) or through a pool with the
// request's pages scattered by a random permutation.
void RunMla(Backend& be, const Problem& pr, int64_t page_size, int64_t num_splits, Rounding rounding,
         uint64_t perm_seed, bool with_oracle, Result* res) {
  MlaDecodeParams p;
  p.kv_scale = 0.25;
  p.num_splits = num_splits;
  p.rounding = rounding;
  HostTensor seq_lens, q_lens, kv_indices, kv_indptr, pool;
  const bool paged = page_size > 0;
  const bool has_seq = paged || !pr.seq_lens.empty();
  std::vector<int32_t> lens = pr.seq_lens;
  if (lens.empty()) lens.assign(pr.b, static_cast<int32_t>(pr.s));
  if (has_seq) seq_lens = Int32Tensor(lens);
  if (!pr.q_lens.empty()) q_lens = Int32Tensor(pr.q_lens);
  if (paged) {
    // Every request gets ceil(S/page) pages of a shared pool, in a random order.
    const int64_t pages_per_req = (pr.s + page_size - 1) / page_size;
    const int64_t num_pages = pr.b * pages_per_req + 3;  // a few unused pages
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(perm_seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    pool = HostTensor(pr.kv_dtype, {num_pages * page_size, kMlaRowDim});
    std::memset(pool.bytes(), 0x7F, pool.num_bytes());  // unused slots hold NaN codes
    std::vector<int32_t> indices, indptr{0};
    for (int64_t b = 0; b < pr.b; ++b) {
      for (int64_t g = 0; g < pages_per_req; ++g) {
        const int32_t page = perm[b * pages_per_req + g];
        indices.push_back(page);
        for (int64_t j = g * page_size; j < std::min(pr.s, (g + 1) * page_size); ++j) {
          std::memcpy(pool.bytes() + (page * page_size + j - g * page_size) * kMlaRowDim,
                      pr.kv.bytes() + (b * pr.s + j) * kMlaRowDim, kMlaRowDim);
        }
      }
      indptr.push_back(static_cast<int32_t>(indices.size()));
    }
    kv_indices = Int32Tensor(indices);
    kv_indptr = Int32Tensor(indptr);
  }
  const HostTensor& kv = paged ? pool : pr.kv;
  const absl::Status vst =
      p.Validate(pr.q_lat.desc(), pr.q_pe.desc(), kv.desc(), paged, paged ? page_size : 1,
                 has_seq ? &seq_lens : nullptr, paged ? &kv_indices : nullptr, paged ? &kv_indptr : nullptr,
                 pr.q_lens.empty() ? nullptr : &q_lens);
  ASSERT_TRUE(vst.ok()) << vst;
  MlaDecodeInputs in{pr.q_lat.view(), pr.q_pe.view(), kv.view(),
                     has_seq ? seq_lens.view() : TensorView{},
                     paged ? kv_indices.view() : TensorView{},
                     paged ? kv_indptr.view() : TensorView{},
                     pr.q_lens.empty() ? TensorView{} : q_lens.view()};
  res->out = PoisonedBf16(p.OutputDesc().shape);
  TensorView ov = res->out.view();
  const absl::Status st = be.MlaDecode(0, p, in, ov);
  ASSERT_TRUE(st.ok()) << st;
  for (int64_t i = 0; i < res->out.num_elements(); ++i) {
    ASSERT_TRUE(std::isfinite(numerics::Bf16ToFloat(res->out.data<uint16_t>()[i]))) << "element " << i;
  }
  if (with_oracle) {
    auto ref = oracle::MlaDecode(p, in);
    ASSERT_TRUE(ref.ok()) << ref.status();
    res->ref = *std::move(ref);
  }
}

void ExpectMatchesOracle(const Result& r, Rounding rounding) {
  cpu_test::ExpectDecodeMatchesOracle(r.out, r.ref, rounding);
}

TEST(CpuMlaDecode, ContiguousMatchesOracle) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  struct Case {
    int64_t b, q_len, heads, s;
    DType dt;
    std::vector<int32_t> seq_lens, q_lens;
    Rounding rounding;
  };
  const Case cases[] = {
      {1, 1, 16, 129, DType::kFp8E4M3Fn, {}, {}, Rounding::kRtne},
      {2, 3, 8, 300, DType::kFp8E4M3Fnuz, {300, 77}, {3, 2}, Rounding::kRtne},
      {3, 2, 4, 17, DType::kFp8E4M3Fn, {17, 2, 9}, {}, Rounding::kRtna},
      {1, 8, 128, 70, DType::kFp8E4M3Fn, {}, {}, Rounding::kRtz},
  };
  for (const Case& c : cases) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(absl::StrCat("B=", c.b, " q_len=", c.q_len, " H=", c.heads, " S=", c.s, " ",
                              DTypeName(c.dt), " ", RoundingName(c.rounding), " seed=", seed));
    const Problem pr = MakeProblem(c.b, c.q_len, c.heads, c.s, c.dt, c.seq_lens, c.q_lens, seed);
    Result r;
    RunMla(*be, pr, 0, 0, c.rounding, 0, true, &r);
    if (::testing::Test::HasFatalFailure()) return;
    ExpectMatchesOracle(r, c.rounding);
  }
}

TEST(CpuMlaDecode, PagedPermutedSlotsEqualContiguousBitwise) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  const Problem pr = MakeProblem(3, 2, 16, 260, DType::kFp8E4M3Fn, {260, 100, 3}, {2, 1, 2}, seed);
  for (int64_t splits : {0, 3}) {
    Result contiguous;
    RunMla(*be, pr, 0, splits, Rounding::kRtne, 0, true, &contiguous);
    if (::testing::Test::HasFatalFailure()) return;
    ExpectMatchesOracle(contiguous, Rounding::kRtne);
    for (int64_t page : {1, 16, 64}) {
      SCOPED_TRACE(absl::StrCat("splits=", splits, " page_size=", page));
      Result paged;
      RunMla(*be, pr, page, splits, Rounding::kRtne, seed ^ page, page == 16, &paged);
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_TRUE(BitwiseEqual(paged.out, contiguous.out));
      if (page == 16) ExpectMatchesOracle(paged, Rounding::kRtne);
    }
  }
}

TEST(CpuMlaDecode, RaggedQLensGiveZeroRows) {
  std::unique_ptr<Backend> be = CreateCpuBackend(2);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  const int64_t q_len = 4, heads = 8;
  const Problem pr = MakeProblem(2, q_len, heads, 90, DType::kFp8E4M3Fnuz, {90, 40}, {1, 3}, seed);
  Result r;
  RunMla(*be, pr, 0, 2, Rounding::kRtne, 0, true, &r);
  if (::testing::Test::HasFatalFailure()) return;
  cpu_test::ExpectZeroRowsPastWindows(r.out, r.ref, q_len, heads * kMlaLatentDim, pr.q_lens);
  ExpectMatchesOracle(r, Rounding::kRtne);
}

TEST(CpuMlaDecode, SplitCountsAgreeAndRunsAreDeterministic) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  const Problem pr = MakeProblem(2, 2, 16, 700, DType::kFp8E4M3Fn, {700, 333}, {}, seed);
  Result base;
  RunMla(*be, pr, 0, 1, Rounding::kRtne, 0, true, &base);
  if (::testing::Test::HasFatalFailure()) return;
  ExpectMatchesOracle(base, Rounding::kRtne);
  for (int64_t splits : {1, 2, 7}) {
    SCOPED_TRACE(absl::StrCat("splits=", splits));
    Result a, b;
    RunMla(*be, pr, 0, splits, Rounding::kRtne, 0, false, &a);
    RunMla(*be, pr, 0, splits, Rounding::kRtne, 0, false, &b);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_TRUE(BitwiseEqual(a.out, b.out));
    // One bf16 step, or for values that cancel to near zero 2e-3 of the largest output.
    double amax = 0;
    for (int64_t i = 0; i < base.out.num_elements(); ++i) {
      amax = std::max(amax, std::fabs(double{numerics::Bf16ToFloat(base.out.data<uint16_t>()[i])}));
    }
    int64_t differ = 0;
    for (int64_t i = 0; i < a.out.num_elements(); ++i) {
      const uint16_t x = a.out.data<uint16_t>()[i], y = base.out.data<uint16_t>()[i];
      const double gap = std::fabs(double{numerics::Bf16ToFloat(x)} - numerics::Bf16ToFloat(y));
      ASSERT_TRUE(cpu_test::Bf16UlpDistance(x, y) <= 1 || gap <= 2e-3 * amax) << "element " << i;
      differ += x != y;
    }
    EXPECT_LT(differ, a.out.num_elements() / 20);
  }
}

}  // namespace
}  // namespace kernelserve
