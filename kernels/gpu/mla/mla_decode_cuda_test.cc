// MLA decode on the GPU against the fp64 oracle. Skips without a device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/oracle.h"
#include "kernels/gpu/gpu_test_util.h"
#include "kernels/gpu/mla/mla_decode.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

using gpu_test::CaptureAndReplay;
using gpu_test::CountNan;
using gpu_test::DeviceTensor;
using gpu_test::FreshSeed;
using gpu_test::SameBytes;

struct Case {
  int64_t batch = 2, q_len = 4, heads = 16, seq = 300;
  DType kv_dtype = DType::kFp8E4M3Fn;
  bool paged = false;
  int64_t page_size = 1;
  bool ragged_seq = false;  // seq_lens below S
  bool ragged_q = false;    // q_lens below q_len
  int64_t num_splits = 0;
  double q_std = 1.0;
  double kv_scale = 1.0 / 16;
  Rounding rounding = Rounding::kRtne;
};

// Host inputs of one case: contiguous kv [B,S,576] plus, when paged, a pool
// holding the same rows at shuffled slots.
struct HostInputs {
  HostTensor q_lat, q_pe, kv, pool, seq_lens, kv_indices, kv_indptr, q_lens;
};

HostInputs MakeInputs(const Case& c, std::mt19937_64& rng) {
  HostInputs h;
  const int64_t B = c.batch, Q = c.q_len, H = c.heads, S = c.seq;
  std::normal_distribution<float> nd(0.f, 1.f);
  h.q_lat = HostTensor(DType::kBf16, {B, Q, H, kMlaLatentDim});
  h.q_pe = HostTensor(DType::kBf16, {B, Q, H, kMlaRopeDim});
  for (int64_t i = 0; i < h.q_lat.num_elements(); ++i) {
    h.q_lat.data<uint16_t>()[i] = numerics::FloatToBf16(nd(rng) * c.q_std, Rounding::kRtne);
  }
  for (int64_t i = 0; i < h.q_pe.num_elements(); ++i) {
    h.q_pe.data<uint16_t>()[i] = numerics::FloatToBf16(nd(rng) * c.q_std, Rounding::kRtne);
  }
  // KV rows with a non-zero mean so the output is not near zero.
  h.kv = HostTensor(c.kv_dtype, {B, S, kMlaRowDim});
  for (int64_t i = 0; i < h.kv.num_elements(); ++i) {
    h.kv.data<uint8_t>()[i] = numerics::FloatToFp8((nd(rng) + 0.5f) / static_cast<float>(c.kv_scale), c.kv_dtype);
  }
  std::vector<int32_t> lens(B, static_cast<int32_t>(S)), qls(B, static_cast<int32_t>(Q));
  for (int64_t b = 0; b < B; ++b) {
    if (c.ragged_q) qls[b] = 1 + static_cast<int32_t>(rng() % Q);
    if (c.ragged_seq) lens[b] = std::max<int32_t>(qls[b], static_cast<int32_t>(S - rng() % S));
  }
  lens[0] = static_cast<int32_t>(S);  // one request spans the whole S
  if (c.ragged_seq || c.paged) {
    h.seq_lens = HostTensor(DType::kInt32, {B});
    std::copy(lens.begin(), lens.end(), h.seq_lens.data<int32_t>());
  }
  if (c.ragged_q) {
    h.q_lens = HostTensor(DType::kInt32, {B});
    std::copy(qls.begin(), qls.end(), h.q_lens.data<int32_t>());
  }
  if (c.paged) {
    const int64_t P = c.page_size;
    std::vector<int64_t> pages_of(B);
    int64_t total_pages = 0;
    for (int64_t b = 0; b < B; ++b) total_pages += pages_of[b] = (lens[b] + P - 1) / P;
    const int64_t num_pages = total_pages + 3;  // a few unused pages
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    h.pool = HostTensor(c.kv_dtype, {num_pages * P, kMlaRowDim});
    for (int64_t i = 0; i < h.pool.num_bytes(); ++i) h.pool.bytes()[i] = static_cast<uint8_t>(rng());
    h.kv_indptr = HostTensor(DType::kInt32, {B + 1});
    h.kv_indices = HostTensor(DType::kInt32, {total_pages});
    int64_t at = 0;
    for (int64_t b = 0; b < B; ++b) {
      h.kv_indptr.data<int32_t>()[b] = static_cast<int32_t>(at);
      for (int64_t pg = 0; pg < pages_of[b]; ++pg) {
        const int32_t page = perm[at];
        h.kv_indices.data<int32_t>()[at++] = page;
        for (int64_t o = 0; o < P && pg * P + o < lens[b]; ++o) {
          std::memcpy(h.pool.bytes() + (page * P + o) * kMlaRowDim,
                      h.kv.bytes() + (b * S + pg * P + o) * kMlaRowDim, kMlaRowDim);
        }
      }
    }
    h.kv_indptr.data<int32_t>()[B] = static_cast<int32_t>(at);
  }
  return h;
}

struct DeviceInputs {
  DeviceTensor q_lat, q_pe, kv, seq_lens, kv_indices, kv_indptr, q_lens;
  MlaDecodeInputs in;
};

void Upload(const HostInputs& h, bool paged, DeviceInputs* d) {
  d->q_lat = DeviceTensor(h.q_lat);
  d->q_pe = DeviceTensor(h.q_pe);
  d->kv = DeviceTensor(paged ? h.pool : h.kv);
  d->in.q_lat = d->q_lat.view();
  d->in.q_pe = d->q_pe.view();
  d->in.kv = d->kv.view();
  if (h.seq_lens.num_bytes() > 0) {
    d->seq_lens = DeviceTensor(h.seq_lens);
    d->in.seq_lens = d->seq_lens.view();
  }
  if (h.q_lens.num_bytes() > 0) {
    d->q_lens = DeviceTensor(h.q_lens);
    d->in.q_lens = d->q_lens.view();
  }
  if (paged) {
    d->kv_indices = DeviceTensor(h.kv_indices);
    d->kv_indptr = DeviceTensor(h.kv_indptr);
    d->in.kv_indices = d->kv_indices.view();
    d->in.kv_indptr = d->kv_indptr.view();
  }
}

MlaDecodeParams Validated(const Case& c, const HostInputs& h, bool paged) {
  MlaDecodeParams p;
  p.kv_scale = c.kv_scale;
  p.num_splits = c.num_splits;
  p.rounding = c.rounding;
  const HostTensor* sl = h.seq_lens.num_bytes() > 0 ? &h.seq_lens : nullptr;
  const HostTensor* qls = h.q_lens.num_bytes() > 0 ? &h.q_lens : nullptr;
  const absl::Status st =
      paged ? p.Validate(h.q_lat.desc(), h.q_pe.desc(), h.pool.desc(), true, c.page_size, sl, &h.kv_indices,
                         &h.kv_indptr, qls)
            : p.Validate(h.q_lat.desc(), h.q_pe.desc(), h.kv.desc(), false, 1, sl, nullptr, nullptr, qls);
  EXPECT_TRUE(st.ok()) << st;
  return p;
}

gpu::MlaKernel g_kernel = gpu::MlaKernel::kWgmma;

HostTensor RunGpu(const MlaDecodeParams& p, const DeviceInputs& d) {
  DeviceTensor out(p.OutputDesc());
  EXPECT_EQ(out.Fill(0xFF), cudaSuccess);  // poison: NaN everywhere
  TensorView ov = out.view();
  const absl::Status st = gpu::RunMlaDecodeWith(g_kernel, p, d.in, ov, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out.ToHost();
}

// Compares with the oracle on the contiguous inputs; returns the GPU output.
HostTensor CheckCase(const Case& c, double tol = 6e-3) {
  std::mt19937_64 rng(FreshSeed());
  const HostInputs h = MakeInputs(c, rng);
  DeviceInputs d;
  Upload(h, c.paged, &d);
  const MlaDecodeParams p = Validated(c, h, c.paged);
  const HostTensor got = RunGpu(p, d);

  MlaDecodeParams pc = Validated(c, h, c.paged);
  MlaDecodeInputs hin;
  hin.q_lat = h.q_lat.view();
  hin.q_pe = h.q_pe.view();
  hin.kv = c.paged ? h.pool.view() : h.kv.view();
  if (h.seq_lens.num_bytes() > 0) hin.seq_lens = h.seq_lens.view();
  if (h.q_lens.num_bytes() > 0) hin.q_lens = h.q_lens.view();
  if (c.paged) {
    hin.kv_indices = h.kv_indices.view();
    hin.kv_indptr = h.kv_indptr.view();
  }
  const auto ref = oracle::MlaDecode(pc, hin);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) return got;
  const std::vector<double> out = numerics::ToDoubles(got.view());
  const numerics::ErrorMetrics m = numerics::CompareToReference(out.data(), ref->data(), ref->size());
  EXPECT_EQ(m.nonfinite, 0);
  int64_t wrong_zero = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if ((*ref)[i] == 0.0 && out[i] != 0.0) ++wrong_zero;
  }
  EXPECT_EQ(CountNan(out), 0) << "unwritten or NaN outputs";
  EXPECT_EQ(wrong_zero, 0) << "rows past the q_lens window must be zero";
  EXPECT_LT(m.rel_rms, tol) << "max_abs " << m.max_abs;
  std::printf("B=%lld q_len=%lld H=%lld S=%lld paged=%d page=%lld splits=%lld: rel_rms %.3g max_abs %.3g\n",
              static_cast<long long>(c.batch), static_cast<long long>(c.q_len), static_cast<long long>(c.heads),
              static_cast<long long>(c.seq), c.paged, static_cast<long long>(c.page_size),
              static_cast<long long>(c.num_splits), m.rel_rms, m.max_abs);
  return got;
}

class MlaDecodeCudaTest : public ::testing::TestWithParam<gpu::MlaKernel> {
 protected:
  void SetUp() override {
    KS_SKIP_WITHOUT_CUDA();
    g_kernel = GetParam();
  }
};

INSTANTIATE_TEST_SUITE_P(Kernels, MlaDecodeCudaTest,
                         ::testing::Values(gpu::MlaKernel::kWgmmaPv, gpu::MlaKernel::kWgmmaPvSw,
                                           gpu::MlaKernel::kWgmmaPipe, gpu::MlaKernel::kWgmmaRoles,
                                           gpu::MlaKernel::kWgmmaRegA,
                                           gpu::MlaKernel::kWgmma, gpu::MlaKernel::kMmaSync),
                         [](const ::testing::TestParamInfo<gpu::MlaKernel>& i) {
                           switch (i.param) {
                             case gpu::MlaKernel::kWgmma:
                               return std::string("Wgmma");
                             case gpu::MlaKernel::kWgmmaPv:
                               return std::string("WgmmaPv");
                             case gpu::MlaKernel::kWgmmaPvSw:
                               return std::string("WgmmaPvSw");
                             case gpu::MlaKernel::kWgmmaPipe:
                               return std::string("WgmmaPipe");
                             case gpu::MlaKernel::kWgmmaRoles:
                               return std::string("WgmmaRoles");
                             case gpu::MlaKernel::kWgmmaRegA:
                               return std::string("WgmmaRegA");
                             case gpu::MlaKernel::kMmaSync:
                               break;
                           }
                           return std::string("MmaSync");
                         });

// The default kernel is one of the tested ones.
TEST(MlaDecodeCudaDefault, IsTested) {
  EXPECT_TRUE(gpu::kDefaultMlaKernel == gpu::MlaKernel::kWgmma ||
              gpu::kDefaultMlaKernel == gpu::MlaKernel::kWgmmaPv ||
              gpu::kDefaultMlaKernel == gpu::MlaKernel::kWgmmaPvSw ||
              gpu::kDefaultMlaKernel == gpu::MlaKernel::kWgmmaRoles ||
              gpu::kDefaultMlaKernel == gpu::MlaKernel::kWgmmaRegA ||
              gpu::kDefaultMlaKernel == gpu::MlaKernel::kMmaSync);
}

TEST_P(MlaDecodeCudaTest, ContiguousSingleSplit) {
  Case c;
  c.num_splits = 1;
  CheckCase(c);
}

TEST_P(MlaDecodeCudaTest, ContiguousAutoSplitRaggedSeq) {
  Case c;
  c.batch = 3;
  c.seq = 1000;
  c.ragged_seq = true;
  CheckCase(c);
}

TEST_P(MlaDecodeCudaTest, ManySplitsSharpScores) {
  Case c;
  c.batch = 2;
  c.seq = 777;
  c.num_splits = 7;
  c.q_std = 3.0;
  CheckCase(c);
}

// Every block count of a split from 1 to 7, with and without a partial last
// block (one split, so that the count is exact), and sharp scores that move
// the running maximum often: each consumer warpgroup's first, middle and last
// block, the hand-over of the last block between them, and the producer's
// stream when it ends before or right after Q's arrival.
TEST_P(MlaDecodeCudaTest, EveryBlockCountOfOneSplit) {
  for (int64_t seq : {4, 64, 65, 128, 150, 192, 256, 300, 383, 448}) {
    SCOPED_TRACE(seq);
    Case c;
    c.batch = 1;
    c.seq = seq;
    c.num_splits = 1;
    c.q_std = 3.0;
    CheckCase(c);
  }
}

TEST_P(MlaDecodeCudaTest, SingleQuerySingleHeadTinySeq) {
  Case c;
  c.batch = 3;
  c.q_len = 1;
  c.heads = 1;
  c.seq = 1;
  CheckCase(c);
  c.seq = 65;
  c.ragged_seq = true;
  CheckCase(c);
}

TEST_P(MlaDecodeCudaTest, ManyHeadsLongWindowFnuz) {
  Case c;
  c.batch = 1;
  c.q_len = 8;
  c.heads = 128;  // 1024 rows: 16 row groups
  c.seq = 200;
  c.kv_dtype = DType::kFp8E4M3Fnuz;
  CheckCase(c);
}

TEST_P(MlaDecodeCudaTest, OddHeadCountRaggedQ) {
  Case c;
  c.batch = 4;
  c.q_len = 3;
  c.heads = 12;
  c.seq = 150;
  c.ragged_q = true;
  c.ragged_seq = true;
  CheckCase(c);
}

TEST_P(MlaDecodeCudaTest, PagedPageOneRaggedQ) {
  Case c;
  c.batch = 3;
  c.seq = 500;
  c.paged = true;
  c.ragged_seq = true;
  c.ragged_q = true;
  CheckCase(c);
}

TEST_P(MlaDecodeCudaTest, PagedLargePagesFnuzRtz) {
  Case c;
  c.batch = 2;
  c.q_len = 2;
  c.seq = 333;
  c.paged = true;
  c.page_size = 16;
  c.kv_dtype = DType::kFp8E4M3Fnuz;
  c.rounding = Rounding::kRtz;
  CheckCase(c, 8e-3);
  c.rounding = Rounding::kRtna;
  CheckCase(c);
}

// A paged pool holding the same rows at shuffled slots gives the same bits as
// the contiguous tensor, and repeated runs give the same bits.
TEST_P(MlaDecodeCudaTest, PagedPermutationEqualsContiguousAndDeterministic) {
  for (int64_t page : {1, 64}) {
    Case c;
    c.batch = 3;
    c.seq = 900;
    c.paged = true;
    c.page_size = page;
    std::mt19937_64 rng(FreshSeed());
    const HostInputs h = MakeInputs(c, rng);
    DeviceInputs dp, dc;
    Upload(h, true, &dp);
    Upload(h, false, &dc);
    const MlaDecodeParams pp = Validated(c, h, true);
    Case cc = c;
    cc.paged = false;
    const MlaDecodeParams pc = Validated(cc, h, false);
    const HostTensor a = RunGpu(pp, dp);
    const HostTensor b = RunGpu(pc, dc);
    const HostTensor a2 = RunGpu(pp, dp);
    EXPECT_TRUE(SameBytes(a, b)) << "page " << page;
    EXPECT_TRUE(SameBytes(a, a2)) << "page " << page;
  }
}

// A NaN code in one KV row (in a latent byte of either half of a 4-byte
// word, or in the rope part) makes every output of the rows that attend that
// token NaN, as in the oracle; the other request stays finite.
TEST_P(MlaDecodeCudaTest, NanInKvRowMakesItsReadersNan) {
  for (const int64_t d : {4, 6, 300, 541}) {
    Case c;
    c.batch = 2;
    c.seq = 300;
    std::mt19937_64 rng(FreshSeed());
    HostInputs h = MakeInputs(c, rng);
    h.kv.data<uint8_t>()[(0 * c.seq + 200) * kMlaRowDim + d] = 0x7F;  // e4m3fn NaN
    DeviceInputs dv;
    Upload(h, false, &dv);
    const MlaDecodeParams p = Validated(c, h, false);
    const HostTensor got = RunGpu(p, dv);
    const std::vector<double> out = numerics::ToDoubles(got.view());
    const size_t per_request = out.size() / 2;
    int64_t finite0 = 0, nan1 = 0;
    for (size_t i = 0; i < per_request; ++i) finite0 += std::isfinite(out[i]) ? 1 : 0;
    for (size_t i = per_request; i < out.size(); ++i) nan1 += std::isnan(out[i]) ? 1 : 0;
    EXPECT_EQ(finite0, 0) << "d " << d << ": request 0 attends the NaN row everywhere";
    EXPECT_EQ(nan1, 0) << "d " << d << ": request 1 does not read it";
  }
}

TEST_P(MlaDecodeCudaTest, PagedGraphCaptureReplays) {
  Case c;
  c.batch = 4;
  c.seq = 2000;
  c.paged = true;
  c.ragged_seq = true;
  std::mt19937_64 rng(FreshSeed());
  const HostInputs h = MakeInputs(c, rng);
  DeviceInputs d;
  Upload(h, true, &d);
  const MlaDecodeParams p = Validated(c, h, true);
  const HostTensor direct = RunGpu(p, d);

  DeviceTensor out(p.OutputDesc());
  KS_CUDA_OK(out.Fill(0xFF));
  TensorView ov = out.view();
  ASSERT_NO_FATAL_FAILURE(CaptureAndReplay(
      [&](cudaStream_t stream) { return gpu::RunMlaDecodeWith(g_kernel, p, d.in, ov, stream); }, 3));
  EXPECT_TRUE(SameBytes(out.ToHost(), direct));
}

// kWgmmaPipe reschedules kWgmmaPv without changing its arithmetic: the same
// wgmma sequence, softmax expressions and split plan, so the same bits on
// every shape (contiguous, paged with page sizes 1 and 16, ragged q_lens and
// seq_lens, one split, several, H = 128).
TEST(MlaDecodeCudaPipe, SameBitsAsWgmmaPv) {
  KS_SKIP_WITHOUT_CUDA();
  std::vector<Case> cases(6);
  cases[0].num_splits = 1;
  cases[1].batch = 3;
  cases[1].seq = 1000;
  cases[1].ragged_seq = true;
  cases[2].batch = 2;
  cases[2].seq = 777;
  cases[2].num_splits = 7;
  cases[2].q_std = 3.0;
  cases[3].batch = 1;
  cases[3].q_len = 8;
  cases[3].heads = 128;
  cases[3].seq = 200;
  cases[3].kv_dtype = DType::kFp8E4M3Fnuz;
  cases[4].batch = 3;
  cases[4].seq = 500;
  cases[4].paged = true;
  cases[4].ragged_seq = true;
  cases[4].ragged_q = true;
  cases[5].batch = 4;
  cases[5].q_len = 3;
  cases[5].heads = 12;
  cases[5].seq = 333;
  cases[5].paged = true;
  cases[5].page_size = 16;
  cases[5].ragged_q = true;
  cases[5].rounding = Rounding::kRtz;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::mt19937_64 rng(FreshSeed());
    const HostInputs h = MakeInputs(c, rng);
    DeviceInputs d;
    Upload(h, c.paged, &d);
    const MlaDecodeParams p = Validated(c, h, c.paged);
    g_kernel = gpu::MlaKernel::kWgmmaPv;
    const HostTensor want = RunGpu(p, d);
    g_kernel = gpu::MlaKernel::kWgmmaPipe;
    const HostTensor got = RunGpu(p, d);
    EXPECT_EQ(CountNan(numerics::ToDoubles(got.view())), 0) << "case " << i;
    EXPECT_TRUE(SameBytes(got, want)) << "case " << i;
  }
}

}  // namespace
}  // namespace kernelserve
