#include "kernels/api/ops.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;

TensorDesc Bf16(Shape s) { return TensorDesc{DType::kBf16, std::move(s)}; }

void ExpectInvalid(const absl::Status& s, const std::string& field, const std::string& what) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(field)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(what)) << s;
}

HostTensor Ints(std::vector<int32_t> v) {
  HostTensor t(DType::kInt32, {static_cast<int64_t>(v.size())});
  std::memcpy(t.bytes(), v.data(), v.size() * 4);
  return t;
}

TEST(AttentionValidate, FillsDimsForBothLayouts) {
  AttentionParams p;
  ASSERT_TRUE(p.Validate(Bf16({2, 8, 17, 128}), Bf16({2, 2, 33, 128}), Bf16({2, 2, 33, 128})).ok());
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.heads_q, 8);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.seq_q, 17);
  EXPECT_EQ(p.seq_kv, 33);
  EXPECT_DOUBLE_EQ(p.scale, 1.0 / std::sqrt(128.0));
  EXPECT_EQ(p.OutputDesc().shape, (Shape{2, 8, 17, 128}));

  AttentionParams s;
  s.layout = Layout::kBshd;
  s.softmax_scale = 0.5;
  ASSERT_TRUE(s.Validate(Bf16({1, 5, 4, 64}), Bf16({1, 9, 2, 64}), Bf16({1, 9, 2, 64})).ok());
  EXPECT_EQ(s.heads_q, 4);
  EXPECT_EQ(s.seq_q, 5);
  EXPECT_EQ(s.seq_kv, 9);
  EXPECT_EQ(s.scale, 0.5);
  EXPECT_EQ(s.OutputDesc().shape, (Shape{1, 5, 4, 64}));
}

TEST(AttentionValidate, RejectsBadInputsNamingTheField) {
  const TensorDesc q = Bf16({1, 4, 16, 128}), kv = Bf16({1, 4, 16, 128});
  AttentionParams p;
  ExpectInvalid(p.Validate(TensorDesc{DType::kFp32, {1, 4, 16, 128}}, kv, kv), "q", "expected bf16, got fp32");
  ExpectInvalid(p.Validate(Bf16({1, 4, 16}), kv, kv), "q.shape", "rank 4");
  ExpectInvalid(p.Validate(Bf16({1, 4, 0, 128}), kv, kv), "q.shape[2]", "positive");
  ExpectInvalid(p.Validate(Bf16({1, -4, 16, 128}), kv, kv), "q.shape[1]", "positive");
  ExpectInvalid(p.Validate(q, Bf16({1, 4, 16, 64}), kv), "k.shape[3]", "128 (q head_dim)");
  ExpectInvalid(p.Validate(q, kv, Bf16({1, 4, 15, 128})), "v.shape[2]", "16 (k sequence length)");
  ExpectInvalid(p.Validate(q, Bf16({1, 3, 16, 128}), Bf16({1, 3, 16, 128})), "k.shape[1]", "GQA");
  ExpectInvalid(p.Validate(Bf16({1, 4, 16, 512}), Bf16({1, 4, 16, 512}), Bf16({1, 4, 16, 512})),
                "q.shape[3]", "at most 256");
  p.softmax_scale = -1;
  ExpectInvalid(p.Validate(q, kv, kv), "softmax_scale", "positive");
  p.softmax_scale = NAN;
  ExpectInvalid(p.Validate(q, kv, kv), "softmax_scale", "positive");
}

TEST(Fp8AttentionValidate, InputKindsAndDescales) {
  Fp8AttentionParams p;
  ASSERT_TRUE(p.Validate(Bf16({1, 2, 64, 192}), Bf16({1, 2, 64, 192}), Bf16({1, 2, 64, 128}),
                         nullptr, nullptr, nullptr).ok());
  EXPECT_FALSE(p.fp8_inputs);
  EXPECT_EQ(p.OutputDesc().shape, (Shape{1, 2, 64, 128}));
  ExpectInvalid(p.Validate(Bf16({1, 2, 64, 64}), Bf16({1, 2, 64, 64}), Bf16({1, 2, 64, 64}),
                           nullptr, nullptr, nullptr),
                "head shape", "(128, 128) or (192, 128)");

  const TensorDesc f8{DType::kFp8E4M3Fn, {1, 2, 64, 128}};
  const TensorDesc one{DType::kFp32, {1}}, per_head{DType::kFp32, {1, 2}};
  Fp8AttentionParams q;
  ASSERT_TRUE(q.Validate(f8, f8, f8, &one, &per_head, &one).ok());
  EXPECT_TRUE(q.fp8_inputs);
  ExpectInvalid(q.Validate(f8, f8, f8, &one, nullptr, &one), "k_descale", "for FP8 inputs");
  const TensorDesc bad{DType::kFp32, {2}};
  ExpectInvalid(q.Validate(f8, f8, f8, &bad, &one, &one), "q_descale.shape", "[1] or [1,2]");
  q.hadamard = true;
  ExpectInvalid(q.Validate(f8, f8, f8, &one, &one, &one), "hadamard", "bf16 inputs");
  Fp8AttentionParams fnuz;
  fnuz.format = Fp8Format::kE4M3Fnuz;
  ExpectInvalid(fnuz.Validate(f8, f8, f8, &one, &one, &one), "q", "fp8_e4m3fnuz");
}

TEST(MlaDecodeValidate, ContiguousAndPaged) {
  const TensorDesc q_lat = Bf16({2, 4, 16, 512}), q_pe = Bf16({2, 4, 16, 64});
  const TensorDesc kv{DType::kFp8E4M3Fn, {2, 100, 576}};
  MlaDecodeParams p;
  ASSERT_TRUE(p.Validate(q_lat, q_pe, kv, false, 1, nullptr, nullptr, nullptr, nullptr).ok());
  EXPECT_EQ(p.max_seq, 100);
  EXPECT_EQ(p.OutputDesc().shape, (Shape{2, 4, 16, 512}));
  HostTensor too_long = Ints({10, 101});
  ExpectInvalid(p.Validate(q_lat, q_pe, kv, false, 1, &too_long, nullptr, nullptr, nullptr),
                "seq_lens[1]", "1..100");
  HostTensor ql = Ints({1, 5});
  ExpectInvalid(p.Validate(q_lat, q_pe, kv, false, 1, nullptr, nullptr, nullptr, &ql), "q_lens[1]",
                "1..4");
  // Each request's seq_lens[b] against its own q_lens[b], not against q_len (4): request 0 with 2
  // tokens and a window of 2 is fine; request 1 with 2 tokens and a window of 3 is not.
  HostTensor ragged = Ints({2, 3}), short_seq = Ints({2, 2}), enough = Ints({2, 3});
  ASSERT_TRUE(p.Validate(q_lat, q_pe, kv, false, 1, &enough, nullptr, nullptr, &ragged).ok());
  ExpectInvalid(p.Validate(q_lat, q_pe, kv, false, 1, &short_seq, nullptr, nullptr, &ragged), "seq_lens[1]",
                "at least q_lens[1] (3), got 2");
  ExpectInvalid(p.Validate(q_lat, q_pe, kv, false, 1, &short_seq, nullptr, nullptr, nullptr), "seq_lens[0]",
                "at least q_len (4)");

  const TensorDesc pool{DType::kFp8E4M3Fn, {64, 576}};
  HostTensor seq = Ints({4, 5}), indptr = Ints({0, 4, 9});
  HostTensor idx = Ints({0, 9, 2, 63, 4, 5, 6, 7, 8});
  ASSERT_TRUE(p.Validate(q_lat, q_pe, pool, true, 1, &seq, &idx, &indptr, nullptr).ok());
  EXPECT_EQ(p.max_seq, 5);
  EXPECT_EQ(p.num_slots, 64);
  HostTensor bad_idx = Ints({0, 9, 2, 64, 4, 5, 6, 7, 8});
  ExpectInvalid(p.Validate(q_lat, q_pe, pool, true, 1, &seq, &bad_idx, &indptr, nullptr),
                "kv_indices[3]", "0..63");
  HostTensor short_ptr = Ints({0, 4, 8});
  ExpectInvalid(p.Validate(q_lat, q_pe, pool, true, 1, &seq, &idx, &short_ptr, nullptr),
                "kv_indptr[2] - kv_indptr[1]", "at least 5 slots");
  // Pages of 16: 64 slots are 4 pages; seq 5 needs one page.
  HostTensor pages = Ints({3, 1}), pptr = Ints({0, 1, 2});
  ASSERT_TRUE(p.Validate(q_lat, q_pe, pool, true, 16, &seq, &pages, &pptr, nullptr).ok());
  HostTensor bad_page = Ints({3, 4});
  ExpectInvalid(p.Validate(q_lat, q_pe, pool, true, 16, &seq, &bad_page, &pptr, nullptr),
                "kv_indices[1]", "a page in 0..3");
  ExpectInvalid(p.Validate(q_lat, q_pe, pool, true, 1, nullptr, &idx, &indptr, nullptr), "seq_lens",
                "with a pool");
  HostTensor seq64(DType::kInt64, {2});
  seq64.data<int64_t>()[0] = 4;
  seq64.data<int64_t>()[1] = 5;
  ExpectInvalid(p.Validate(q_lat, q_pe, pool, true, 1, &seq64, &idx, &indptr, nullptr), "seq_lens",
                "expected int32, got int64");
  const TensorDesc bf16_kv = Bf16({2, 100, 576});
  ExpectInvalid(p.Validate(q_lat, q_pe, bf16_kv, false, 1, nullptr, nullptr, nullptr, nullptr), "kv",
                "fp8_e4m3fn or fp8_e4m3fnuz");
  ExpectInvalid(p.Validate(Bf16({2, 9, 16, 512}), Bf16({2, 9, 16, 64}), kv, false, 1, nullptr, nullptr,
                           nullptr, nullptr),
                "q_lat.shape[1]", "1..8");
}

TEST(DecodeAttentionValidate, PerHeadPoolsNamingTheField) {
  // Pool of 8 pages of 4 slots, 2 KV heads of 64: rows of 256 bf16.
  const TensorDesc pool{DType::kBf16, {32, 256}};
  const HostTensor seq = Ints({5, 2}), indptr = Ints({0, 2, 3}), indices = Ints({7, 0, 3});
  auto run = [&](DecodeAttentionParams& p, const TensorDesc& q, const TensorDesc& kv, int64_t heads,
                 int64_t dim, const HostTensor* s, const HostTensor* idx, const HostTensor* ptr,
                 const HostTensor* ql) { return p.Validate(q, kv, heads, dim, 4, s, idx, ptr, ql); };
  DecodeAttentionParams ok;
  ASSERT_TRUE(run(ok, Bf16({2, 2, 8, 64}), pool, 2, 64, &seq, &indices, &indptr, nullptr).ok());
  EXPECT_EQ(ok.heads_q, 8);
  EXPECT_EQ(ok.heads_kv, 2);
  EXPECT_EQ(ok.max_seq, 5);
  EXPECT_DOUBLE_EQ(ok.scale, 1.0 / 8.0);
  EXPECT_EQ(ok.OutputDesc().shape, (Shape{2, 2, 8, 64}));
  struct Bad {
    TensorDesc q;
    int64_t heads, dim;
    const HostTensor *s, *idx, *ptr, *ql;
    std::string field, what;
  };
  const HostTensor seq_short = Ints({5, 1}), ql_ok = Ints({2, 1}), ql_big = Ints({3, 1});
  const HostTensor idx_oob = Ints({7, 8, 3}), ptr_short = Ints({0, 1, 2});
  const HostTensor seq_i64(DType::kInt64, {2});
  const std::vector<Bad> bad = {
      {Bf16({2, 9, 8, 64}), 2, 64, &seq, &indices, &indptr, nullptr, "q.shape[1]", "q_len in 1..8, got 9"},
      {Bf16({2, 2, 8, 128}), 2, 64, &seq, &indices, &indptr, nullptr, "q.shape[3]",
       "expected 64 (the pool's head_dim), got 128"},
      {Bf16({2, 2, 6, 64}), 4, 32, &seq, &indices, &indptr, nullptr, "q.shape[3]", "expected 32"},
      {Bf16({2, 2, 7, 64}), 2, 64, &seq, &indices, &indptr, nullptr, "q.shape[2]",
       "a multiple of the pool's num_heads (2) for GQA, got 7"},
      {Bf16({2, 2, 8, 64}), 2, 64, &seq_short, &indices, &indptr, nullptr, "seq_lens[1]",
       "at least q_len (2), got 1"},
      // Each request's seq_len is checked against its own q_len.
      {Bf16({2, 2, 8, 64}), 2, 64, &seq_short, &indices, &indptr, &ql_ok, "", ""},
      {Bf16({2, 2, 8, 64}), 2, 64, &seq, &indices, &indptr, &ql_big, "q_lens[0]", "1..2 (q_len), got 3"},
      {Bf16({2, 2, 8, 64}), 2, 64, &seq, &idx_oob, &indptr, nullptr, "kv_indices[1]", "a page in 0..7, got 8"},
      {Bf16({2, 2, 8, 64}), 2, 64, &seq, &indices, &ptr_short, nullptr, "kv_indptr[1] - kv_indptr[0]",
       "at least 2 pages for seq_lens[0]=5"},
      {Bf16({2, 2, 8, 64}), 2, 64, nullptr, &indices, &indptr, nullptr, "seq_lens", "an int32 [B] tensor"},
      {Bf16({2, 2, 8, 64}), 2, 64, &seq_i64, &indices, &indptr, nullptr, "seq_lens", "int32, got int64"},
  };
  for (const Bad& b : bad) {
    DecodeAttentionParams p;
    const absl::Status st = run(p, b.q, pool, b.heads, b.dim, b.s, b.idx, b.ptr, b.ql);
    SCOPED_TRACE(b.field + " " + b.what);
    if (b.field.empty()) {
      EXPECT_TRUE(st.ok()) << st;
    } else {
      ExpectInvalid(st, b.field, b.what);
    }
  }
  DecodeAttentionParams p;
  ExpectInvalid(run(p, TensorDesc{DType::kFp32, {2, 2, 8, 64}}, pool, 2, 64, &seq, &indices, &indptr, nullptr),
                "q", "expected bf16, got fp32");
  ExpectInvalid(run(p, Bf16({2, 2, 8, 64}), TensorDesc{DType::kFp32, {32, 256}}, 2, 64, &seq, &indices, &indptr,
                    nullptr),
                "pool_id", "bf16 or fp8");
  p.softmax_scale = -1;
  ExpectInvalid(run(p, Bf16({2, 2, 8, 64}), pool, 2, 64, &seq, &indices, &indptr, nullptr), "softmax_scale",
                "finite positive");
}

TEST(MoeValidate, StagesShapesAndIds) {
  const int64_t T = 3, top_k = 2, E = 4, K = 64, I = 32;
  HostTensor ids(DType::kInt32, {T, top_k});
  for (int i = 0; i < T * top_k; ++i) ids.data<int32_t>()[i] = i % E;
  const TensorDesc x = Bf16({T, K});
  const TensorDesc w13{DType::kFp4E2M1, {E, 2 * I, K}}, w13s{DType::kE8M0, {E, 2 * I, K / 32}};
  const TensorDesc w2{DType::kFp4E2M1, {E, K, I}}, w2s{DType::kE8M0, {E, K, I / 32}};
  const TensorDesc wts{DType::kFp32, {T, top_k}};
  MoeParams p;
  p.stage = MoeStage::kLayer;
  ASSERT_TRUE(p.Validate(x, ids, &wts, &w13, &w13s, &w2, &w2s).ok());
  EXPECT_EQ(p.experts, E);
  EXPECT_EQ(p.inter, I);
  EXPECT_EQ(p.out_dim, K);
  EXPECT_EQ(p.OutputDesc().shape, (Shape{T, K}));

  MoeParams g;
  g.stage = MoeStage::kGateUp;
  g.swiglu = true;
  ASSERT_TRUE(g.Validate(x, ids, nullptr, &w13, &w13s, nullptr, nullptr).ok());
  EXPECT_EQ(g.OutputDesc().shape, (Shape{T * top_k, I}));

  MoeParams d;
  d.stage = MoeStage::kDown;
  d.weighted_sum = true;
  ASSERT_TRUE(d.Validate(Bf16({T * top_k, I}), ids, &wts, nullptr, nullptr, &w2, &w2s).ok());
  EXPECT_EQ(d.OutputDesc().shape, (Shape{T, K}));
  ExpectInvalid(d.Validate(Bf16({T * top_k, I}), ids, nullptr, nullptr, nullptr, &w2, &w2s),
                "topk_weights", "fp32");

  ids.data<int32_t>()[3] = E;
  ExpectInvalid(p.Validate(x, ids, &wts, &w13, &w13s, &w2, &w2s), "topk_ids[1,1]", "0..3");
  ids.data<int32_t>()[3] = 0;
  const TensorDesc bad_scales{DType::kE8M0, {E, 2 * I, K / 16}};
  ExpectInvalid(p.Validate(x, ids, &wts, &w13, &bad_scales, &w2, &w2s), "w13_scales.shape[2]", "K/32");
  ExpectInvalid(p.Validate(Bf16({T, K + 32}), ids, &wts, &w13, &w13s, &w2, &w2s), "w13.shape[2]",
                "x K");
}

}  // namespace
}  // namespace kernelserve
