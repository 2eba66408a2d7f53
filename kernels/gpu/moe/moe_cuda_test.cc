// MXFP4 MoE on the GPU against the fp64 oracle. Skips without a device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/oracle.h"
#include "kernels/gpu/gpu_test_util.h"
#include "kernels/gpu/moe/moe.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

using gpu_test::CaptureAndReplay;
using gpu_test::CountNan;
using gpu_test::DeviceTensor;
using gpu_test::FreshSeed;
using gpu_test::SameBytes;

struct Case {
  MoeStage stage = MoeStage::kGateUp;
  bool swiglu = false, weighted = false;
  int64_t tokens = 40, top_k = 4, experts = 8, hidden = 256, inter = 128, out_dim = 256;
  int tile = 0;
  gpu::MoeGemm gemm = gpu::MoeGemm::kAuto;
  Rounding rounding = Rounding::kRtne;
};

struct Inputs {
  HostTensor x, ids, weights, w13, w13s, w2, w2s;
};

void RandomFp4(HostTensor* w, HostTensor* s, std::mt19937_64& rng) {
  for (int64_t i = 0; i < w->num_bytes(); ++i) w->bytes()[i] = static_cast<uint8_t>(rng());
  // Scales 2^-9 .. 2^3: both dequantization paths (one or two multiplies).
  for (int64_t i = 0; i < s->num_bytes(); ++i) s->bytes()[i] = static_cast<uint8_t>(118 + rng() % 13);
}

Inputs MakeInputs(const Case& c, std::mt19937_64& rng) {
  Inputs in;
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t pairs = c.tokens * c.top_k;
  const int64_t xk = c.stage == MoeStage::kDown ? c.inter : c.hidden;
  in.x = HostTensor(DType::kBf16, {c.stage == MoeStage::kDown ? pairs : c.tokens, xk});
  for (int64_t i = 0; i < in.x.num_elements(); ++i) {
    in.x.data<uint16_t>()[i] = numerics::FloatToBf16(nd(rng), Rounding::kRtne);
  }
  in.ids = HostTensor(DType::kInt32, {c.tokens, c.top_k});
  in.weights = HostTensor(DType::kFp32, {c.tokens, c.top_k});
  std::vector<int32_t> all(c.experts);
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);  // distinct experts per token
    for (int64_t r = 0; r < c.top_k; ++r) {
      in.ids.data<int32_t>()[t * c.top_k + r] = all[r % c.experts];
      in.weights.data<float>()[t * c.top_k + r] = std::uniform_real_distribution<float>(0.f, 1.f)(rng);
    }
  }
  if (c.stage != MoeStage::kDown) {
    in.w13 = HostTensor(DType::kFp4E2M1, {c.experts, 2 * c.inter, c.hidden});
    in.w13s = HostTensor(DType::kE8M0, {c.experts, 2 * c.inter, c.hidden / 32});
    RandomFp4(&in.w13, &in.w13s, rng);
  }
  if (c.stage != MoeStage::kGateUp) {
    in.w2 = HostTensor(DType::kFp4E2M1, {c.experts, c.out_dim, c.inter});
    in.w2s = HostTensor(DType::kE8M0, {c.experts, c.out_dim, c.inter / 32});
    RandomFp4(&in.w2, &in.w2s, rng);
  }
  return in;
}

MoeParams Validated(const Case& c, const Inputs& in) {
  MoeParams p;
  p.stage = c.stage;
  p.swiglu = c.swiglu;
  p.weighted_sum = c.weighted;
  p.rounding = c.rounding;
  const bool w13 = c.stage != MoeStage::kDown, w2 = c.stage != MoeStage::kGateUp;
  const bool need_w = c.stage == MoeStage::kLayer || c.weighted;
  const absl::Status st =
      p.Validate(in.x.desc(), in.ids, need_w ? &in.weights.desc() : nullptr, w13 ? &in.w13.desc() : nullptr,
                 w13 ? &in.w13s.desc() : nullptr, w2 ? &in.w2.desc() : nullptr, w2 ? &in.w2s.desc() : nullptr);
  EXPECT_TRUE(st.ok()) << st;
  return p;
}

struct Device {
  DeviceTensor x, ids, weights, w13, w13s, w2, w2s;
  MoeInputs in;
  explicit Device(const Inputs& h) {
    x = DeviceTensor(h.x);
    ids = DeviceTensor(h.ids);
    weights = DeviceTensor(h.weights);
    in.x = x.view();
    in.topk_ids = ids.view();
    in.topk_weights = weights.view();
    if (h.w13.num_bytes() > 0) {
      w13 = DeviceTensor(h.w13);
      w13s = DeviceTensor(h.w13s);
      in.w13 = w13.view();
      in.w13_scales = w13s.view();
    }
    if (h.w2.num_bytes() > 0) {
      w2 = DeviceTensor(h.w2);
      w2s = DeviceTensor(h.w2s);
      in.w2 = w2.view();
      in.w2_scales = w2s.view();
    }
  }
};

HostTensor RunGpu(const MoeParams& p, const Device& d, int tile, gpu::MoeGemm gemm = gpu::MoeGemm::kAuto) {
  DeviceTensor out(p.OutputDesc());
  EXPECT_EQ(out.Fill(0xFF), cudaSuccess);  // poison
  TensorView ov = out.view();
  const absl::Status st = gpu::RunMoeWithGemm(gemm, tile, p, d.in, ov, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out.ToHost();
}

HostTensor Check(const Case& c, double tol = 4e-3) {
  std::mt19937_64 rng(FreshSeed());
  const Inputs h = MakeInputs(c, rng);
  const MoeParams p = Validated(c, h);
  Device d(h);
  const HostTensor got = RunGpu(p, d, c.tile, c.gemm);
  MoeInputs hin;
  hin.x = h.x.view();
  hin.topk_ids = h.ids.view();
  hin.topk_weights = h.weights.view();
  if (h.w13.num_bytes() > 0) {
    hin.w13 = h.w13.view();
    hin.w13_scales = h.w13s.view();
  }
  if (h.w2.num_bytes() > 0) {
    hin.w2 = h.w2.view();
    hin.w2_scales = h.w2s.view();
  }
  const auto ref = oracle::Moe(p, hin);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) return got;
  const std::vector<double> out = numerics::ToDoubles(got.view());
  EXPECT_EQ(out.size(), ref->size());
  const numerics::ErrorMetrics m = numerics::CompareToReference(out.data(), ref->data(), ref->size());
  EXPECT_EQ(CountNan(out), 0) << "unwritten or NaN outputs";
  EXPECT_EQ(m.nonfinite, 0);
  EXPECT_LT(m.rel_rms, tol) << "max_abs " << m.max_abs;
  std::printf("stage=%d swiglu=%d weighted=%d T=%lld k=%lld E=%lld tile=%d gemm=%d: rel_rms %.3g\n",
              static_cast<int>(c.stage), c.swiglu, c.weighted, static_cast<long long>(c.tokens),
              static_cast<long long>(c.top_k), static_cast<long long>(c.experts), c.tile, static_cast<int>(c.gemm),
              m.rel_rms);
  return got;
}

class MoeCudaTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { KS_SKIP_WITHOUT_CUDA(); }
};

INSTANTIATE_TEST_SUITE_P(Tiles, MoeCudaTest, ::testing::Values(16, 64, 128),
                         [](const ::testing::TestParamInfo<int>& i) { return "Rows" + std::to_string(i.param); });

TEST_P(MoeCudaTest, GateUpPerPair) {
  Case c;
  c.tile = GetParam();
  Check(c);
}

TEST_P(MoeCudaTest, GateUpSwigluPartialColumnTile) {
  Case c;
  c.tile = GetParam();
  c.swiglu = true;
  c.inter = 96;
  c.hidden = 384;
  c.tokens = 70;
  Check(c);
}

TEST_P(MoeCudaTest, DownPerPairAndWeighted) {
  Case c;
  c.tile = GetParam();
  c.stage = MoeStage::kDown;
  c.inter = 256;
  c.out_dim = 200;
  Check(c);
  c.weighted = true;
  c.rounding = Rounding::kRtz;
  Check(c, 6e-3);
}

TEST_P(MoeCudaTest, LayerManyExpertsFewTokens) {
  Case c;
  c.tile = GetParam();
  c.stage = MoeStage::kLayer;
  c.tokens = 5;
  c.top_k = 8;
  c.experts = 300;
  c.inter = 128;
  c.out_dim = 256;
  Check(c, 6e-3);
}

// The sm_90a wgmma gate/up kernels (128 x 256, 256 x 128 and 192 x 192
// tiles, k-tiles of 64; 128 x 256 and 192 x 192 also with 128-byte-swizzled
// operands).
constexpr gpu::MoeGemm kWgmmaKernels[] = {gpu::MoeGemm::kWgmma,      gpu::MoeGemm::kWgmmaTall,
                                           gpu::MoeGemm::kWgmmaSw,    gpu::MoeGemm::kWgmmaWide,
                                           gpu::MoeGemm::kWgmmaWideSw};

class MoeWgmmaTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { KS_SKIP_WITHOUT_CUDA(); }
};

INSTANTIATE_TEST_SUITE_P(Epilogue, MoeWgmmaTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Swiglu" : "PerPair"; });

TEST_P(MoeWgmmaTest, FewRowsPerExpert) {
  for (gpu::MoeGemm g : kWgmmaKernels) {
    Case c;
    c.gemm = g;
    c.swiglu = GetParam();
    Check(c);
  }
}

TEST_P(MoeWgmmaTest, PartialColumnTileAndOddKTiles) {
  for (gpu::MoeGemm g : kWgmmaKernels) {
    Case c;
    c.gemm = g;
    c.swiglu = GetParam();
    c.inter = 96;     // one partial column tile
    c.hidden = 384;   // 6 k-tiles of 64
    c.tokens = 70;
    Check(c);
    c.inter = 160;    // 1.25 / 2.5 column tiles
    c.rounding = Rounding::kRtz;
    Check(c);
  }
}

TEST_P(MoeWgmmaTest, ManyRowsPerExpert) {
  for (gpu::MoeGemm g : kWgmmaKernels) {
    Case c;
    c.gemm = g;
    c.swiglu = GetParam();
    c.tokens = 600;  // ~300 rows per expert: full tiles and partial ones
    c.top_k = 4;
    c.experts = 8;
    c.hidden = 512;
    c.inter = 384;
    Check(c);
  }
  Case c;
  c.swiglu = GetParam();
  c.tokens = 600;  // the default picks a wgmma kernel here
  c.top_k = 4;
  c.experts = 8;
  c.hidden = 512;
  c.inter = 384;
  c.rounding = Rounding::kRtna;
  Check(c);
}

TEST(MoeWgmmaLayerTest, LayerGateUpOnWgmma) {
  KS_SKIP_WITHOUT_CUDA();
  Case c;
  c.gemm = gpu::MoeGemm::kWgmma;
  c.stage = MoeStage::kLayer;
  c.tokens = 100;
  c.top_k = 4;
  c.experts = 6;
  c.hidden = 256;
  c.inter = 128;
  c.out_dim = 256;
  Check(c, 6e-3);
  c.gemm = gpu::MoeGemm::kWgmmaSw;
  Check(c, 6e-3);
  c.gemm = gpu::MoeGemm::kWgmma;

  // The 192- and 256-row tilings would hand their routing tiles to the down kernel.
  std::mt19937_64 rng(FreshSeed());
  const Inputs h = MakeInputs(c, rng);
  const MoeParams p = Validated(c, h);
  Device d(h);
  DeviceTensor out(p.OutputDesc());
  TensorView ov = out.view();
  for (gpu::MoeGemm g : {gpu::MoeGemm::kWgmmaTall, gpu::MoeGemm::kWgmmaWide, gpu::MoeGemm::kWgmmaWideSw}) {
    const absl::Status st = gpu::RunMoeWithGemm(g, 0, p, d.in, ov, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  }
}

TEST(MoeCudaAutoTest, LayerDeterministicAndGraphCapturable) {
  KS_SKIP_WITHOUT_CUDA();
  Case c;
  c.stage = MoeStage::kLayer;
  c.tokens = 300;
  c.top_k = 6;
  c.experts = 20;
  c.hidden = 512;
  c.inter = 256;
  c.out_dim = 512;  // a layer maps back to the hidden size
  Check(c, 6e-3);
  std::mt19937_64 rng(FreshSeed());
  const Inputs h = MakeInputs(c, rng);
  const MoeParams p = Validated(c, h);
  Device d(h);
  const HostTensor a = RunGpu(p, d, 0);
  const HostTensor b = RunGpu(p, d, 0);
  EXPECT_TRUE(SameBytes(a, b));

  DeviceTensor out(p.OutputDesc());
  KS_CUDA_OK(out.Fill(0xFF));
  TensorView ov = out.view();
  ASSERT_NO_FATAL_FAILURE(
      CaptureAndReplay([&](cudaStream_t stream) { return gpu::RunMoe(p, d.in, ov, stream); }, 2));
  EXPECT_TRUE(SameBytes(out.ToHost(), a));
}

TEST(MoeCudaAutoTest, UnsupportedShapeIsUnimplemented) {
  KS_SKIP_WITHOUT_CUDA();
  Case c;
  c.hidden = 96;  // K % 128 != 0
  std::mt19937_64 rng(1);
  const Inputs h = MakeInputs(c, rng);
  const MoeParams p = Validated(c, h);
  Device d(h);
  DeviceTensor out(p.OutputDesc());
  TensorView ov = out.view();
  const absl::Status st = gpu::RunMoe(p, d.in, ov, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_NE(st.message().find("128"), absl::string_view::npos) << st;
}

}  // namespace
}  // namespace kernelserve
