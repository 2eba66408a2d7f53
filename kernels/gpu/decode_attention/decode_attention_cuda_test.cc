// Decode attention over per-head KV pools on the GPU, through the CUDA
// backend (Backend::DecodeAttention, what the server and kernelctl call),
// against the fp64 oracle on fresh random inputs (the seed is printed;
// replay with KERNELSERVE_TEST_SEED). Pages are scattered over the pool in a
// random order and every slot no request names holds NaN codes, so a read
// outside the page tables shows. Outputs start poisoned (NaN bytes) and a
// non-finite output where the oracle is finite fails. Tolerance as for the
// bf16 attention kernels (P is rounded to bf16 for the tensor cores):
// rel_rms < 5e-3 and no element more than two bf16 steps from the rounded
// oracle unless within 2e-3 of the largest output. Skips without a GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/api/backend.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_test_util.h"
#include "kernels/cpu/decode_test_inputs.h"
#include "kernels/cpu/oracle.h"
#include "kernels/gpu/decode_attention/decode_attention.h"
#include "kernels/gpu/gpu_backend.h"
#include "kernels/gpu/gpu_test_util.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

using cpu_test::DecodeProblem;
using cpu_test::MakeDecodeProblem;
using cpu_test::Paged;
using cpu_test::Scatter;
using gpu_test::DeviceTensor;

struct Case {
  int64_t b, q_len, hq, hkv, d;
  DType dt;
  std::vector<int32_t> seq_lens, q_lens;
  int64_t page_size;
  Rounding rounding;
};

std::string CaseName(const Case &c) {
  return absl::StrCat("B=", c.b, " q_len=", c.q_len, " Hq=", c.hq, " Hkv=", c.hkv, " D=", c.d, " ", DTypeName(c.dt),
                      " page=", c.page_size, " ", RoundingName(c.rounding), c.q_lens.empty() ? "" : " q_lens");
}

struct GpuRun {
  DecodeAttentionParams p;
  HostTensor out;
  std::vector<double> ref;
};

// Validates on host copies, runs on device copies through `be` (outputs
// poisoned first) and, with `oracle`, computes the fp64 reference.
void RunOnGpu(Backend &be, const DecodeProblem &pr, const Paged &pg, int64_t page_size, Rounding rounding, bool oracle,
              GpuRun *r) {
  r->p = DecodeAttentionParams{};
  r->p.kv_scale = pr.kv_scale;
  r->p.rounding = rounding;
  const HostTensor *q_lens = pr.q_lens.empty() ? nullptr : &pg.q_lens;
  const absl::Status vst = r->p.Validate(pr.q.desc(), pg.pool.desc(), pr.hkv, pr.d, page_size, &pg.seq_lens,
                                         &pg.kv_indices, &pg.kv_indptr, q_lens);
  ASSERT_TRUE(vst.ok()) << vst;
  DeviceTensor q(pr.q), pool(pg.pool), seq_lens(pg.seq_lens), indices(pg.kv_indices), indptr(pg.kv_indptr);
  DeviceTensor qls;
  if (q_lens != nullptr) qls = DeviceTensor(*q_lens);
  DeviceTensor out(r->p.OutputDesc());
  KS_CUDA_OK(out.Fill(0xFF));
  DecodeAttentionInputs in{q.view(),       pool.view(),   seq_lens.view(),
                           indices.view(), indptr.view(), q_lens ? qls.view() : TensorView{}};
  TensorView ov = out.view();
  const absl::Status st = be.DecodeAttention(0, r->p, in, ov);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(be.Synchronize(0).ok());
  r->out = out.ToHost();
  if (oracle) {
    DecodeAttentionInputs host_in{pr.q.view(),          pg.pool.view(),      pg.seq_lens.view(),
                                  pg.kv_indices.view(), pg.kv_indptr.view(), q_lens ? q_lens->view() : TensorView{}};
    auto ref = oracle::DecodeAttention(r->p, host_in);
    ASSERT_TRUE(ref.ok()) << ref.status();
    r->ref = *std::move(ref);
  }
}

void ExpectMatches(const GpuRun &r, const std::string &name) {
  const cpu_test::Bf16Comparison cmp = cpu_test::CompareBf16(r.out, r.ref, r.p.rounding, /*max_ulp=*/2);
  std::printf("  %-70s rel_rms %.3e exact %.4f\n", name.c_str(), cmp.rel_rms,
              static_cast<double>(cmp.exact) / static_cast<double>(cmp.n));
  EXPECT_EQ(cmp.nonfinite, 0);
  EXPECT_LT(cmp.rel_rms, 5e-3);
  EXPECT_EQ(cmp.far, 0) << cmp.first_far;
}

class DecodeAttentionCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KS_SKIP_WITHOUT_CUDA();
    auto be = CreateCudaBackend();
    ASSERT_TRUE(be.ok()) << be.status();
    be_ = *std::move(be);
  }
  std::unique_ptr<Backend> be_;
};

TEST_F(DecodeAttentionCudaTest, MatchesOracle) {
  const Case cases[] = {
      // MHA (GQA 1), bf16, page 1, one new token, a length-1 request.
      {3, 1, 4, 4, 128, DType::kBf16, {70, 1, 129}, {}, 1, Rounding::kRtne},
      // GQA 4, bf16, page 16, ragged seq_lens and q_lens, q_len 4 (16 rows).
      {3, 4, 8, 2, 128, DType::kBf16, {300, 5, 64}, {4, 2, 1}, 16, Rounding::kRtne},
      // GQA 8, q_len 8: 64 rows per KV head (two 32-row groups).
      {2, 8, 16, 2, 64, DType::kFp8E4M3Fn, {8, 1000}, {}, 1, Rounding::kRtna},
      // GQA 8, head_dim 256: 16-row groups.
      {2, 3, 16, 2, 256, DType::kFp8E4M3Fn, {200, 3}, {3, 2}, 16, Rounding::kRtz},
      {2, 2, 8, 1, 256, DType::kBf16, {517, 33}, {}, 1, Rounding::kRtne},
      // GQA 4, head_dim 64, e4m3fnuz and e5m2 pools, q_len 5..7.
      {2, 5, 4, 1, 64, DType::kFp8E4M3Fnuz, {77, 40}, {5, 3}, 16, Rounding::kRtz},
      {2, 7, 8, 2, 128, DType::kFp8E5M2, {129, 7}, {}, 16, Rounding::kRtna},
      // One long request at batch 1: split KV (lengths not multiples of the
      // split).
      {1, 4, 32, 8, 128, DType::kBf16, {9000}, {}, 16, Rounding::kRtne},
      {1, 1, 32, 8, 128, DType::kFp8E4M3Fn, {12345}, {}, 1, Rounding::kRtna},
      {2, 8, 8, 1, 64, DType::kBf16, {5000, 4099}, {8, 6}, 1, Rounding::kRtz},
      {1, 2, 4, 4, 256, DType::kFp8E4M3Fn, {3001}, {}, 16, Rounding::kRtne},
      // fp8 at head_dim 128 (rows swizzled by chunk, 4 CTAs per SM): every
      // format, 16-row and 32-row groups, ragged lengths, pages 1, 7 and 16.
      {3, 1, 32, 8, 128, DType::kFp8E4M3Fnuz, {4097, 1, 2500}, {}, 16, Rounding::kRtne},
      {2, 8, 32, 8, 128, DType::kFp8E4M3Fn, {3000, 17}, {8, 5}, 7, Rounding::kRtz},
      {4, 2, 16, 8, 128, DType::kFp8E5M2, {2, 640, 129, 2049}, {}, 1, Rounding::kRtna},
      {1, 3, 8, 1, 128, DType::kFp8E4M3Fnuz, {20000}, {}, 7, Rounding::kRtna},
      {2, 6, 24, 8, 128, DType::kFp8E5M2, {33, 7001}, {6, 1}, 16, Rounding::kRtne},
  };
  for (const Case &c : cases) {
    const uint64_t seed = cpu_test::FreshSeed();
    const std::string name = CaseName(c);
    SCOPED_TRACE(absl::StrCat(name, " seed=", seed));
    const DecodeProblem pr = MakeDecodeProblem(c.b, c.q_len, c.hq, c.hkv, c.d, c.dt, c.seq_lens, c.q_lens, seed);
    const Paged pg = Scatter(pr, c.page_size, seed ^ 0x5eed);
    GpuRun r;
    RunOnGpu(*be_, pr, pg, c.page_size, c.rounding, true, &r);
    if (HasFatalFailure()) return;
    ExpectMatches(r, name);
    if (!pr.q_lens.empty()) cpu_test::ExpectZeroRowsPastWindows(r.out, r.ref, c.q_len, c.hq * c.d, pr.q_lens);
  }
}

// Keys are visited in token order whatever the slots and splits combine in
// a fixed order: page sizes, page orders and repeated runs are bitwise equal.
TEST_F(DecodeAttentionCudaTest, PagesAndRepeatsAreBitwiseEqual) {
  const uint64_t seed = cpu_test::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  const DecodeProblem pr = MakeDecodeProblem(3, 4, 32, 8, 128, DType::kFp8E4M3Fn, {4100, 100, 4}, {4, 1, 3}, seed);
  GpuRun base;
  RunOnGpu(*be_, pr, Scatter(pr, 1, seed), 1, Rounding::kRtne, true, &base);
  if (HasFatalFailure()) return;
  ExpectMatches(base, "page 1");
  for (int64_t page : {1, 16, 7}) {
    SCOPED_TRACE(absl::StrCat("page_size=", page));
    GpuRun r;
    RunOnGpu(*be_, pr, Scatter(pr, page, seed ^ (page + 1)), page, Rounding::kRtne, false, &r);
    if (HasFatalFailure()) return;
    EXPECT_TRUE(gpu_test::SameBytes(r.out, base.out));
  }
}

// A NaN in one pool row poisons exactly the outputs whose window sees it:
// a V element of a causal-tail key (seen by the later new tokens only) and a
// K row in the middle (every row of its KV head's group).
TEST_F(DecodeAttentionCudaTest, NanInAPoolRowPoisonsOnlyTheRowsThatSeeIt) {
  for (DType dt : {DType::kBf16, DType::kFp8E4M3Fn, DType::kFp8E4M3Fnuz, DType::kFp8E5M2}) {
    const uint64_t seed = cpu_test::FreshSeed();
    SCOPED_TRACE(absl::StrCat(DTypeName(dt), " seed=", seed));
    const int64_t page = 16, d = 128, hkv = 2, hq = 8, q_len = 4;
    const DecodeProblem pr = MakeDecodeProblem(2, q_len, hq, hkv, d, dt, {300, 5000}, {}, seed);
    Paged pg = Scatter(pr, page, seed);
    const int32_t *indices = pg.kv_indices.data<int32_t>();
    const int32_t *indptr = pg.kv_indptr.data<int32_t>();
    auto poison = [&](int64_t b, int64_t j, int64_t elem) {
      const int64_t slot = static_cast<int64_t>(indices[indptr[b] + j / page]) * page + j % page;
      const int64_t at = slot * 2 * hkv * d + elem;
      if (dt == DType::kBf16) {
        const uint16_t nan = 0x7FC0;
        std::memcpy(pg.pool.bytes() + 2 * at, &nan, 2);
      } else {
        pg.pool.bytes()[at] = dt == DType::kFp8E4M3Fnuz ? 0x80 : 0x7F;  // the format's NaN
      }
    };
    // A V column in a different 16-byte chunk per format (fp8 rows are
    // swizzled by chunk at head_dim 128).
    const int64_t v_col = dt == DType::kFp8E4M3Fnuz ? 77 : (dt == DType::kFp8E5M2 ? 122 : 5);
    poison(0, 300 - 2, (hkv + 0) * d + v_col);  // V of KV head 0, seen by t >= 2
    poison(1, 2000, 1 * d + 17);            // K of KV head 1, seen by every row
    GpuRun r;
    RunOnGpu(*be_, pr, pg, page, Rounding::kRtne, true, &r);
    if (HasFatalFailure()) return;
    int64_t nan_ref = 0, mismatch = 0;
    for (int64_t i = 0; i < r.out.num_elements(); ++i) {
      const bool want = std::isnan(r.ref[i]);
      const bool got = std::isnan(numerics::Bf16ToFloat(r.out.data<uint16_t>()[i]));
      nan_ref += want;
      mismatch += want != got;
    }
    // Request 0: 2 tokens x 4 heads x 1 column; request 1: 4 tokens x 4 heads x
    // d.
    EXPECT_EQ(nan_ref, 2 * 4 + 4 * 4 * d);
    EXPECT_EQ(mismatch, 0);
  }
}

}  // namespace
}  // namespace kernelserve
