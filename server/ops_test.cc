// FP8 attention and MXFP4 MoE over a real server, compared with the fp64
// oracle on fresh random inputs, with the error report.
#include <cmath>
#include <cstring>
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
#include "server/server.h"
#include "server/test_util.h"

namespace kernelserve {
namespace {

namespace pb = ::kernelserve::v1;
using ::kernelserve::testing::Connect;
using ::kernelserve::testing::RandomBf16;
using ::kernelserve::testing::StartServer;
using ::kernelserve::testing::ToHost;
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

}  // namespace
}  // namespace kernelserve
