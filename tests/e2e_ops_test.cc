// End-to-end tests of FP8 attention, MLA decode (contiguous and through a KV
// pool) and the MXFP4 MoE stages: the real client library against a real
// in-process server (CPU backend), checked against the fp64 oracle on fresh
// random inputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"
#include "server/server.h"
#include "tests/test_util.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;
using testutil::ExpectBf16MatchesOracle;
using testutil::ExpectFp8AttentionMatchesOracle;
using testutil::FreshSeed;
using testutil::RelRms;

// Every op test runs twice: unary kernel calls, then the same calls as
// messages on a KernelService.Session (ClientOptions::kernel_session), which
// must give the same results and the same errors.
class E2eOpsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.backend = "cpu";
    so.cpu_threads = 2;
    auto server = KernelServer::Start(so);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", server_->port());
    o.kernel_session = GetParam();
    auto c = Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  void TearDown() override {
    client_.reset();
    if (server_) server_->Shutdown(absl::Seconds(1));
  }

  std::unique_ptr<KernelServer> server_;
  std::unique_ptr<Client> client_;
};

HostTensor RandomFp8(const Shape& shape, DType dtype, std::mt19937_64& rng, double stddev) {
  HostTensor t(dtype, shape);
  std::normal_distribution<float> nd(0.0f, static_cast<float>(stddev));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.bytes()[i] = numerics::FloatToFp8(nd(rng), dtype);
  return t;
}

HostTensor Int32s(const std::vector<int32_t>& v) {
  HostTensor t(DType::kInt32, {static_cast<int64_t>(v.size())});
  std::memcpy(t.bytes(), v.data(), v.size() * 4);
  return t;
}

// ------------------------------------------------------------ FP8 attention

struct Fp8Case {
  int64_t hq, hkv, sq, skv, dqk, dv;
  bool causal;
  PMode mode;
  Fp8Format format;
  bool hadamard;
  DescaleMode descale;
};

TEST_P(E2eOpsTest, Fp8AttentionMatchesOracleForEveryMode) {
  const Fp8Case cases[] = {
      {2, 1, 70, 150, 128, 128, true, PMode::kExact, Fp8Format::kE4M3Fn, false, DescaleMode::kPerTensor},
      {2, 2, 64, 200, 128, 128, false, PMode::kLean, Fp8Format::kE4M3Fn, true, DescaleMode::kPerHead},
      {2, 2, 33, 130, 192, 128, true, PMode::kNaive, Fp8Format::kE4M3Fnuz, false, DescaleMode::kPerTensor},
      {1, 1, 40, 129, 192, 128, true, PMode::kLean, Fp8Format::kE4M3Fnuz, true, DescaleMode::kPerTensor},
  };
  for (const Fp8Case& c : cases) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(absl::StrCat("seed=", seed, " mode=", PModeName(c.mode), " dqk=", c.dqk,
                              " format=", Fp8FormatName(c.format)));
    HostTensor q = numerics::GaussianBf16({1, c.hq, c.sq, c.dqk}, seed);
    HostTensor k = numerics::GaussianBf16({1, c.hkv, c.skv, c.dqk}, seed + 1);
    HostTensor v = numerics::GaussianBf16({1, c.hkv, c.skv, c.dv}, seed + 2, 0.5);
    Fp8AttentionArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.causal = c.causal;
    a.p_mode = c.mode;
    a.format = c.format;
    a.hadamard = c.hadamard;
    a.descale_mode = c.descale;
    a.report_error_split = true;
    auto r = client_->Fp8Attention(a);
    ASSERT_TRUE(r.ok()) << r.status();

    Fp8AttentionParams p;
    p.causal = c.causal;
    p.p_mode = c.mode;
    p.format = c.format;
    p.hadamard = c.hadamard;
    p.descale_mode = c.descale;
    ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc(), nullptr, nullptr, nullptr).ok());
    Fp8AttentionInputs in{q.view(), k.view(), v.view(), {}, {}, {}};
    auto quant = oracle::QuantizeAttentionInputs(p, in);
    ASSERT_TRUE(quant.ok()) << quant.status();
    auto ref = oracle::Fp8Attention(p, *quant, oracle::PQuant::kAsParams);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_EQ(r->out.shape(), (Shape{1, c.hq, c.sq, c.dv}));
    ExpectFp8AttentionMatchesOracle(r->out, *ref, c.dv);
    EXPECT_LT(RelRms(r->out, *ref), 5e-3);
    ASSERT_TRUE(r->error.has_value());
    EXPECT_TRUE(r->error->has_split);
    EXPECT_GT(r->error->input_quant, 0);
    EXPECT_GT(r->error->p_quant, 0);
    EXPECT_EQ(r->error->nonfinite, 0);
  }
}

// FP8 codes and descales computed on the client go through as they are.
TEST_P(E2eOpsTest, Fp8AttentionTakesFp8InputsWithDescales) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  HostTensor q = numerics::GaussianBf16({1, 2, 50, 128}, seed);
  HostTensor k = numerics::GaussianBf16({1, 2, 100, 128}, seed + 1);
  HostTensor v = numerics::GaussianBf16({1, 2, 100, 128}, seed + 2);
  Fp8AttentionParams p;
  p.causal = true;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc(), nullptr, nullptr, nullptr).ok());
  auto quant = oracle::QuantizeAttentionInputs(p, Fp8AttentionInputs{q.view(), k.view(), v.view(), {}, {}, {}});
  ASSERT_TRUE(quant.ok()) << quant.status();
  auto descale = [](float d) {
    HostTensor t(DType::kFp32, {1});
    t.data<float>()[0] = d;
    return t;
  };
  HostTensor qd = descale(quant->q_descale[0]), kd = descale(quant->k_descale[0]), vd = descale(quant->v_descale[0]);
  Fp8AttentionArgs a;
  a.q = quant->q;
  a.k = quant->k;
  a.v = quant->v;
  a.q_descale = qd;
  a.k_descale = kd;
  a.v_descale = vd;
  a.report_error = true;
  ASSERT_EQ(quant->q.dtype(), DType::kFp8E4M3Fn);
  auto r = client_->Fp8Attention(a);
  ASSERT_TRUE(r.ok()) << r.status();
  auto ref = oracle::Fp8Attention(p, *quant, oracle::PQuant::kAsParams);
  ASSERT_TRUE(ref.ok());
  ExpectFp8AttentionMatchesOracle(r->out, *ref, 128);
  EXPECT_LT(RelRms(r->out, *ref), 5e-3);

  // FP8 inputs without descales are refused with INVALID_ARGUMENT.
  a.q_descale = TensorArg();
  auto bad = client_->Fp8Attention(a);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
}

// -------------------------------------------------------------- MLA decode

TEST_P(E2eOpsTest, MlaDecodeContiguousMatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  std::mt19937_64 rng(seed);
  const int64_t B = 2, q_len = 2, H = 8, S = 90;
  HostTensor q_lat = numerics::GaussianBf16({B, q_len, H, 512}, seed);
  HostTensor q_pe = numerics::GaussianBf16({B, q_len, H, 64}, seed + 1);
  HostTensor kv = RandomFp8({B, S, 576}, DType::kFp8E4M3Fn, rng, 2.0);
  HostTensor seq_lens = Int32s({90, 41});
  MlaDecodeArgs a;
  a.q_lat = q_lat;
  a.q_pe = q_pe;
  a.kv = kv;
  a.kv_scale = 0.05;
  a.seq_lens = seq_lens;
  a.num_splits = 3;
  a.report_error = true;
  auto r = client_->MlaDecode(a);
  ASSERT_TRUE(r.ok()) << r.status();
  MlaDecodeParams p;
  p.kv_scale = 0.05;
  p.num_splits = 3;
  ASSERT_TRUE(p.Validate(q_lat.desc(), q_pe.desc(), kv.desc(), false, 1, &seq_lens, nullptr, nullptr, nullptr).ok());
  MlaDecodeInputs in{q_lat.view(), q_pe.view(), kv.view(), seq_lens.view(), {}, {}, {}};
  auto ref = oracle::MlaDecode(p, in);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ExpectBf16MatchesOracle(r->out, *ref, Rounding::kRtne, 1e-4, 0.8);
  ASSERT_TRUE(r->error.has_value());
  EXPECT_LT(r->error->rel_rms, 5e-3);
  // Split-KV partials merge in a fixed order: a second call is bit-identical.
  auto again = client_->MlaDecode(a);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->out.storage(), r->out.storage());
}

struct PoolCase {
  int page_size;
  Fp8Format format;
};

TEST_P(E2eOpsTest, MlaDecodeThroughAPoolLifecycle) {
  for (const PoolCase& pc : {PoolCase{1, Fp8Format::kE4M3Fn}, PoolCase{4, Fp8Format::kE4M3Fnuz}}) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(absl::StrCat("seed=", seed, " page_size=", pc.page_size));
    std::mt19937_64 rng(seed);
    const DType fp8 = numerics::Fp8FormatToDType(pc.format);
    const int64_t P = pc.page_size, num_slots = 96, num_pages = num_slots / P;
    const double kv_scale = 0.03;
    PoolSpec spec;
    spec.kind = v1::MLA_FUSED;
    spec.num_slots = num_slots;
    spec.page_size = pc.page_size;
    spec.dtype = fp8;
    spec.kv_scale = kv_scale;
    spec.label = "mla-test";
    auto pool = client_->CreatePool(spec);
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_EQ(pool->row_elements(), 576);

    // Two requests of 37 and 22 tokens on random, disjoint pages.
    const std::vector<int32_t> lens = {37, 22};
    std::vector<int32_t> pages(num_pages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    std::vector<int32_t> indices, indptr = {0};
    int64_t next = 0;
    for (int32_t len : lens) {
      const int64_t n = P == 1 ? len : (len + P - 1) / P;
      for (int64_t i = 0; i < n; ++i) indices.push_back(pages[next++]);
      indptr.push_back(static_cast<int32_t>(indices.size()));
    }
    // The rows the requests read, written in a shuffled order.
    std::vector<int32_t> slots;
    for (size_t b = 0; b < lens.size(); ++b) {
      for (int32_t t = 0; t < lens[b]; ++t) slots.push_back(indices[indptr[b] + t / P] * static_cast<int32_t>(P) + t % P);
    }
    std::shuffle(slots.begin(), slots.end(), rng);
    const int64_t n = static_cast<int64_t>(slots.size());
    HostTensor rows = RandomFp8({n, 576}, fp8, rng, 2.0);
    HostTensor slot_tensor = Int32s(slots);
    auto written = client_->WritePool(pool->id(), slot_tensor, rows, /*rows_per_chunk=*/7);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(written->rows_written(), n);

    // The host copy of the pool the oracle reads (unwritten rows are never read).
    HostTensor pool_rows(fp8, {num_slots, 576});
    for (int64_t i = 0; i < n; ++i) std::memcpy(pool_rows.bytes() + slots[i] * 576, rows.bytes() + i * 576, 576);

    // Reading back gives the written rows.
    auto back = client_->ReadPool(pool->id(), slot_tensor);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->shape(), (Shape{n, 576}));
    EXPECT_EQ(back->storage(), rows.storage());
    auto range = client_->ReadPoolRange(pool->id(), slots[0], 1);
    ASSERT_TRUE(range.ok()) << range.status();
    EXPECT_EQ(0, std::memcmp(range->bytes(), rows.bytes(), 576));

    auto stats = client_->PoolStats(pool->id());
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->rows_written(), n);
    EXPECT_EQ(stats->num_slots(), num_slots);
    EXPECT_EQ(stats->page_size(), pc.page_size);
    EXPECT_DOUBLE_EQ(stats->kv_scale(), kv_scale);
    auto pools = client_->ListPools();
    ASSERT_TRUE(pools.ok());
    ASSERT_EQ(pools->size(), 1u);
    EXPECT_EQ((*pools)[0].id(), pool->id());

    const int64_t B = 2, q_len = 3, H = 4;
    HostTensor q_lat = numerics::GaussianBf16({B, q_len, H, 512}, seed + 1);
    HostTensor q_pe = numerics::GaussianBf16({B, q_len, H, 64}, seed + 2);
    HostTensor seq_lens = Int32s(lens), kv_indices = Int32s(indices), kv_indptr = Int32s(indptr);
    HostTensor q_lens = Int32s({3, 2});  // ragged: request 1 has two draft tokens
    MlaDecodeArgs a;
    a.q_lat = q_lat;
    a.q_pe = q_pe;
    a.pool_id = pool->id();
    a.seq_lens = seq_lens;
    a.kv_indices = kv_indices;
    a.kv_indptr = kv_indptr;
    a.q_lens = q_lens;
    a.report_error = true;
    auto r = client_->MlaDecode(a);
    ASSERT_TRUE(r.ok()) << r.status();

    MlaDecodeParams p;
    p.kv_scale = kv_scale;
    ASSERT_TRUE(p.Validate(q_lat.desc(), q_pe.desc(), pool_rows.desc(), true, P, &seq_lens, &kv_indices, &kv_indptr,
                           &q_lens)
                    .ok());
    MlaDecodeInputs in{q_lat.view(),      q_pe.view(),      pool_rows.view(), seq_lens.view(),
                       kv_indices.view(), kv_indptr.view(), q_lens.view()};
    auto ref = oracle::MlaDecode(p, in);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ExpectBf16MatchesOracle(r->out, *ref, Rounding::kRtne, 1e-4, 0.8);
    // Request 1's third draft row is past its window: zeros.
    const uint16_t* o = r->out.data<uint16_t>();
    for (int64_t i = 0; i < H * 512; ++i) ASSERT_EQ(o[((1 * q_len + 2) * H) * 512 + i] & 0x7FFF, 0) << i;

    // A slot outside the pool is refused and nothing of that message is written.
    HostTensor bad_slots = Int32s({0, static_cast<int32_t>(num_slots)});
    HostTensor two_rows = RandomFp8({2, 576}, fp8, rng, 1.0);
    auto bad = client_->WritePool(pool->id(), bad_slots, two_rows);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();

    ASSERT_TRUE(client_->DeletePool(pool->id()).ok());
    auto after = client_->MlaDecode(a);
    EXPECT_EQ(after.status().code(), absl::StatusCode::kNotFound) << after.status();
    EXPECT_EQ(client_->PoolStats(pool->id()).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(client_->DeletePool(pool->id()).code(), absl::StatusCode::kNotFound);
    pools = client_->ListPools();
    ASSERT_TRUE(pools.ok());
    EXPECT_TRUE(pools->empty());
  }
}

struct DecodePoolCase {
  int page_size;
  DType dtype;
  double kv_scale;
};

// Decode attention on PER_HEAD_KV pools through the client library: GQA 2:1,
// ragged windows, pages scattered over the pool, against the fp64 oracle on a
// host copy of the pool (and the server's own error report); bad requests name
// their field and leave the pool as it was.
TEST_P(E2eOpsTest, DecodeAttentionOverPerHeadPools) {
  for (const DecodePoolCase& pc : {DecodePoolCase{1, DType::kBf16, 0}, DecodePoolCase{4, DType::kFp8E4M3Fn, 0.125},
                                   DecodePoolCase{16, DType::kFp8E4M3Fnuz, 0.5}}) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(absl::StrCat("seed=", seed, " page_size=", pc.page_size, " ", DTypeName(pc.dtype)));
    std::mt19937_64 rng(seed);
    const int64_t P = pc.page_size, num_slots = 128, Hkv = 2, Hq = 4, D = 64, row = 2 * Hkv * D;
    PoolSpec spec;
    spec.kind = v1::PER_HEAD_KV;
    spec.num_slots = num_slots;
    spec.page_size = pc.page_size;
    spec.dtype = pc.dtype;
    spec.num_heads = static_cast<int>(Hkv);
    spec.head_dim = static_cast<int>(D);
    spec.kv_scale = pc.kv_scale;
    auto pool = client_->CreatePool(spec);
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_EQ(pool->row_elements(), row);

    const std::vector<int32_t> lens = {45, 3};
    std::vector<int32_t> pages(num_slots / P);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    std::vector<int32_t> indices, indptr = {0}, slots;
    for (int32_t len : lens) {
      const int64_t first = static_cast<int64_t>(indices.size());
      for (int64_t i = 0; i < (len + P - 1) / P; ++i) indices.push_back(pages[indices.size()]);
      for (int32_t t = 0; t < len; ++t) slots.push_back(indices[first + t / P] * static_cast<int32_t>(P) + t % P);
      indptr.push_back(static_cast<int32_t>(indices.size()));
    }
    const int64_t n = static_cast<int64_t>(slots.size());
    HostTensor rows = pc.dtype == DType::kBf16 ? numerics::GaussianBf16({n, row}, seed + 3)
                                               : RandomFp8({n, row}, pc.dtype, rng, 4.0);
    ASSERT_TRUE(client_->WritePool(pool->id(), Int32s(slots), rows, /*rows_per_chunk=*/5).ok());
    const int64_t rb = NumBytes(pc.dtype, row);
    HostTensor pool_rows(pc.dtype, {num_slots, row});
    std::memset(pool_rows.bytes(), 0, pool_rows.num_bytes());
    for (int64_t i = 0; i < n; ++i) std::memcpy(pool_rows.bytes() + slots[i] * rb, rows.bytes() + i * rb, rb);

    const int64_t B = 2, q_len = 3;
    HostTensor q = numerics::GaussianBf16({B, q_len, Hq, D}, seed + 1);
    HostTensor seq_lens = Int32s(lens), kv_indices = Int32s(indices), kv_indptr = Int32s(indptr);
    HostTensor q_lens = Int32s({3, 1});
    DecodeAttentionArgs a;
    a.q = q;
    a.pool_id = pool->id();
    a.seq_lens = seq_lens;
    a.kv_indices = kv_indices;
    a.kv_indptr = kv_indptr;
    a.q_lens = q_lens;
    a.report_error = true;
    auto r = client_->DecodeAttention(a);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->error.has_value());
    EXPECT_LT(r->error->rel_rms, 1e-2);
    EXPECT_EQ(r->error->nonfinite, 0);
    EXPECT_EQ(r->info.backend, "cpu");

    DecodeAttentionParams p;
    p.kv_scale = pc.kv_scale == 0 ? 1.0 : pc.kv_scale;
    ASSERT_TRUE(p.Validate(q.desc(), pool_rows.desc(), Hkv, D, P, &seq_lens, &kv_indices, &kv_indptr, &q_lens).ok());
    DecodeAttentionInputs in{q.view(),          pool_rows.view(), seq_lens.view(),
                             kv_indices.view(), kv_indptr.view(), q_lens.view()};
    auto ref = oracle::DecodeAttention(p, in);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ExpectBf16MatchesOracle(r->out, *ref, Rounding::kRtne, 1e-4, 0.8);
    // Request 1 has one new token: its rows 1 and 2 are zeros.
    const uint16_t* o = r->out.data<uint16_t>();
    for (int64_t i = 0; i < 2 * Hq * D; ++i) ASSERT_EQ(o[(1 * q_len + 1) * Hq * D + i] & 0x7FFF, 0) << i;

    // Without q_lens every request needs q_len tokens: request 1 has 3, so it fits.
    DecodeAttentionArgs full = a;
    full.q_lens = TensorArg();
    full.rounding = Rounding::kRtz;
    auto rf = client_->DecodeAttention(full);
    ASSERT_TRUE(rf.ok()) << rf.status();

    // Bad requests name the field; the pool is unchanged and keeps serving.
    HostTensor q128 = numerics::GaussianBf16({B, q_len, Hq, 128}, seed + 4);
    HostTensor q3 = numerics::GaussianBf16({B, q_len, 3, D}, seed + 5);
    HostTensor short_lens = Int32s({45, 2});
    HostTensor bad_indices = Int32s(indices);
    bad_indices.data<int32_t>()[1] = static_cast<int32_t>(num_slots / P);
    struct Bad {
      const char* what;
      std::function<void(DecodeAttentionArgs*)> edit;
      std::string message;
    };
    const std::vector<Bad> bads = {
        {"head_dim", [&](DecodeAttentionArgs* x) { x->q = q128; },
         "q.shape[3]: expected 64 (the pool's head_dim), got 128"},
        {"gqa", [&](DecodeAttentionArgs* x) { x->q = q3; }, "q.shape[2]: expected a multiple of the pool's num_heads (2)"},
        {"seq_len", [&](DecodeAttentionArgs* x) {
           x->q_lens = TensorArg();
           x->seq_lens = short_lens;
         }, "seq_lens[1]: expected at least q_len (3), got 2"},
        {"index", [&](DecodeAttentionArgs* x) { x->kv_indices = bad_indices; },
         absl::StrCat("kv_indices[1]: expected a ", P == 1 ? "slot" : "page", " in 0..", num_slots / P - 1)},
    };
    for (const Bad& bad : bads) {
      DecodeAttentionArgs x = a;
      bad.edit(&x);
      auto st = client_->DecodeAttention(x);
      EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument) << bad.what << ": " << st.status();
      EXPECT_THAT(std::string(st.status().message()), HasSubstr(bad.message)) << bad.what;
    }
    auto stats = client_->PoolStats(pool->id());
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->rows_written(), n);
    auto again = client_->DecodeAttention(a);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->out.storage(), r->out.storage());

    ASSERT_TRUE(client_->DeletePool(pool->id()).ok());
    EXPECT_EQ(client_->DecodeAttention(a).status().code(), absl::StatusCode::kNotFound);
  }
}

TEST_P(E2eOpsTest, DecodeAttentionRefusesAnMlaPool) {
  PoolSpec spec;
  spec.kind = v1::MLA_FUSED;
  spec.num_slots = 8;
  spec.dtype = DType::kFp8E4M3Fn;
  auto pool = client_->CreatePool(spec);
  ASSERT_TRUE(pool.ok()) << pool.status();
  HostTensor q = numerics::GaussianBf16({1, 1, 2, 64}, 1);
  HostTensor seq_lens = Int32s({1}), kv_indices = Int32s({0}), kv_indptr = Int32s({0, 1});
  DecodeAttentionArgs a;
  a.q = q;
  a.pool_id = pool->id();
  a.seq_lens = seq_lens;
  a.kv_indices = kv_indices;
  a.kv_indptr = kv_indptr;
  auto r = client_->DecodeAttention(a);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("is MLA_FUSED; decode attention needs a PER_HEAD_KV pool"));
}

TEST_P(E2eOpsTest, PerHeadBf16PoolRoundTrip) {
  PoolSpec spec;
  spec.kind = v1::PER_HEAD_KV;
  spec.num_slots = 40;
  spec.dtype = DType::kBf16;
  spec.num_heads = 2;
  spec.head_dim = 64;
  auto pool = client_->CreatePool(spec);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(pool->row_elements(), 2 * 2 * 64);
  // Rows shaped [n, 2, heads, head_dim] travel as [n, row_elements].
  HostTensor rows = numerics::GaussianBf16({5, 2, 2, 64}, FreshSeed());
  HostTensor slots = Int32s({39, 0, 7, 8, 20});
  auto w = client_->WritePool(pool->id(), slots, rows, 2);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->rows_written(), 5);
  auto back = client_->ReadPool(pool->id(), slots);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape(), (Shape{5, 256}));
  EXPECT_EQ(back->storage(), rows.storage());
  // Rows of the wrong dtype are refused by the server.
  HostTensor fp8_rows(DType::kFp8E4M3Fn, {1, 256});
  auto bad = client_->WritePool(pool->id(), Int32s({1}), fp8_rows);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("dtype"));
  EXPECT_TRUE(client_->DeletePool(pool->id()).ok());
}

// --------------------------------------------------------------------- MoE

struct MoeData {
  int64_t T = 5, K = 128, I = 64, N = 128, E = 6, top_k = 2;  // a layer needs N == K
  HostTensor x, a, ids, weights, w13, w13s, w2, w2s;
};

MoeData MakeMoe(uint64_t seed) {
  MoeData d;
  std::mt19937_64 rng(seed);
  d.x = numerics::GaussianBf16({d.T, d.K}, seed);
  d.a = numerics::GaussianBf16({d.T * d.top_k, d.I}, seed + 1);
  d.ids = HostTensor(DType::kInt32, {d.T, d.top_k});
  d.weights = HostTensor(DType::kFp32, {d.T, d.top_k});
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  for (int64_t t = 0; t < d.T; ++t) {
    std::vector<int32_t> e(d.E);
    std::iota(e.begin(), e.end(), 0);
    std::shuffle(e.begin(), e.end(), rng);
    for (int64_t r = 0; r < d.top_k; ++r) {
      d.ids.data<int32_t>()[t * d.top_k + r] = e[r];
      d.weights.data<float>()[t * d.top_k + r] = u(rng);
    }
  }
  auto bytes = [&](HostTensor& t, uint8_t lo, uint8_t hi) {
    std::uniform_int_distribution<int> b(lo, hi);
    for (int64_t i = 0; i < t.num_bytes(); ++i) t.bytes()[i] = static_cast<uint8_t>(b(rng));
  };
  d.w13 = HostTensor(DType::kFp4E2M1, {d.E, 2 * d.I, d.K});
  d.w13s = HostTensor(DType::kE8M0, {d.E, 2 * d.I, d.K / 32});
  d.w2 = HostTensor(DType::kFp4E2M1, {d.E, d.N, d.I});
  d.w2s = HostTensor(DType::kE8M0, {d.E, d.N, d.I / 32});
  bytes(d.w13, 0, 255);
  bytes(d.w2, 0, 255);
  bytes(d.w13s, 122, 126);  // 2^-5 .. 2^-1
  bytes(d.w2s, 122, 126);
  return d;
}

TEST_P(E2eOpsTest, MoeStagesMatchOracle) {
  struct StageCase {
    MoeStage stage;
    bool swiglu, weighted;
  };
  const StageCase cases[] = {{MoeStage::kGateUp, false, false},
                             {MoeStage::kGateUp, true, false},
                             {MoeStage::kDown, false, false},
                             {MoeStage::kDown, false, true},
                             {MoeStage::kLayer, false, false}};
  for (const StageCase& c : cases) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(absl::StrCat("seed=", seed, " stage=", static_cast<int>(c.stage), " swiglu=", c.swiglu,
                              " weighted=", c.weighted));
    MoeData d = MakeMoe(seed);
    const bool down = c.stage == MoeStage::kDown;
    const bool needs_w13 = c.stage != MoeStage::kDown;
    const bool needs_w2 = c.stage != MoeStage::kGateUp;
    const bool needs_weights = c.stage == MoeStage::kLayer || c.weighted;
    MoeArgs a;
    a.stage = c.stage;
    a.x = down ? d.a : d.x;
    a.topk_ids = d.ids;
    if (needs_weights) a.topk_weights = d.weights;
    if (needs_w13) {
      a.w13 = d.w13;
      a.w13_scales = d.w13s;
    }
    if (needs_w2) {
      a.w2 = d.w2;
      a.w2_scales = d.w2s;
    }
    a.swiglu = c.swiglu;
    a.weighted_sum = c.weighted;
    a.report_error = true;
    auto r = client_->Moe(a);
    ASSERT_TRUE(r.ok()) << r.status();

    MoeParams p;
    p.stage = c.stage;
    p.swiglu = c.swiglu;
    p.weighted_sum = c.weighted;
    const HostTensor& x = down ? d.a : d.x;
    const TensorDesc wd = d.weights.desc(), w13d = d.w13.desc(), w13sd = d.w13s.desc(), w2d = d.w2.desc(),
                     w2sd = d.w2s.desc();
    ASSERT_TRUE(p.Validate(x.desc(), d.ids, needs_weights ? &wd : nullptr, needs_w13 ? &w13d : nullptr,
                           needs_w13 ? &w13sd : nullptr, needs_w2 ? &w2d : nullptr, needs_w2 ? &w2sd : nullptr)
                    .ok());
    MoeInputs in{x.view(),
                 d.ids.view(),
                 needs_weights ? d.weights.view() : TensorView{},
                 needs_w13 ? d.w13.view() : TensorView{},
                 needs_w13 ? d.w13s.view() : TensorView{},
                 needs_w2 ? d.w2.view() : TensorView{},
                 needs_w2 ? d.w2s.view() : TensorView{}};
    auto ref = oracle::Moe(p, in);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_EQ(r->out.shape(), p.OutputDesc().shape);
    if (c.stage == MoeStage::kLayer) {
      // The intermediate is rounded to bf16 on both sides; a one-ulp
      // difference there moves the output by more than one ulp.
      EXPECT_LT(RelRms(r->out, *ref), 5e-3);
    } else {
      ExpectBf16MatchesOracle(r->out, *ref, Rounding::kRtne, 1e-4, 0.8);
    }
    ASSERT_TRUE(r->error.has_value());
    EXPECT_EQ(r->error->nonfinite, 0);
  }
}

TEST_P(E2eOpsTest, MoeBadRoutingIsInvalidArgumentAndNextCallWorks) {
  MoeData d = MakeMoe(FreshSeed());
  d.ids.data<int32_t>()[3] = static_cast<int32_t>(d.E);  // expert out of range
  MoeArgs a;
  a.stage = MoeStage::kGateUp;
  a.x = d.x;
  a.topk_ids = d.ids;
  a.w13 = d.w13;
  a.w13_scales = d.w13s;
  auto r = client_->Moe(a);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  d.ids.data<int32_t>()[3] = 0;
  d.ids.data<int32_t>()[2] = 1;
  a.topk_ids = d.ids;
  EXPECT_TRUE(client_->Moe(a).ok());
}

INSTANTIATE_TEST_SUITE_P(UnaryAndSession, E2eOpsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Session" : "Unary"; });

}  // namespace
}  // namespace kernelserve
