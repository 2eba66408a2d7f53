// Kernel calls over a real server on loopback, compared with the fp64 oracle
// on fresh random inputs; bad inputs; the device worker's queue limit and the
// dropping of expired and cancelled calls.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/pool.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/server.h"
#include "server/test_util.h"

namespace kernelserve {
namespace {

namespace pb = ::kernelserve::v1;
using ::kernelserve::testing::Connect;
using ::kernelserve::testing::Download;
using ::kernelserve::testing::RandomBf16;
using ::kernelserve::testing::StartServer;
using ::kernelserve::testing::ToHost;
using ::kernelserve::testing::Upload;
using ::testing::HasSubstr;

pb::TensorRef Inline(const pb::Tensor& t) {
  pb::TensorRef r;
  *r.mutable_tensor() = t;
  return r;
}

pb::TensorRef Buf(const std::string& id) {
  pb::TensorRef r;
  r.set_buffer_id(id);
  return r;
}

// Compares a bf16 output with the oracle's fp64 result rounded once to bf16:
// all finite, max error within 2 bf16 ulps of the value, small relative RMS.
void ExpectMatchesOracle(const std::string& out_bytes, const std::vector<double>& ref) {
  ASSERT_EQ(out_bytes.size(), 2 * ref.size());
  double err2 = 0, ref2 = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, out_bytes.data() + 2 * i, 2);
    const double got = numerics::Bf16ToFloat(bits);
    ASSERT_TRUE(std::isfinite(got)) << "element " << i;
    const double tol = 2 * std::ldexp(1.0, -7) * std::max(std::fabs(ref[i]), 1e-3) + 1e-6;
    if (std::fabs(got - ref[i]) > tol) ++bad;
    err2 += (got - ref[i]) * (got - ref[i]);
    ref2 += ref[i] * ref[i];
  }
  EXPECT_EQ(bad, 0);
  EXPECT_LT(std::sqrt(err2 / ref2), 5e-3);
}

class KernelTest : public ::testing::Test {
 protected:
  void StartWith(ServerOptions options) {
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    channel_ = Connect(server_->port());
    buffers_ = pb::BufferService::NewStub(channel_);
    pools_ = pb::PoolService::NewStub(channel_);
    kernels_ = pb::KernelService::NewStub(channel_);
  }
  void SetUp() override { StartWith(ServerOptions()); }

  std::string UploadOrDie(const pb::Tensor& t) {
    pb::BufferInfo info;
    grpc::Status s = Upload(buffers_.get(), t, 1 << 20, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info.id();
  }

  std::unique_ptr<KernelServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::BufferService::Stub> buffers_;
  std::unique_ptr<pb::PoolService::Stub> pools_;
  std::unique_ptr<pb::KernelService::Stub> kernels_;
};

struct AttnCase {
  int64_t b, hq, hkv, sq, skv, d;
  bool causal;
  pb::Layout layout;
};

std::vector<double> OracleAttention(const AttnCase& c, const pb::Tensor& q, const pb::Tensor& k,
                                    const pb::Tensor& v) {
  AttentionParams p;
  p.layout = c.layout == pb::BSHD ? Layout::kBshd : Layout::kBhsd;
  p.causal = c.causal;
  HostTensor hq = ToHost(q), hk = ToHost(k), hv = ToHost(v);
  EXPECT_TRUE(p.Validate(hq.desc(), hk.desc(), hv.desc()).ok());
  auto ref = oracle::Attention(p, hq, hk, hv);
  EXPECT_TRUE(ref.ok()) << ref.status();
  return ref.ok() ? *ref : std::vector<double>();
}

Shape AttnShape(const AttnCase& c, int64_t h, int64_t s) {
  return c.layout == pb::BSHD ? Shape{c.b, s, h, c.d} : Shape{c.b, h, s, c.d};
}

TEST_F(KernelTest, AttentionMatchesOracle) {
  const AttnCase cases[] = {
      {2, 4, 2, 33, 47, 64, false, pb::BHSD},
      {1, 2, 2, 40, 40, 128, true, pb::BHSD},
      {2, 4, 1, 17, 70, 128, true, pb::BSHD},
  };
  uint64_t seed = 100;
  for (const AttnCase& c : cases) {
    SCOPED_TRACE(c.d);
    pb::Tensor q = RandomBf16(AttnShape(c, c.hq, c.sq), ++seed);
    pb::Tensor k = RandomBf16(AttnShape(c, c.hkv, c.skv), ++seed);
    pb::Tensor v = RandomBf16(AttnShape(c, c.hkv, c.skv), ++seed);
    pb::AttentionRequest req;
    *req.mutable_q() = Inline(q);
    *req.mutable_k() = Inline(k);
    *req.mutable_v() = Inline(v);
    req.set_causal(c.causal);
    req.set_layout(c.layout);
    req.set_report_error(true);
    grpc::ClientContext ctx;
    pb::AttentionResponse resp;
    grpc::Status s = kernels_->Attention(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE(resp.out().has_tensor());
    EXPECT_EQ(resp.out().tensor().dtype(), pb::BF16);
    ASSERT_EQ(resp.out().tensor().shape_size(), 4);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(resp.out().tensor().shape(i), q.shape(i));
    ExpectMatchesOracle(resp.out().tensor().data(), OracleAttention(c, q, k, v));
    EXPECT_GT(resp.error().rel_rms(), 0);
    EXPECT_LT(resp.error().rel_rms(), 5e-3);
    EXPECT_EQ(resp.error().nonfinite(), 0);
    EXPECT_EQ(resp.info().backend(), "cpu");
    EXPECT_GE(resp.info().run_ms(), 0);
  }
}

TEST_F(KernelTest, AttentionOnBuffersIntoBuffer) {
  const AttnCase c{1, 4, 4, 64, 96, 128, true, pb::BHSD};
  pb::Tensor q = RandomBf16(AttnShape(c, c.hq, c.sq), 1);
  pb::Tensor k = RandomBf16(AttnShape(c, c.hkv, c.skv), 2);
  pb::Tensor v = RandomBf16(AttnShape(c, c.hkv, c.skv), 3);
  pb::AttentionRequest req;
  *req.mutable_q() = Buf(UploadOrDie(q));
  *req.mutable_k() = Buf(UploadOrDie(k));
  *req.mutable_v() = Inline(v);  // mixed sources
  req.set_causal(true);
  req.mutable_output()->set_to_buffer(true);
  req.mutable_output()->set_label("attn-out");
  grpc::ClientContext ctx;
  pb::AttentionResponse resp;
  grpc::Status s = kernels_->Attention(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_FALSE(resp.out().buffer_id().empty());
  std::string bytes;
  ASSERT_TRUE(Download(buffers_.get(), resp.out().buffer_id(), 0, &bytes).ok());
  ExpectMatchesOracle(bytes, OracleAttention(c, q, k, v));
  grpc::ClientContext lctx;
  pb::ListBuffersResponse list;
  ASSERT_TRUE(buffers_->List(&lctx, pb::ListBuffersRequest(), &list).ok());
  bool found = false;
  for (const auto& b : list.buffers()) {
    if (b.id() == resp.out().buffer_id()) {
      found = true;
      EXPECT_EQ(b.label(), "attn-out");
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(KernelTest, BadAttentionCallsNameTheField) {
  const AttnCase c{1, 2, 2, 8, 8, 128, false, pb::BHSD};
  pb::Tensor q = RandomBf16(AttnShape(c, 2, 8), 1);
  pb::Tensor k = RandomBf16(AttnShape(c, 2, 8), 2);
  pb::Tensor v = RandomBf16(AttnShape(c, 2, 8), 3);
  const std::string k_id = UploadOrDie(k);
  auto good = [&] {
    pb::AttentionRequest r;
    *r.mutable_q() = Inline(q);
    *r.mutable_k() = Buf(k_id);
    *r.mutable_v() = Inline(v);
    return r;
  };
  auto with = [&](auto edit) {
    pb::AttentionRequest r = good();
    edit(&r);
    return r;
  };
  using R = pb::AttentionRequest;
  pb::Tensor q32 = q;
  q32.set_dtype(pb::FP32);
  q32.set_data(q.data() + q.data());
  pb::Tensor k64 = RandomBf16({1, 2, 8, 64}, 4);
  pb::Tensor q_short = q;
  q_short.mutable_data()->resize(q.data().size() - 2);
  pb::Tensor q_zero = q;
  q_zero.set_shape(2, 0);
  q_zero.clear_data();
  pb::Tensor q_dtype = q;
  q_dtype.set_dtype(static_cast<pb::DType>(99));
  struct Case {
    std::string name;
    pb::AttentionRequest req;
    grpc::StatusCode code;
    std::string substr;
  };
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  std::vector<Case> cases = {
      {"q fp32", with([&](R* r) { *r->mutable_q() = Inline(q32); }), kInvalid, "q: expected bf16, got fp32"},
      {"k head_dim", with([&](R* r) { *r->mutable_k() = Inline(k64); }), kInvalid,
       "k.shape[3]: expected 128 (q head_dim), got 64"},
      {"unknown k buffer", with([&](R* r) { *r->mutable_k() = Buf("buf-ffffffffffffffffffffffffffffffff"); }),
       grpc::StatusCode::NOT_FOUND, "k.buffer_id"},
      {"missing v", with([&](R* r) { r->clear_v(); }), kInvalid, "v: required"},
      {"q bytes", with([&](R* r) { *r->mutable_q() = Inline(q_short); }), kInvalid,
       "q.data: expected 4096 bytes (bf16[1,2,8,128]), got 4094"},
      {"q zero dim", with([&](R* r) { *r->mutable_q() = Inline(q_zero); }), kInvalid, "q.shape[2]"},
      {"q dtype 99", with([&](R* r) { *r->mutable_q() = Inline(q_dtype); }), kInvalid, "q.dtype"},
      {"layout", with([](R* r) { r->set_layout(static_cast<pb::Layout>(9)); }), kInvalid, "layout"},
      {"rounding", with([](R* r) { r->set_rounding(static_cast<pb::Rounding>(9)); }), kInvalid, "rounding"},
      {"scale", with([](R* r) { r->set_softmax_scale(-1); }), kInvalid, "softmax_scale"},
      {"device", with([](R* r) { r->set_device(3); }), kInvalid, "device"},
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.name);
    grpc::ClientContext ctx;
    pb::AttentionResponse resp;
    grpc::Status s = kernels_->Attention(&ctx, cs.req, &resp);
    EXPECT_EQ(s.error_code(), cs.code) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(cs.substr));
    // The server keeps serving, and the buffer is unchanged.
    grpc::ClientContext gctx;
    pb::AttentionResponse gresp;
    ASSERT_TRUE(kernels_->Attention(&gctx, good(), &gresp).ok());
    ExpectMatchesOracle(gresp.out().tensor().data(), OracleAttention(c, q, k, v));
    std::string bytes;
    ASSERT_TRUE(Download(buffers_.get(), k_id, 0, &bytes).ok());
    EXPECT_EQ(bytes, k.data());
  }
}

pb::Tensor RandomFp8Rows(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0, 1);
  pb::Tensor t;
  t.set_dtype(pb::FP8_E4M3FN);
  t.add_shape(n);
  t.add_shape(576);
  std::string data(static_cast<size_t>(n * 576), '\0');
  for (auto& ch : data) ch = static_cast<char>(numerics::DoubleToFp8(dist(rng), DType::kFp8E4M3Fn));
  t.set_data(std::move(data));
  return t;
}

pb::Tensor Int32s(const std::vector<int32_t>& v) {
  pb::Tensor t;
  t.set_dtype(pb::INT32);
  t.add_shape(static_cast<int64_t>(v.size()));
  t.set_data(std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size()));
  return t;
}

TEST_F(KernelTest, MlaDecodeOverPoolMatchesOracle) {
  const int64_t kSlots = 32, B = 2, H = 4;
  pb::CreatePoolRequest creq;
  creq.set_kind(pb::MLA_FUSED);
  creq.set_num_slots(kSlots);
  creq.set_dtype(pb::FP8_E4M3FN);
  creq.set_kv_scale(0.25);
  pb::PoolInfo pool;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(pools_->Create(&ctx, creq, &pool).ok());
  }
  pb::Tensor rows = RandomFp8Rows(kSlots, 5);
  std::vector<int32_t> all(kSlots);
  for (int i = 0; i < kSlots; ++i) all[i] = i;
  {
    grpc::ClientContext ctx;
    pb::WritePoolResponse wr;
    auto w = pools_->Write(&ctx, &wr);
    pb::WritePoolChunk c;
    c.set_pool_id(pool.id());
    *c.mutable_slots() = Int32s(all);
    *c.mutable_rows() = rows;
    ASSERT_TRUE(w->Write(c));
    w->WritesDone();
    ASSERT_TRUE(w->Finish().ok());
  }
  pb::Tensor q_lat = RandomBf16({B, 1, H, 512}, 6);
  pb::Tensor q_pe = RandomBf16({B, 1, H, 64}, 7);
  pb::Tensor seq_lens = Int32s({5, 9});
  pb::Tensor indices = Int32s({3, 1, 30, 7, 8, 0, 2, 4, 6, 10, 12, 14, 16, 18});
  pb::Tensor indptr = Int32s({0, 5, 14});
  pb::MlaDecodeRequest req;
  *req.mutable_q_lat() = Inline(q_lat);
  *req.mutable_q_pe() = Buf(UploadOrDie(q_pe));
  req.set_pool_id(pool.id());
  *req.mutable_seq_lens() = Buf(UploadOrDie(seq_lens));  // index tensor from a buffer
  *req.mutable_kv_indices() = Inline(indices);
  *req.mutable_kv_indptr() = Inline(indptr);
  grpc::ClientContext ctx;
  pb::MlaDecodeResponse resp;
  grpc::Status s = kernels_->MlaDecode(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();

  MlaDecodeParams p;
  p.kv_scale = 0.25;
  HostTensor hq = ToHost(q_lat), hp = ToHost(q_pe), hkv = ToHost(rows), hs = ToHost(seq_lens),
             hi = ToHost(indices), hptr = ToHost(indptr);
  ASSERT_TRUE(p.Validate(hq.desc(), hp.desc(), hkv.desc(), true, 1, &hs, &hi, &hptr, nullptr).ok());
  MlaDecodeInputs in{hq.view(), hp.view(), hkv.view(), hs.view(), hi.view(), hptr.view(), TensorView{}};
  auto ref = oracle::MlaDecode(p, in);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ExpectMatchesOracle(resp.out().tensor().data(), *ref);

  // A slot index past the pool names the field; the pool still serves.
  *req.mutable_kv_indices() = Inline(Int32s({3, 1, 30, 7, 8, 0, 2, 4, 6, 10, 12, 14, 16, 32}));
  grpc::ClientContext bctx;
  s = kernels_->MlaDecode(&bctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("kv_indices[13]"));
  // Index tensors are int32 (backends read them so), even where Validate would take int64.
  std::vector<int64_t> lens64 = {5, 9};
  pb::Tensor seq64;
  seq64.set_dtype(pb::INT64);
  seq64.add_shape(2);
  seq64.set_data(std::string(reinterpret_cast<const char*>(lens64.data()), 16));
  pb::MlaDecodeRequest req64 = req;
  *req64.mutable_kv_indices() = Inline(indices);
  *req64.mutable_seq_lens() = Inline(seq64);
  grpc::ClientContext i64ctx;
  s = kernels_->MlaDecode(&i64ctx, req64, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("seq_lens: expected int32, got int64"));
  req.set_pool_id("pool-deadbeef");
  grpc::ClientContext nctx;
  s = kernels_->MlaDecode(&nctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("pool_id"));
}

// ------------------------------------------------- queue limit and deadlines

void SetBits16(pb::Tensor* t, int64_t element, uint16_t bits) {
  std::memcpy(&(*t->mutable_data())[2 * element], &bits, 2);
}

int64_t MemoryUsed(KernelServer* server, std::shared_ptr<grpc::Channel> channel) {
  auto devices = pb::DeviceService::NewStub(channel);
  grpc::ClientContext ctx;
  pb::ListDevicesResponse resp;
  EXPECT_TRUE(devices->List(&ctx, pb::ListDevicesRequest(), &resp).ok());
  return resp.devices(0).memory_used_bytes();
}

TEST_F(KernelTest, RejectNonfiniteNamesTheTensorAndTheFirstElement) {
  ServerOptions options;
  options.reject_nonfinite = true;
  StartWith(options);
  pb::AttentionRequest req;
  pb::Tensor q = RandomBf16({1, 2, 4, 64}, 1);
  SetBits16(&q, 37, 0x7FC0);  // NaN
  SetBits16(&q, 300, 0x7F80);  // Inf, later: not the one named
  *req.mutable_q() = Inline(q);
  *req.mutable_k() = Inline(RandomBf16({1, 1, 6, 64}, 2));
  *req.mutable_v() = Inline(RandomBf16({1, 1, 6, 64}, 3));
  pb::AttentionResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status s = kernels_->Attention(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("q[0,0,0,37]: NaN (element 37 of bf16[1,2,4,64])"));
    EXPECT_THAT(s.error_message(), HasSubstr("--reject_nonfinite"));
  }
  // A buffer input is scanned too.
  pb::Tensor k = RandomBf16({1, 1, 6, 64}, 2);
  SetBits16(&k, 3 * 64 + 8, 0xFF80);  // -Inf
  *req.mutable_q() = Inline(RandomBf16({1, 2, 4, 64}, 1));
  *req.mutable_k() = Buf(UploadOrDie(k));
  {
    grpc::ClientContext ctx;
    grpc::Status s = kernels_->Attention(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("k[0,0,3,8]: -Inf (element 200 of bf16[1,1,6,64])"));
  }
  *req.mutable_k() = Inline(RandomBf16({1, 1, 6, 64}, 2));
  {
    grpc::ClientContext ctx;
    EXPECT_TRUE(kernels_->Attention(&ctx, req, &resp).ok()) << "finite inputs still run";
  }
  // Pool rows: an fp8 NaN code.
  pb::CreatePoolRequest creq;
  creq.set_kind(pb::MLA_FUSED);
  creq.set_num_slots(4);
  creq.set_dtype(pb::FP8_E4M3FN);
  pb::PoolInfo pool;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(pools_->Create(&ctx, creq, &pool).ok());
  }
  pb::WritePoolChunk c;
  c.set_pool_id(pool.id());
  *c.mutable_slots() = Int32s({0, 1});
  *c.mutable_rows() = RandomFp8Rows(2, 4);
  (*c.mutable_rows()->mutable_data())[576 + 5] = static_cast<char>(0xFF);
  grpc::ClientContext ctx;
  pb::WritePoolResponse wr;
  auto w = pools_->Write(&ctx, &wr);
  ASSERT_TRUE(w->Write(c));
  w->WritesDone();
  grpc::Status s = w->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("rows[1,5]: NaN (element 581 of fp8_e4m3fn[2,576])"));
}

TEST_F(KernelTest, NonfiniteInputsRunWithoutTheFlag) {
  pb::AttentionRequest req;
  pb::Tensor q = RandomBf16({1, 2, 4, 64}, 1);
  SetBits16(&q, 37, 0x7FC0);
  *req.mutable_q() = Inline(q);
  *req.mutable_k() = Inline(RandomBf16({1, 1, 6, 64}, 2));
  *req.mutable_v() = Inline(RandomBf16({1, 1, 6, 64}, 3));
  grpc::ClientContext ctx;
  pb::AttentionResponse resp;
  EXPECT_TRUE(kernels_->Attention(&ctx, req, &resp).ok());
}

// Memory a request's knobs multiply is charged before anything is
// allocated: MLA's explicit split partials, report_error's fp64 oracle.
TEST_F(KernelTest, WorkspaceAndOracleMemoryAreChargedFirst) {
  ServerOptions options;
  options.memory_limit_mb = 8;
  StartWith(options);
  const int64_t used = MemoryUsed(server_.get(), channel_);
  pb::MlaDecodeRequest mla;
  *mla.mutable_q_lat() = Inline(RandomBf16({1, 8, 128, 512}, 1));
  *mla.mutable_q_pe() = Inline(RandomBf16({1, 8, 128, 64}, 2));
  *mla.mutable_kv() = Inline(RandomFp8Rows(16, 3));
  mla.mutable_kv()->mutable_tensor()->clear_shape();
  for (int64_t d : {1, 16, 576}) mla.mutable_kv()->mutable_tensor()->add_shape(d);
  mla.set_num_splits(1024);
  pb::MlaDecodeResponse mresp;
  {
    grpc::ClientContext ctx;
    grpc::Status s = kernels_->MlaDecode(&ctx, mla, &mresp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    // 1024 splits x 1024 rows x (512 + 2) fp32.
    EXPECT_THAT(s.error_message(), HasSubstr("op workspace needs 2155872256 bytes"));
  }
  mla.set_num_splits(2);
  {
    grpc::ClientContext ctx;
    grpc::Status s = kernels_->MlaDecode(&ctx, mla, &mresp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  pb::AttentionRequest req;
  *req.mutable_q() = Buf(UploadOrDie(RandomBf16({1, 8, 256, 128}, 4)));
  *req.mutable_k() = Buf(UploadOrDie(RandomBf16({1, 8, 256, 128}, 5)));
  *req.mutable_v() = Buf(UploadOrDie(RandomBf16({1, 8, 256, 128}, 6)));
  const int64_t with_inputs = MemoryUsed(server_.get(), channel_);
  req.set_report_error(true);
  pb::AttentionResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status s = kernels_->Attention(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    // fp64 copies of q, k, v and two of the output: 5 x 262144 elements.
    EXPECT_THAT(s.error_message(), HasSubstr("report_error: the fp64 oracle needs 10485760 bytes"));
  }
  req.set_report_error(false);
  {
    grpc::ClientContext ctx;
    EXPECT_TRUE(kernels_->Attention(&ctx, req, &resp).ok());
  }
  EXPECT_EQ(MemoryUsed(server_.get(), channel_), with_inputs) << "charges released";
  EXPECT_GE(with_inputs, used);
}

// MoE shapes multiply the request: one token routed 2^16 times through
// 32-wide experts needs ~34 MB of fp32 activations, over an 8 MiB limit,
// from a 0.5 MiB request. The charge comes first and is released; the same
// layer with top_k 2 runs.
TEST_F(KernelTest, MoeWorkspaceIsChargedFirst) {
  ServerOptions options;
  options.memory_limit_mb = 8;
  options.cpu_threads = 2;
  StartWith(options);
  const int64_t used = MemoryUsed(server_.get(), channel_);
  auto tensor = [](pb::DType dtype, std::vector<int64_t> shape, std::string data) {
    pb::Tensor t;
    t.set_dtype(dtype);
    for (int64_t d : shape) t.add_shape(d);
    t.set_data(std::move(data));
    return t;
  };
  auto layer = [&](int64_t top_k) {
    pb::MoeRequest r;
    r.set_stage(pb::LAYER);
    *r.mutable_x() = Inline(RandomBf16({1, 32}, 1));
    *r.mutable_topk_ids() = Inline(tensor(pb::INT32, {1, top_k}, std::string(4 * top_k, '\0')));
    *r.mutable_topk_weights() = Inline(tensor(pb::FP32, {1, top_k}, std::string(4 * top_k, '\0')));
    *r.mutable_w13() = Inline(tensor(pb::FP4_E2M1, {2, 64, 32}, std::string(2 * 64 * 16, '\x25')));
    *r.mutable_w13_scales() = Inline(tensor(pb::E8M0, {2, 64, 1}, std::string(128, '\x7f')));
    *r.mutable_w2() = Inline(tensor(pb::FP4_E2M1, {2, 32, 32}, std::string(2 * 32 * 16, '\x25')));
    *r.mutable_w2_scales() = Inline(tensor(pb::E8M0, {2, 32, 1}, std::string(64, '\x7f')));
    return r;
  };
  pb::MoeResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status s = kernels_->Moe(&ctx, layer(1 << 16), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    // 4 x (32 + 65536 x (3 x 32 + 32) + 32) fp32 activations, 4 x (2 x 65536 +
    // 130 x 2 + 3 x 2) + 4096 of routing, 64 x 2 threads x 32 of weight rows.
    EXPECT_THAT(s.error_message(), HasSubstr("op workspace needs 34088232 bytes"));
  }
  EXPECT_EQ(MemoryUsed(server_.get(), channel_), used) << "the refused charge is not held";
  {
    grpc::ClientContext ctx;
    grpc::Status s = kernels_->Moe(&ctx, layer(2), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(MemoryUsed(server_.get(), channel_), used);
}

class SlowCallTest : public KernelTest {
 protected:
  void SetUp() override {}

  // Uploads q, k, v for an attention call that takes at least `min_ms` here.
  void PrepareSlowCall(double min_ms) {
    for (int64_t s = 512;; s *= 2) {
      slow_ = pb::AttentionRequest();
      *slow_.mutable_q() = Buf(UploadOrDie(RandomBf16({1, 8, s, 128}, 1)));
      *slow_.mutable_k() = Buf(UploadOrDie(RandomBf16({1, 8, s, 128}, 2)));
      *slow_.mutable_v() = Buf(UploadOrDie(RandomBf16({1, 8, s, 128}, 3)));
      slow_.mutable_output()->set_to_buffer(true);
      const absl::Time start = absl::Now();
      grpc::ClientContext ctx;
      pb::AttentionResponse resp;
      ASSERT_TRUE(kernels_->Attention(&ctx, slow_, &resp).ok());
      if (absl::ToDoubleMilliseconds(absl::Now() - start) >= min_ms || s >= 16384) break;
    }
  }
  void WaitQueueDepth(int depth) {
    auto devices = pb::DeviceService::NewStub(channel_);
    ASSERT_TRUE(::kernelserve::testing::WaitQueueDepth(devices.get(), depth))
        << "the device never held " << depth << " calls";
  }
  void WaitRunning() {
    for (int i = 0; i < 1000 && server_->worker_stats(0).running == 0; ++i) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    ASSERT_EQ(server_->worker_stats(0).running, 1) << "the call never started running";
  }
  grpc::Status CallSlow() {
    grpc::ClientContext ctx;
    pb::AttentionResponse resp;
    return kernels_->Attention(&ctx, slow_, &resp);
  }

  pb::AttentionRequest slow_;
};

TEST_F(SlowCallTest, FullQueueIsResourceExhausted) {
  ServerOptions options;
  options.queue_capacity = 1;
  StartWith(options);
  PrepareSlowCall(300);
  constexpr int kCalls = 6;
  std::vector<grpc::Status> results(kCalls);
  std::vector<std::thread> threads;
  // The first call is running before the others arrive: then one of them
  // waits in the queue and the rest are refused.
  threads.emplace_back([&] { results[0] = CallSlow(); });
  WaitRunning();  // popped by the worker
  for (int i = 1; i < kCalls; ++i) {
    threads.emplace_back([&, i] { results[i] = CallSlow(); });
  }
  for (auto& t : threads) t.join();
  int ok = 0, full = 0;
  for (const auto& s : results) {
    if (s.ok()) {
      ++ok;
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
      EXPECT_EQ(s.error_message(), "device 0 queue is full (1 queued)");
      ++full;
    }
  }
  EXPECT_GE(ok, 2);  // one running, one queued
  EXPECT_GE(full, 1);
  EXPECT_EQ(server_->worker_stats(0).rejected_full, full);
  EXPECT_TRUE(CallSlow().ok());  // and it recovers
}

TEST_F(SlowCallTest, ExpiredAndCancelledCallsAreDroppedBeforeRunning) {
  StartWith(ServerOptions());
  PrepareSlowCall(400);
  const int64_t completed_before = server_->worker_stats(0).completed;
  std::thread blocker([&] { EXPECT_TRUE(CallSlow().ok()); });
  WaitRunning();

  std::thread expiring([&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    pb::AttentionResponse resp;
    grpc::Status s = kernels_->Attention(&ctx, slow_, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  });
  grpc::ClientContext cancel_ctx;
  std::thread cancelled([&] {
    pb::AttentionResponse resp;
    grpc::Status s = kernels_->Attention(&cancel_ctx, slow_, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
  });
  WaitQueueDepth(3);  // both wait behind it
  cancel_ctx.TryCancel();
  blocker.join();
  expiring.join();
  cancelled.join();
  // The worker saw both while they were queued and ran neither.
  for (int i = 0; i < 100; ++i) {
    const WorkerStats st = server_->worker_stats(0);
    if (st.dropped_deadline + st.dropped_cancelled == 2) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  const WorkerStats st = server_->worker_stats(0);
  EXPECT_EQ(st.dropped_deadline, 1);
  EXPECT_EQ(st.dropped_cancelled, 1);
  EXPECT_EQ(st.completed, completed_before + 1);
}

}  // namespace
}  // namespace kernelserve
