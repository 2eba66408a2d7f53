// FP8 attention and MXFP4 MoE over a real server, compared with the fp64
// oracle on fresh random inputs, with the error report.
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/pool.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/server.h"
#include "server/test_util.h"

namespace kernelserve {
namespace {

namespace pb = ::kernelserve::v1;
using ::kernelserve::testing::Connect;
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

// ||out - ref|| / ||ref|| with out in bf16; every element must be finite.
double RelRms(const std::string& out_bytes, const std::vector<double>& ref) {
  EXPECT_EQ(out_bytes.size(), 2 * ref.size());
  if (out_bytes.size() != 2 * ref.size()) return 1e9;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, out_bytes.data() + 2 * i, 2);
    const double got = numerics::Bf16ToFloat(bits);
    if (!std::isfinite(got)) return 1e9;
    err2 += (got - ref[i]) * (got - ref[i]);
    ref2 += ref[i] * ref[i];
  }
  return std::sqrt(err2 / ref2);
}

class OpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
    kernels_ = pb::KernelService::NewStub(Connect(server_->port()));
  }
  std::unique_ptr<KernelServer> server_;
  std::unique_ptr<pb::KernelService::Stub> kernels_;
};

TEST_F(OpsTest, Fp8AttentionMatchesOracleWithErrorSplit) {
  for (const pb::PMode mode : {pb::EXACT, pb::LEAN}) {
    SCOPED_TRACE(pb::PMode_Name(mode));
    pb::Tensor q = RandomBf16({1, 2, 80, 128}, 21), k = RandomBf16({1, 2, 150, 128}, 22),
               v = RandomBf16({1, 2, 150, 128}, 23);
    pb::Fp8AttentionRequest req;
    *req.mutable_q() = Inline(q);
    *req.mutable_k() = Inline(k);
    *req.mutable_v() = Inline(v);
    req.set_causal(true);
    req.set_p_mode(mode);
    req.set_report_error_split(true);
    grpc::ClientContext ctx;
    pb::Fp8AttentionResponse resp;
    grpc::Status s = kernels_->Fp8Attention(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();

    Fp8AttentionParams p;
    p.causal = true;
    p.p_mode = mode == pb::EXACT ? PMode::kExact : PMode::kLean;
    HostTensor hq = ToHost(q), hk = ToHost(k), hv = ToHost(v);
    ASSERT_TRUE(p.Validate(hq.desc(), hk.desc(), hv.desc(), nullptr, nullptr, nullptr).ok());
    Fp8AttentionInputs in{hq.view(), hk.view(), hv.view(), {}, {}, {}};
    auto quant = oracle::QuantizeAttentionInputs(p, in);
    ASSERT_TRUE(quant.ok()) << quant.status();
    auto ref = oracle::Fp8Attention(p, *quant, oracle::PQuant::kAsParams);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_LT(RelRms(resp.out().tensor().data(), *ref), 1e-2);

    const pb::ErrorReport& e = resp.error();
    EXPECT_TRUE(e.has_split());
    EXPECT_EQ(e.nonfinite(), 0);
    EXPECT_GT(e.rel_rms(), 0);
    EXPECT_LT(e.rel_rms(), 0.1);
    EXPECT_GT(e.input_quant(), 0);
    EXPECT_GT(e.p_quant(), 0);
  }
}

TEST_F(OpsTest, Fp8AttentionBadInputsNameTheField) {
  pb::Tensor q = RandomBf16({1, 2, 8, 64}, 1), k = RandomBf16({1, 2, 8, 64}, 2);
  pb::Fp8AttentionRequest req;
  *req.mutable_q() = Inline(q);
  *req.mutable_k() = Inline(k);
  *req.mutable_v() = Inline(k);
  grpc::ClientContext ctx;
  pb::Fp8AttentionResponse resp;
  grpc::Status s = kernels_->Fp8Attention(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("head shape"));
  req.set_p_mode(static_cast<pb::PMode>(7));
  grpc::ClientContext ctx2;
  s = kernels_->Fp8Attention(&ctx2, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("p_mode"));
}

pb::Tensor Tensor(pb::DType dtype, std::vector<int64_t> shape, std::string data) {
  pb::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::move(data));
  return t;
}

// Packed E2M1 codes (any nibble is a valid value) and E8M0 scales near 2^-5.
pb::Tensor RandomFp4(std::vector<int64_t> shape, std::mt19937_64* rng) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::string data(static_cast<size_t>(n / 2), '\0');
  for (auto& c : data) c = static_cast<char>((*rng)() & 0xFF);
  return Tensor(pb::FP4_E2M1, shape, std::move(data));
}

pb::Tensor RandomScales(std::vector<int64_t> shape, std::mt19937_64* rng) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::string data(static_cast<size_t>(n), '\0');
  for (auto& c : data) c = static_cast<char>(120 + (*rng)() % 5);
  return Tensor(pb::E8M0, shape, std::move(data));
}

TEST_F(OpsTest, MoeLayerMatchesOracle) {
  const int64_t T = 5, top_k = 2, E = 4, K = 64, I = 32;
  std::mt19937_64 rng(77);
  pb::Tensor x = RandomBf16({T, K}, 31);
  std::vector<int32_t> ids(T * top_k);
  std::vector<float> weights(T * top_k);
  for (int64_t t = 0; t < T; ++t) {
    ids[t * top_k] = static_cast<int32_t>(rng() % E);
    ids[t * top_k + 1] = static_cast<int32_t>((ids[t * top_k] + 1 + rng() % (E - 1)) % E);
    weights[t * top_k] = 0.7f;
    weights[t * top_k + 1] = 0.3f;
  }
  pb::Tensor topk_ids = Tensor(pb::INT32, {T, top_k}, std::string(reinterpret_cast<char*>(ids.data()), 4 * ids.size()));
  pb::Tensor topk_w =
      Tensor(pb::FP32, {T, top_k}, std::string(reinterpret_cast<char*>(weights.data()), 4 * weights.size()));
  pb::Tensor w13 = RandomFp4({E, 2 * I, K}, &rng), w13s = RandomScales({E, 2 * I, K / 32}, &rng);
  pb::Tensor w2 = RandomFp4({E, K, I}, &rng), w2s = RandomScales({E, K, I / 32}, &rng);
  pb::MoeRequest req;
  req.set_stage(pb::LAYER);
  *req.mutable_x() = Inline(x);
  *req.mutable_topk_ids() = Inline(topk_ids);
  *req.mutable_topk_weights() = Inline(topk_w);
  *req.mutable_w13() = Inline(w13);
  *req.mutable_w13_scales() = Inline(w13s);
  *req.mutable_w2() = Inline(w2);
  *req.mutable_w2_scales() = Inline(w2s);
  req.set_report_error(true);
  grpc::ClientContext ctx;
  pb::MoeResponse resp;
  grpc::Status s = kernels_->Moe(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.out().tensor().shape_size(), 2);
  EXPECT_EQ(resp.out().tensor().shape(0), T);
  EXPECT_EQ(resp.out().tensor().shape(1), K);

  MoeParams p;
  p.stage = MoeStage::kLayer;
  HostTensor hx = ToHost(x), hids = ToHost(topk_ids), hw = ToHost(topk_w), h13 = ToHost(w13),
             h13s = ToHost(w13s), h2 = ToHost(w2), h2s = ToHost(w2s);
  ASSERT_TRUE(p.Validate(hx.desc(), hids, &hw.desc(), &h13.desc(), &h13s.desc(), &h2.desc(), &h2s.desc()).ok());
  MoeInputs in{hx.view(), hids.view(), hw.view(), h13.view(), h13s.view(), h2.view(), h2s.view()};
  auto ref = oracle::Moe(p, in);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_LT(RelRms(resp.out().tensor().data(), *ref), 1e-2);
  EXPECT_LT(resp.error().rel_rms(), 1e-2);
  EXPECT_EQ(resp.error().nonfinite(), 0);

  // An expert id past E names the element.
  ids[3] = 9;
  *req.mutable_topk_ids() =
      Inline(Tensor(pb::INT32, {T, top_k}, std::string(reinterpret_cast<char*>(ids.data()), 4 * ids.size())));
  grpc::ClientContext bctx;
  s = kernels_->Moe(&bctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("topk_ids[1,1]"));
}

// ------------------------------------------------------ --reject_nonfinite

// One float tensor of one op with a non-finite value put in: the request
// (every other input finite), the field whose TensorRef is poisoned, the
// element and its bytes, and the message the server must give.
struct NonfiniteCase {
  std::string name;
  std::function<void(pb::AttentionRequest*)> attention;
  std::function<void(pb::Fp8AttentionRequest*)> fp8;
  std::function<void(pb::MlaDecodeRequest*)> mla;
  std::function<void(pb::MoeRequest*)> moe;
  std::string field;
  int64_t element;
  std::string bits;  // little-endian bytes of the bad element
  std::string message;
};

std::string Repeat(int64_t n, char c) { return std::string(static_cast<size_t>(n), c); }

pb::AttentionRequest FiniteAttention() {
  pb::AttentionRequest r;
  *r.mutable_q() = Inline(RandomBf16({1, 2, 4, 64}, 1));
  *r.mutable_k() = Inline(RandomBf16({1, 1, 6, 64}, 2));
  *r.mutable_v() = Inline(RandomBf16({1, 1, 6, 64}, 3));
  return r;
}

// bf16 inputs (the server quantizes them) or FP8 codes with fp32 descales.
pb::Fp8AttentionRequest FiniteFp8(pb::DType dtype = pb::BF16) {
  pb::Fp8AttentionRequest r;
  r.set_causal(true);
  if (dtype == pb::BF16) {
    *r.mutable_q() = Inline(RandomBf16({1, 1, 4, 128}, 4));
    *r.mutable_k() = Inline(RandomBf16({1, 1, 70, 128}, 5));
    *r.mutable_v() = Inline(RandomBf16({1, 1, 70, 128}, 6));
    return r;
  }
  r.set_format(dtype == pb::FP8_E4M3FN ? pb::E4M3FN : pb::E4M3FNUZ);
  *r.mutable_q() = Inline(Tensor(dtype, {1, 1, 4, 128}, Repeat(4 * 128, '\x30')));
  *r.mutable_k() = Inline(Tensor(dtype, {1, 1, 70, 128}, Repeat(70 * 128, '\x31')));
  *r.mutable_v() = Inline(Tensor(dtype, {1, 1, 70, 128}, Repeat(70 * 128, '\x32')));
  const float one = 1.0f / 64;
  const std::string descale(reinterpret_cast<const char*>(&one), 4);
  *r.mutable_q_descale() = Inline(Tensor(pb::FP32, {1}, descale));
  *r.mutable_k_descale() = Inline(Tensor(pb::FP32, {1}, descale));
  *r.mutable_v_descale() = Inline(Tensor(pb::FP32, {1}, descale));
  return r;
}

// Contiguous fp8 KV [1, 3, 576]: a pool's rows are checked when written.
pb::MlaDecodeRequest FiniteMla() {
  pb::MlaDecodeRequest r;
  *r.mutable_q_lat() = Inline(RandomBf16({1, 1, 2, 512}, 7));
  *r.mutable_q_pe() = Inline(RandomBf16({1, 1, 2, 64}, 8));
  *r.mutable_kv() = Inline(Tensor(pb::FP8_E4M3FN, {1, 3, 576}, Repeat(3 * 576, '\x30')));
  return r;
}

// A whole layer, so that every float input is read: T = 1, top-1 of E = 2
// experts, K = I = 32.
pb::MoeRequest FiniteMoe() {
  pb::MoeRequest r;
  r.set_stage(pb::LAYER);
  *r.mutable_x() = Inline(RandomBf16({1, 32}, 9));
  *r.mutable_topk_ids() = Inline(Tensor(pb::INT32, {1, 1}, std::string("\x01\0\0\0", 4)));
  const float w = 1.0f;
  *r.mutable_topk_weights() = Inline(Tensor(pb::FP32, {1, 1}, std::string(reinterpret_cast<const char*>(&w), 4)));
  *r.mutable_w13() = Inline(Tensor(pb::FP4_E2M1, {2, 64, 32}, Repeat(2 * 64 * 16, '\x25')));
  *r.mutable_w13_scales() = Inline(Tensor(pb::E8M0, {2, 64, 1}, Repeat(128, '\x7f')));
  *r.mutable_w2() = Inline(Tensor(pb::FP4_E2M1, {2, 32, 32}, Repeat(2 * 32 * 16, '\x25')));
  *r.mutable_w2_scales() = Inline(Tensor(pb::E8M0, {2, 32, 1}, Repeat(64, '\x7f')));
  return r;
}

// The TensorRef named `field` of `request` (every op's fields are top level).
pb::TensorRef* Field(google::protobuf::Message* request, const std::string& field) {
  const google::protobuf::FieldDescriptor* f = request->GetDescriptor()->FindFieldByName(field);
  EXPECT_NE(f, nullptr) << field;
  return static_cast<pb::TensorRef*>(request->GetReflection()->MutableMessage(request, f));
}

std::string F32Bits(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string U16Bits(uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); }

// Every float tensor of every op, in each dtype that can hold NaN or Inf.
std::vector<NonfiniteCase> NonfiniteCases() {
  auto attn = [](pb::AttentionRequest* r) { *r = FiniteAttention(); };
  auto fp8_bf16 = [](pb::Fp8AttentionRequest* r) { *r = FiniteFp8(); };
  auto fp8_fn = [](pb::Fp8AttentionRequest* r) { *r = FiniteFp8(pb::FP8_E4M3FN); };
  auto fp8_fnuz = [](pb::Fp8AttentionRequest* r) { *r = FiniteFp8(pb::FP8_E4M3FNUZ); };
  auto mla = [](pb::MlaDecodeRequest* r) { *r = FiniteMla(); };
  auto moe = [](pb::MoeRequest* r) { *r = FiniteMoe(); };
  const std::string kNan16 = U16Bits(0x7FC0), kInf16 = U16Bits(0x7F80), kNegInf16 = U16Bits(0xFF80);
  return {
      {"Attention q NaN", attn, {}, {}, {}, "q", 37, kNan16, "q[0,0,0,37]: NaN (element 37 of bf16[1,2,4,64])"},
      {"Attention k Inf", attn, {}, {}, {}, "k", 64 + 3, kInf16, "k[0,0,1,3]: Inf (element 67 of bf16[1,1,6,64])"},
      {"Attention v -Inf", attn, {}, {}, {}, "v", 383, kNegInf16, "v[0,0,5,63]: -Inf (element 383 of bf16[1,1,6,64])"},
      {"Fp8Attention bf16 q", {}, fp8_bf16, {}, {}, "q", 0, kNan16, "q[0,0,0,0]: NaN"},
      {"Fp8Attention bf16 k", {}, fp8_bf16, {}, {}, "k", 69 * 128 + 127, kInf16, "k[0,0,69,127]: Inf"},
      {"Fp8Attention bf16 v", {}, fp8_bf16, {}, {}, "v", 130, kNegInf16, "v[0,0,1,2]: -Inf"},
      {"Fp8Attention e4m3fn q", {}, fp8_fn, {}, {}, "q", 5, "\x7f", "q[0,0,0,5]: NaN (element 5 of fp8_e4m3fn[1,1,4,128])"},
      {"Fp8Attention e4m3fn k", {}, fp8_fn, {}, {}, "k", 200, "\xff", "k[0,0,1,72]: NaN"},
      {"Fp8Attention e4m3fnuz v", {}, fp8_fnuz, {}, {}, "v", 9, "\x80", "v[0,0,0,9]: NaN (element 9 of fp8_e4m3fnuz"},
      {"Fp8Attention q_descale", {}, fp8_fn, {}, {}, "q_descale", 0, F32Bits(0x7FC00000u), "q_descale[0]: NaN"},
      {"Fp8Attention k_descale", {}, fp8_fn, {}, {}, "k_descale", 0, F32Bits(0x7F800000u), "k_descale[0]: Inf"},
      {"Fp8Attention v_descale", {}, fp8_fn, {}, {}, "v_descale", 0, F32Bits(0xFF800000u), "v_descale[0]: -Inf"},
      {"MlaDecode q_lat", {}, {}, mla, {}, "q_lat", 512 + 1, kNan16, "q_lat[0,0,1,1]: NaN (element 513 of bf16[1,1,2,512])"},
      {"MlaDecode q_pe", {}, {}, mla, {}, "q_pe", 127, kInf16, "q_pe[0,0,1,63]: Inf"},
      {"MlaDecode kv", {}, {}, mla, {}, "kv", 2 * 576 + 575, "\xff", "kv[0,2,575]: NaN (element 1727 of fp8_e4m3fn[1,3,576])"},
      {"Moe x", {}, {}, {}, moe, "x", 31, kNan16, "x[0,31]: NaN (element 31 of bf16[1,32])"},
      {"Moe topk_weights", {}, {}, {}, moe, "topk_weights", 0, F32Bits(0x7F800000u), "topk_weights[0,0]: Inf"},
      {"Moe w13_scales", {}, {}, {}, moe, "w13_scales", 64 + 3, "\xff", "w13_scales[1,3,0]: NaN (element 67 of e8m0[2,64,1])"},
      {"Moe w2_scales", {}, {}, {}, moe, "w2_scales", 40, "\xff", "w2_scales[1,8,0]: NaN"},
  };
}

using Edit = std::function<void(google::protobuf::Message*)>;

// Builds a request with `make`, applies `edit` and calls `rpc`.
template <typename Req, typename Resp>
grpc::Status Send(pb::KernelService::Stub* kernels,
                  grpc::Status (pb::KernelService::Stub::*rpc)(grpc::ClientContext*, const Req&, Resp*),
                  const std::function<void(Req*)>& make, const Edit& edit) {
  Req req;
  make(&req);
  edit(&req);
  Resp resp;
  grpc::ClientContext ctx;
  return (kernels->*rpc)(&ctx, req, &resp);
}

// Sends the case's request with `edit` applied, to the op it belongs to.
grpc::Status SendCase(pb::KernelService::Stub* kernels, const NonfiniteCase& c, const Edit& edit) {
  using Stub = pb::KernelService::Stub;
  if (c.attention) return Send(kernels, &Stub::Attention, c.attention, edit);
  if (c.fp8) return Send(kernels, &Stub::Fp8Attention, c.fp8, edit);
  if (c.mla) return Send(kernels, &Stub::MlaDecode, c.mla, edit);
  return Send(kernels, &Stub::Moe, c.moe, edit);
}

// --reject_nonfinite: every float input of every op, inline and as a buffer,
// is refused naming the tensor and its first non-finite element; the same
// requests without the bad element run, and without the flag the bad ones
// run too (the kernels see the NaN, as they did before).
TEST(RejectNonfiniteTest, EveryFloatInputOfEveryOpNamesTheTensorAndTheElement) {
  ServerOptions options;
  options.reject_nonfinite = true;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto plain = StartServer();
  ASSERT_NE(plain, nullptr);
  auto channel = Connect(server->port());
  auto kernels = pb::KernelService::NewStub(channel);
  auto buffers = pb::BufferService::NewStub(channel);
  auto plain_kernels = pb::KernelService::NewStub(Connect(plain->port()));
  for (const NonfiniteCase& c : NonfiniteCases()) {
    SCOPED_TRACE(c.name);
    grpc::Status s = SendCase(kernels.get(), c, [](google::protobuf::Message*) {});
    ASSERT_TRUE(s.ok()) << "the finite request runs: " << s.error_message();
    pb::Tensor bad;
    auto poison = [&](google::protobuf::Message* r) {
      pb::TensorRef* ref = Field(r, c.field);
      ASSERT_TRUE(ref->has_tensor());
      ref->mutable_tensor()->mutable_data()->replace(static_cast<size_t>(c.element * c.bits.size()), c.bits.size(),
                                                     c.bits);
      // A second bad element later on: the first one is named.
      std::string* data = ref->mutable_tensor()->mutable_data();
      if (data->size() >= (c.element + 2) * c.bits.size()) {
        data->replace(data->size() - c.bits.size(), c.bits.size(), c.bits);
      }
      bad = ref->tensor();
    };
    s = SendCase(kernels.get(), c, poison);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message));
    EXPECT_THAT(s.error_message(), HasSubstr("--reject_nonfinite refuses non-finite inputs"));

    // The same tensor as a server-resident buffer.
    pb::BufferInfo info;
    ASSERT_TRUE(Upload(buffers.get(), bad, 1 << 20, &info).ok());
    s = SendCase(kernels.get(), c, [&](google::protobuf::Message* r) { Field(r, c.field)->set_buffer_id(info.id()); });
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message));

    // Off by default: the kernels run on what they are given.
    s = SendCase(plain_kernels.get(), c, poison);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
}

// Pools are checked when their rows are written (an MLA pool's fp8 rows in
// kernel_test): a per-head bf16 pool's write stream with an Inf in its
// second message names the element and writes nothing.
TEST(RejectNonfiniteTest, PerHeadPoolRowsAreCheckedWhenWritten) {
  ServerOptions options;
  options.reject_nonfinite = true;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto pools = pb::PoolService::NewStub(Connect(server->port()));
  pb::CreatePoolRequest create;
  create.set_kind(pb::PER_HEAD_KV);
  create.set_num_slots(4);
  create.set_dtype(pb::BF16);
  create.set_num_heads(2);
  create.set_head_dim(64);
  pb::PoolInfo info;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(pools->Create(&ctx, create, &info).ok());
  }
  const int64_t row = 2 * 2 * 64;
  auto chunk = [&](int32_t slot, uint64_t seed) {
    pb::WritePoolChunk c;
    c.set_pool_id(info.id());
    *c.mutable_slots() = Tensor(pb::INT32, {1}, std::string(reinterpret_cast<const char*>(&slot), 4));
    *c.mutable_rows() = RandomBf16({1, row}, seed);
    return c;
  };
  std::vector<pb::WritePoolChunk> msgs = {chunk(0, 1), chunk(1, 2), chunk(2, 3)};
  msgs[1].mutable_rows()->mutable_data()->replace(2 * 130, 2, U16Bits(0xFF80));
  grpc::ClientContext ctx;
  pb::WritePoolResponse resp;
  auto writer = pools->Write(&ctx, &resp);
  for (const auto& m : msgs) writer->Write(m);
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("rows[0,130]: -Inf (element 130 of bf16[1,256])"));
  EXPECT_THAT(s.error_message(), HasSubstr("(message 1 of the write stream; nothing was written)"));
  grpc::ClientContext sctx;
  pb::PoolStatsRequest stats;
  stats.set_pool_id(info.id());
  ASSERT_TRUE(pools->Stats(&sctx, stats, &info).ok());
  EXPECT_EQ(info.rows_written(), 0);
}

}  // namespace
}  // namespace kernelserve
