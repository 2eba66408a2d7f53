// MLA decode on the GPU against the fp64 oracle, for every entry of the
// variant table on the calls it serves: each case runs in every KV format
// the entry serves. Outputs are poisoned (NaN) before each call; a NaN is a
// failure; inputs come from a fresh seed (printed). Device cases skip
// without a GPU; the table's dispatch cases run everywhere.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/oracle.h"
#include "kernels/gpu/common/kernel_variant.h"
#include "kernels/gpu/gpu_test_util.h"
#include "kernels/gpu/mla/mla_decode_variants.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

using gpu_test::CaptureAndReplay;
using gpu_test::CountNan;
using gpu_test::DeviceTensor;
using gpu_test::FreshSeed;
using gpu_test::SameBytes;

constexpr DType kKvFormats[] = {DType::kFp8E4M3Fn, DType::kFp8E4M3Fnuz};

struct Case {
  int64_t batch = 2, q_len = 4, heads = 16, seq = 300;
  DType kv_dtype = DType::kFp8E4M3Fn;  // set per served format
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

const gpu::KernelVariant* g_variant = nullptr;  // the table entry under test
gpu::DeviceCaps g_caps;

// The shape of `c` as a call's parameters (not validated: what the table's
// predicates read).
MlaDecodeParams ShapeOf(const Case& c) {
  MlaDecodeParams p;
  p.batch = c.batch;
  p.q_len = c.q_len;
  p.heads = c.heads;
  p.paged = c.paged;
  p.page_size = c.page_size;
  p.max_seq = c.seq;
  p.num_splits = c.num_splits;
  p.has_seq_lens = c.ragged_seq || c.paged;
  p.has_q_lens = c.ragged_q;
  p.kv_dtype = c.kv_dtype;
  return p;
}

// The KV formats g_variant serves for calls shaped like `c` on this device.
std::vector<DType> ServedFormats(Case c) {
  std::vector<DType> out;
  for (DType kv : kKvFormats) {
    c.kv_dtype = kv;
    if (g_variant->unsupported(g_caps, gpu::MlaDecodeCall(ShapeOf(c), MlaDecodeInputs{})).empty()) out.push_back(kv);
  }
  return out;
}

HostTensor RunGpu(const MlaDecodeParams& p, const DeviceInputs& d) {
  DeviceTensor out(p.OutputDesc());
  EXPECT_EQ(out.Fill(0xFF), cudaSuccess);  // poison: NaN everywhere
  TensorView ov = out.view();
  const absl::Status st = g_variant->run(gpu::MlaDecodeCall(p, d.in), ov, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out.ToHost();
}

// Compares with the oracle on the same inputs; returns the GPU output.
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
  std::printf("%s %s B=%lld q_len=%lld H=%lld S=%lld paged=%d page=%lld splits=%lld: rel_rms %.3g max_abs %.3g\n",
              g_variant->name, DTypeName(c.kv_dtype).c_str(), static_cast<long long>(c.batch),
              static_cast<long long>(c.q_len), static_cast<long long>(c.heads), static_cast<long long>(c.seq),
              c.paged, static_cast<long long>(c.page_size), static_cast<long long>(c.num_splits), m.rel_rms,
              m.max_abs);
  return got;
}

// `body` once per KV format the entry under test serves for `c` (at least one).
template <class Body>
void ForEachServedFormat(Case c, Body body) {
  const std::vector<DType> formats = ServedFormats(c);
  EXPECT_FALSE(formats.empty()) << g_variant->name << " serves no KV format for this shape";
  for (DType kv : formats) {
    SCOPED_TRACE(DTypeName(kv));
    c.kv_dtype = kv;
    body(c);
  }
}

void CheckServed(const Case& c, double tol = 6e-3) {
  ForEachServedFormat(c, [&](const Case& cf) { CheckCase(cf, tol); });
}

std::vector<std::string> TableNames() {
  std::vector<std::string> names;
  for (const gpu::KernelVariant& v : gpu::MlaDecodeVariants()) names.push_back(v.name);
  return names;
}

class MlaDecodeCudaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    KS_SKIP_WITHOUT_CUDA();
    const absl::StatusOr<gpu::DeviceCaps> caps = gpu::QueryDeviceCaps(0);
    ASSERT_TRUE(caps.ok()) << caps.status();
    g_caps = *caps;
    g_variant = nullptr;
    for (const gpu::KernelVariant& v : gpu::MlaDecodeVariants()) {
      if (GetParam() == v.name) g_variant = &v;
    }
    ASSERT_NE(g_variant, nullptr);
    const std::string no = NeedsSm90a(g_caps);
    if (!no.empty()) GTEST_SKIP() << no;
  }
};

INSTANTIATE_TEST_SUITE_P(Table, MlaDecodeCudaTest, ::testing::ValuesIn(TableNames()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST_P(MlaDecodeCudaTest, ContiguousSingleSplit) {
  Case c;
  c.num_splits = 1;
  CheckServed(c);
}

TEST_P(MlaDecodeCudaTest, ContiguousAutoSplitRaggedSeq) {
  Case c;
  c.batch = 3;
  c.seq = 1000;
  c.ragged_seq = true;
  CheckServed(c);
}

TEST_P(MlaDecodeCudaTest, ManySplitsSharpScores) {
  Case c;
  c.batch = 2;
  c.seq = 777;
  c.num_splits = 7;
  c.q_std = 3.0;
  CheckServed(c);
}

// Every block count of a split from 1 to 7, and 10 and 16, with and without
// a partial last block (one split, so that the count is exact), and sharp
// scores that move the running maximum often: each consumer warpgroup's
// first, middle and last block, the hand-over of the last block between
// them, a producer's stream that ends before or right after Q's arrival, and
// the KV ring short of one turn, at one and over three (three slots at
// q_len 4; four in wgmma_rega's 32-row CTA, which q_len 2 x H 16 runs; five
// in its 16-row CTA, which q_len 1 x H 16 runs).
TEST_P(MlaDecodeCudaTest, EveryBlockCountOfOneSplit) {
  for (int64_t q_len : {4, 2, 1}) {
    for (int64_t seq : {4, 64, 65, 128, 150, 192, 256, 300, 320, 383, 448, 640, 1000}) {
      SCOPED_TRACE(testing::Message() << "q_len " << q_len << " S " << seq);
      Case c;
      c.batch = 1;
      c.q_len = q_len;
      c.seq = seq;
      c.num_splits = 1;
      c.q_std = 3.0;
      CheckServed(c);
    }
  }
}

TEST_P(MlaDecodeCudaTest, SingleQuerySingleHeadTinySeq) {
  Case c;
  c.batch = 3;
  c.q_len = 1;
  c.heads = 1;
  c.seq = 1;
  CheckServed(c);
  c.seq = 65;
  c.ragged_seq = true;
  CheckServed(c);
}

// H 16, paged, ragged seq_lens: planned splits with page 1, then 7 splits
// with page 16 (scores as sharp as `q_std` makes them).
void CheckPagedRaggedSplits(int64_t q_len, double q_std) {
  Case c;
  c.batch = 5;
  c.q_len = q_len;
  c.seq = 3000;
  c.paged = true;
  c.ragged_seq = true;
  CheckServed(c);  // planned splits
  c.page_size = 16;
  c.num_splits = 7;
  c.q_std = q_std;
  CheckServed(c);
}

TEST_P(MlaDecodeCudaTest, SixteenRowsPagedRaggedSplits) { CheckPagedRaggedSplits(1, 1.0); }

// Fewer than 16 rows per request, ragged q_lens (rows past a request's
// window come back as zeros), an odd row count.
TEST_P(MlaDecodeCudaTest, SixteenRowsRaggedQ) {
  Case c;
  c.batch = 4;
  c.q_len = 2;
  c.heads = 8;
  c.seq = 500;
  c.ragged_q = true;
  c.ragged_seq = true;
  CheckServed(c);
  c.q_len = 3;
  c.heads = 5;
  c.paged = true;
  CheckServed(c);
}

// 17 to 32 rows per request (wgmma_rega's 32-row CTA): q_len 2 x H 16 paged
// with planned and fixed splits and page sizes 1 and 16; ragged q_lens and
// odd row counts (q_len 3 x H 7 = 21, rows past a request's window are
// zeros); the class's bounds, 17 and 32 rows at q_len 1.
TEST_P(MlaDecodeCudaTest, ThirtyTwoRowsPagedRaggedSplits) {
  CheckPagedRaggedSplits(2, 3.0);
  Case c;
  c.batch = 4;
  c.q_len = 3;
  c.heads = 7;
  c.seq = 700;
  c.paged = true;
  c.ragged_q = true;
  c.ragged_seq = true;
  CheckServed(c);
  for (int64_t heads : {17, 32}) {
    SCOPED_TRACE(testing::Message() << "q_len 1 H " << heads);
    c = Case{};
    c.batch = 3;
    c.q_len = 1;
    c.heads = heads;
    c.seq = 1000;
    c.ragged_seq = true;
    CheckServed(c);
  }
}

TEST_P(MlaDecodeCudaTest, ManyHeadsLongWindow) {
  Case c;
  c.batch = 1;
  c.q_len = 8;
  c.heads = 128;  // 1024 rows: 16 row groups
  c.seq = 200;
  CheckServed(c);
  c.batch = 2;
  c.q_len = 1;  // two 64-row groups
  c.seq = 700;
  c.ragged_seq = true;
  CheckServed(c);
}

TEST_P(MlaDecodeCudaTest, OddHeadCountRaggedQ) {
  Case c;
  c.batch = 4;
  c.q_len = 3;
  c.heads = 12;
  c.seq = 150;
  c.ragged_q = true;
  c.ragged_seq = true;
  CheckServed(c);
}

TEST_P(MlaDecodeCudaTest, PagedPageOneRaggedQ) {
  Case c;
  c.batch = 3;
  c.seq = 500;
  c.paged = true;
  c.ragged_seq = true;
  c.ragged_q = true;
  CheckServed(c);
}

TEST_P(MlaDecodeCudaTest, PagedLargePagesRtzRtna) {
  Case c;
  c.batch = 2;
  c.q_len = 2;
  c.seq = 333;
  c.paged = true;
  c.page_size = 16;
  c.rounding = Rounding::kRtz;
  CheckServed(c, 8e-3);
  c.rounding = Rounding::kRtna;
  CheckServed(c);
}

// A paged pool holding the same rows at shuffled slots gives the same bits as
// the contiguous tensor, and repeated runs give the same bits.
TEST_P(MlaDecodeCudaTest, PagedPermutationEqualsContiguousAndDeterministic) {
  for (int64_t page : {1, 64}) {
    for (int64_t q_len : {4, 2, 1}) {
      Case c;
      c.batch = 3;
      c.q_len = q_len;
      c.seq = 900;
      c.paged = true;
      c.page_size = page;
      ForEachServedFormat(c, [&](const Case& cf) {
        std::mt19937_64 rng(FreshSeed());
        const HostInputs h = MakeInputs(cf, rng);
        DeviceInputs dp, dc;
        Upload(h, true, &dp);
        Upload(h, false, &dc);
        const MlaDecodeParams pp = Validated(cf, h, true);
        Case cc = cf;
        cc.paged = false;
        const MlaDecodeParams pc = Validated(cc, h, false);
        const HostTensor a = RunGpu(pp, dp);
        const HostTensor b = RunGpu(pc, dc);
        const HostTensor a2 = RunGpu(pp, dp);
        EXPECT_TRUE(SameBytes(a, b)) << "page " << page << " q_len " << q_len;
        EXPECT_TRUE(SameBytes(a, a2)) << "page " << page << " q_len " << q_len;
      });
    }
  }
}

// A NaN code in one KV row (in a latent byte of either half of a 4-byte
// word, or in the rope part) makes every output of the rows that attend that
// token NaN, as in the oracle; the other request stays finite.
TEST_P(MlaDecodeCudaTest, NanInKvRowMakesItsReadersNan) {
  for (int64_t q_len : {4, 2, 1}) {
    SCOPED_TRACE(q_len);
    Case c;
    c.batch = 2;
    c.q_len = q_len;
    c.seq = 300;
    ForEachServedFormat(c, [&](const Case& cf) {
      const uint8_t nan_code = cf.kv_dtype == DType::kFp8E4M3Fnuz ? 0x80 : 0x7F;
      for (const int64_t d : {4, 6, 300, 541}) {
        std::mt19937_64 rng(FreshSeed());
        HostInputs h = MakeInputs(cf, rng);
        h.kv.data<uint8_t>()[(0 * cf.seq + 200) * kMlaRowDim + d] = nan_code;
        DeviceInputs dv;
        Upload(h, false, &dv);
        const MlaDecodeParams p = Validated(cf, h, false);
        const HostTensor got = RunGpu(p, dv);
        const std::vector<double> out = numerics::ToDoubles(got.view());
        const size_t per_request = out.size() / 2;
        int64_t finite0 = 0, nan1 = 0;
        for (size_t i = 0; i < per_request; ++i) finite0 += std::isfinite(out[i]) ? 1 : 0;
        for (size_t i = per_request; i < out.size(); ++i) nan1 += std::isnan(out[i]) ? 1 : 0;
        EXPECT_EQ(finite0, 0) << "d " << d << ": request 0 attends the NaN row everywhere";
        EXPECT_EQ(nan1, 0) << "d " << d << ": request 1 does not read it";
      }
    });
  }
}

TEST_P(MlaDecodeCudaTest, PagedGraphCaptureReplays) {
  for (int64_t q_len : {4, 2, 1}) {
    SCOPED_TRACE(q_len);
    Case c;
    c.batch = 4;
    c.q_len = q_len;
    c.seq = 2000;
    c.paged = true;
    c.ragged_seq = true;
    ForEachServedFormat(c, [&](const Case& cf) {
      std::mt19937_64 rng(FreshSeed());
      const HostInputs h = MakeInputs(cf, rng);
      DeviceInputs d;
      Upload(h, true, &d);
      const MlaDecodeParams p = Validated(cf, h, true);
      const HostTensor direct = RunGpu(p, d);

      DeviceTensor out(p.OutputDesc());
      KS_CUDA_OK(out.Fill(0xFF));
      TensorView ov = out.view();
      ASSERT_NO_FATAL_FAILURE(CaptureAndReplay(
          [&](cudaStream_t stream) { return g_variant->run(gpu::MlaDecodeCall(p, d.in), ov, stream); }, 3));
      EXPECT_TRUE(SameBytes(out.ToHost(), direct));
    });
  }
}

gpu::DeviceCaps Sm90aCaps() {
  gpu::DeviceCaps caps;
  caps.cc_major = 9;
  caps.cc_minor = 0;
  caps.sms = 132;
  caps.smem_per_block_optin = 227 * 1024;
  return caps;
}

absl::StatusOr<const gpu::KernelVariant*> Dispatch(const gpu::DeviceCaps& caps, const Case& c) {
  return gpu::SelectVariant(gpu::MlaDecodeVariants(), "mla_decode", caps,
                            gpu::MlaDecodeCall(ShapeOf(c), MlaDecodeInputs{}));
}

// The dispatcher's choice on sm_90a (no GPU needed): every call has a
// kernel, e4m3fn KV goes to wgmma_rega and e4m3fnuz KV to wgmma_roles, for
// any shape; so every entry of the table is selected for some call.
TEST(MlaDecodeVariants, DispatchOnSm90a) {
  std::vector<std::string> selected;
  for (DType kv : kKvFormats) {
    for (bool paged : {false, true}) {
      for (int64_t q_len : {1, 2, 4, 8}) {
        for (int64_t heads : {1, 16, 128}) {
          Case c;
          c.kv_dtype = kv;
          c.paged = paged;
          c.page_size = paged ? 16 : 1;
          c.q_len = q_len;
          c.heads = heads;
          c.seq = 1000;
          const absl::StatusOr<const gpu::KernelVariant*> v = Dispatch(Sm90aCaps(), c);
          ASSERT_TRUE(v.ok()) << v.status();
          EXPECT_STREQ((*v)->name, kv == DType::kFp8E4M3Fn ? "wgmma_rega" : "wgmma_roles") << DTypeName(kv);
          selected.push_back((*v)->name);
        }
      }
    }
  }
  for (const std::string& name : TableNames()) {
    EXPECT_NE(std::find(selected.begin(), selected.end(), name), selected.end()) << name << " is never selected";
  }
}

TEST(MlaDecodeVariants, OtherDevicesAreUnimplemented) {
  gpu::DeviceCaps a100 = Sm90aCaps();
  a100.cc_major = 8;
  const absl::StatusOr<const gpu::KernelVariant*> v = Dispatch(a100, Case{});
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(v.status().message().find("sm_90a"), std::string::npos) << v.status();
}

}  // namespace
}  // namespace kernelserve
