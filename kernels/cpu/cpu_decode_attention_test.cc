// The cpu backend's decode attention over per-head KV pools against the fp64
// oracle, on fresh random inputs (the seed is printed; replay with
// KERNELSERVE_TEST_SEED). Tolerance as for bf16 attention (one bf16 rounding
// after fp32 accumulation): rel_rms < 1e-2, every element within one bf16
// step of the rounded oracle or 2e-3 of the largest output, >= 90% bit-equal.
// Outputs start poisoned (NaN bytes) and any non-finite output fails. Pool
// slots no request names hold NaN codes, so reading outside the page tables
// shows. The kernel visits keys in token order whatever the slots, so the same
// rows behind different page sizes and permutations, and runs with different
// thread counts, are bitwise equal.
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
#include "kernels/cpu/decode_test_inputs.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

using cpu_test::BitwiseEqual;
using cpu_test::DecodeProblem;
using cpu_test::MakeDecodeProblem;
using cpu_test::Paged;
using cpu_test::Scatter;
using cpu_test::Int32Tensor;
using cpu_test::FreshSeed;
using cpu_test::PoisonedBf16;

struct Result {
  HostTensor out;
  std::vector<double> ref;
};

void RunDecode(Backend& be, const DecodeProblem& pr, int64_t page_size, Rounding rounding, uint64_t perm_seed,
               bool with_oracle, Result* res) {
  const Paged pg = Scatter(pr, page_size, perm_seed);
  DecodeAttentionParams p;
  p.kv_scale = pr.kv_scale;
  p.rounding = rounding;
  const HostTensor* q_lens = pr.q_lens.empty() ? nullptr : &pg.q_lens;
  const absl::Status vst = p.Validate(pr.q.desc(), pg.pool.desc(), pr.hkv, pr.d, page_size, &pg.seq_lens,
                                      &pg.kv_indices, &pg.kv_indptr, q_lens);
  ASSERT_TRUE(vst.ok()) << vst;
  DecodeAttentionInputs in{pr.q.view(),          pg.pool.view(),      pg.seq_lens.view(),
                           pg.kv_indices.view(), pg.kv_indptr.view(), q_lens ? q_lens->view() : TensorView{}};
  res->out = PoisonedBf16(p.OutputDesc().shape);
  TensorView ov = res->out.view();
  const absl::Status st = be.DecodeAttention(0, p, in, ov);
  ASSERT_TRUE(st.ok()) << st;
  for (int64_t i = 0; i < res->out.num_elements(); ++i) {
    ASSERT_TRUE(std::isfinite(numerics::Bf16ToFloat(res->out.data<uint16_t>()[i]))) << "element " << i;
  }
  if (with_oracle) {
    auto ref = oracle::DecodeAttention(p, in);
    ASSERT_TRUE(ref.ok()) << ref.status();
    res->ref = *std::move(ref);
    for (double x : res->ref) ASSERT_TRUE(std::isfinite(x)) << "the oracle read a NaN slot";
  }
}

void ExpectMatchesOracle(const Result& r, Rounding rounding) {
  cpu_test::ExpectDecodeMatchesOracle(r.out, r.ref, rounding);
}

struct Case {
  int64_t b, q_len, hq, hkv, d;
  DType dt;
  std::vector<int32_t> seq_lens, q_lens;
  int64_t page_size;
  Rounding rounding;
};

TEST(CpuDecodeAttention, MatchesOracle) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  const Case cases[] = {
      // MHA, page 1, one token.
      {1, 1, 4, 4, 128, DType::kBf16, {70}, {}, 1, Rounding::kRtne},
      // GQA 4:1, bf16, page 16, ragged seq_lens and q_lens.
      {3, 4, 8, 2, 128, DType::kBf16, {300, 5, 64}, {4, 2, 1}, 16, Rounding::kRtne},
      // MQA, fp8 e4m3fn, page 1, q_len 8.
      {2, 8, 16, 1, 64, DType::kFp8E4M3Fn, {8, 129}, {}, 1, Rounding::kRtna},
      // GQA 2:1, fp8 e4m3fnuz, page 64, head_dim 256.
      {2, 3, 4, 2, 256, DType::kFp8E4M3Fnuz, {200, 3}, {3, 3}, 64, Rounding::kRtz},
      // fp8 e5m2, a page size that does not divide the lengths; 8 x 12 rows per KV head
      // give two query row blocks.
      {2, 8, 24, 2, 64, DType::kFp8E5M2, {77, 40}, {8, 5}, 7, Rounding::kRtne},
  };
  for (const Case& c : cases) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(absl::StrCat("B=", c.b, " q_len=", c.q_len, " Hq=", c.hq, " Hkv=", c.hkv, " D=", c.d, " ",
                              DTypeName(c.dt), " page=", c.page_size, " ", RoundingName(c.rounding),
                              " seed=", seed));
    const DecodeProblem pr = MakeDecodeProblem(c.b, c.q_len, c.hq, c.hkv, c.d, c.dt, c.seq_lens, c.q_lens, seed);
    Result r;
    RunDecode(*be, pr, c.page_size, c.rounding, seed ^ 0x5eed, true, &r);
    if (::testing::Test::HasFatalFailure()) return;
    ExpectMatchesOracle(r, c.rounding);
  }
}

TEST(CpuDecodeAttention, PageSizesPermutationsAndThreadsAreBitwiseEqual) {
  std::unique_ptr<Backend> all = CreateCpuBackend(0);
  std::unique_ptr<Backend> one = CreateCpuBackend(1);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  const DecodeProblem pr =
      MakeDecodeProblem(3, 2, 8, 2, 128, DType::kFp8E4M3Fn, {260, 100, 2}, {2, 1, 2}, seed);
  Result base;
  RunDecode(*all, pr, 1, Rounding::kRtne, seed, true, &base);
  if (::testing::Test::HasFatalFailure()) return;
  ExpectMatchesOracle(base, Rounding::kRtne);
  for (int64_t page : {1, 16, 64}) {
    SCOPED_TRACE(absl::StrCat("page_size=", page));
    Result r, serial;
    RunDecode(*all, pr, page, Rounding::kRtne, seed ^ (page + 1), false, &r);
    RunDecode(*one, pr, page, Rounding::kRtne, seed ^ (page + 2), false, &serial);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_TRUE(BitwiseEqual(r.out, base.out));
    EXPECT_TRUE(BitwiseEqual(serial.out, base.out));
  }
}

TEST(CpuDecodeAttention, RowsPastTheWindowAreZero) {
  std::unique_ptr<Backend> be = CreateCpuBackend(2);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  const int64_t q_len = 4, hq = 4, d = 64;
  const DecodeProblem pr = MakeDecodeProblem(2, q_len, hq, 2, d, DType::kBf16, {90, 3}, {1, 3}, seed);
  Result r;
  RunDecode(*be, pr, 16, Rounding::kRtne, seed, true, &r);
  if (::testing::Test::HasFatalFailure()) return;
  cpu_test::ExpectZeroRowsPastWindows(r.out, r.ref, q_len, hq * d, pr.q_lens);
  ExpectMatchesOracle(r, Rounding::kRtne);
}

// A new token that sees only the first key returns that key's V exactly
// (times kv_scale): the causal window is bottom-right aligned per request.
TEST(CpuDecodeAttention, FirstNewTokenOfAFreshRequestSeesOneKey) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  const int64_t d = 64, hkv = 2;
  const DecodeProblem pr = MakeDecodeProblem(1, 3, 4, hkv, d, DType::kBf16, {3}, {}, seed);
  Result r;
  RunDecode(*be, pr, 1, Rounding::kRtne, seed, true, &r);
  if (::testing::Test::HasFatalFailure()) return;
  for (int64_t h = 0; h < 4; ++h) {
    const uint16_t* v = reinterpret_cast<const uint16_t*>(pr.rows[0].data()) + (hkv + h / 2) * d;
    for (int64_t e = 0; e < d; ++e) {
      const float want = numerics::Bf16ToFloat(v[e]) * static_cast<float>(pr.kv_scale);
      ASSERT_EQ(numerics::Bf16ToFloat(r.out.data<uint16_t>()[h * d + e]), want) << "h=" << h << " e=" << e;
    }
  }
  ExpectMatchesOracle(r, Rounding::kRtne);
}

}  // namespace
}  // namespace kernelserve
