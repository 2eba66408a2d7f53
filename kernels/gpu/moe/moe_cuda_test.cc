// MXFP4 MoE on the GPU against the fp64 oracle: every entry of the variant
// table on the shapes it serves, and the mma.sync kernel with each of its
// row tiles forced. Outputs are poisoned before each run; a NaN is a
// failure; every case draws fresh random inputs. Skips without a device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/op_call.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/oracle.h"
#include "kernels/gpu/common/kernel_variant.h"
#include "kernels/gpu/gpu_test_util.h"
#include "kernels/gpu/launch_test_fixtures.h"
#include "kernels/gpu/moe/moe.h"
#include "kernels/gpu/moe/moe_plan.h"
#include "kernels/gpu/moe/moe_variants.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

using gpu_test::CaptureAndReplay;
using gpu_test::CountNan;
using gpu_test::DeviceTensor;
using gpu_test::FreshSeed;
using gpu_test::KimiMoeParams;
using gpu_test::SameBytes;

// How the pairs pick their experts.
enum class Routing {
  kDistinct,  // top_k distinct experts per token, uniform
  kSkewed,    // every token on expert 0, expert 1 on one pair, the upper half of the experts on none
};

// The E8M0 scales, which decide the dequantization's path: a scale in
// 1..128 (2^-126 .. 2^1) needs one multiply, a larger one two; the kernels
// take the one-multiply path where a warp vote finds only such scales.
enum class Scales {
  kBoth,         // 2^-9 .. 2^3: a warp's chunk almost always holds a two-multiply block
  kOneMultiply,  // 2^-27 .. 2^1: the one-multiply path only
  // 2^-27 .. 2^1, but 2^2 .. 2^3 in every third band of 16 weight rows by
  // 64 K: warps of one launch, and one warp's k-tiles, take both paths.
  kBandsOfTwo,
};

struct Case {
  MoeStage stage = MoeStage::kGateUp;
  bool swiglu = false, weighted = false;
  int64_t tokens = 40, top_k = 4, experts = 8, hidden = 256, inter = 128, out_dim = 256;
  Routing routing = Routing::kDistinct;
  Rounding rounding = Rounding::kRtne;
  Scales scales = Scales::kBoth;
};

struct Inputs {
  HostTensor x, ids, weights, w13, w13s, w2, w2s;
};

void RandomFp4(HostTensor* w, HostTensor* s, Scales scales, std::mt19937_64& rng) {
  for (int64_t i = 0; i < w->num_bytes(); ++i) w->bytes()[i] = static_cast<uint8_t>(rng());
  const int64_t blocks = s->desc().shape.back();  // per weight row
  for (int64_t i = 0; i < s->num_bytes(); ++i) {
    const int64_t row = i / blocks, block = i % blocks;
    const bool two = scales == Scales::kBoth ||
                     (scales == Scales::kBandsOfTwo && (row / 16 + block / 2) % 3 == 0);
    s->bytes()[i] = static_cast<uint8_t>(two ? (scales == Scales::kBoth ? 118 + rng() % 13 : 129 + rng() % 2)
                                             : 100 + rng() % 29);
  }
}

// The experts of token t (distinct).
std::vector<int32_t> TokenExperts(const Case& c, int64_t t, std::mt19937_64& rng) {
  std::vector<int32_t> pool(c.experts);
  std::iota(pool.begin(), pool.end(), 0);
  if (c.routing == Routing::kDistinct) {
    std::shuffle(pool.begin(), pool.end(), rng);
    pool.resize(c.top_k);
    return pool;
  }
  // Expert 0 first; the others from 2 .. E/2 - 1 (token 0 takes expert 1 once).
  std::vector<int32_t> rest(pool.begin() + 2, pool.begin() + c.experts / 2);
  std::shuffle(rest.begin(), rest.end(), rng);
  std::vector<int32_t> e = {0};
  if (t == 0) e.push_back(1);
  for (size_t i = 0; e.size() < static_cast<size_t>(c.top_k); ++i) e.push_back(rest.at(i));
  return e;
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
  for (int64_t t = 0; t < c.tokens; ++t) {
    const std::vector<int32_t> experts = TokenExperts(c, t, rng);
    for (int64_t r = 0; r < c.top_k; ++r) {
      in.ids.data<int32_t>()[t * c.top_k + r] = experts[r];
      in.weights.data<float>()[t * c.top_k + r] = std::uniform_real_distribution<float>(0.f, 1.f)(rng);
    }
  }
  if (c.stage != MoeStage::kDown) {
    in.w13 = HostTensor(DType::kFp4E2M1, {c.experts, 2 * c.inter, c.hidden});
    in.w13s = HostTensor(DType::kE8M0, {c.experts, 2 * c.inter, c.hidden / 32});
    RandomFp4(&in.w13, &in.w13s, c.scales, rng);
  }
  if (c.stage != MoeStage::kGateUp) {
    in.w2 = HostTensor(DType::kFp4E2M1, {c.experts, c.out_dim, c.inter});
    in.w2s = HostTensor(DType::kE8M0, {c.experts, c.out_dim, c.inter / 32});
    RandomFp4(&in.w2, &in.w2s, c.scales, rng);
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

OpCall MoeCall(const MoeParams& p, const MoeInputs& in) {
  OpCall call;
  call.op = p.stage == MoeStage::kGateUp ? BenchOp::kMoeGateUp
            : p.stage == MoeStage::kDown ? BenchOp::kMoeDown
                                         : BenchOp::kMoeLayer;
  call.moe = p;
  call.moe_in = in;
  return call;
}

// Launches into a poisoned output and returns it.
using Launch = std::function<absl::Status(TensorView& out)>;
HostTensor RunPoisoned(const MoeParams& p, const Launch& launch) {
  DeviceTensor out(p.OutputDesc());
  EXPECT_EQ(out.Fill(0xFF), cudaSuccess);  // NaN in bf16
  TensorView ov = out.view();
  const absl::Status st = launch(ov);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out.ToHost();
}

// One case on fresh inputs: the oracle once, then each launch against it.
class MoeCheck {
 public:
  explicit MoeCheck(const Case& c) : c_(c) {
    std::mt19937_64 rng(FreshSeed());
    host_ = MakeInputs(c, rng);
    p_ = Validated(c, host_);
    device_ = std::make_unique<Device>(host_);
    MoeInputs hin;
    hin.x = host_.x.view();
    hin.topk_ids = host_.ids.view();
    hin.topk_weights = host_.weights.view();
    if (host_.w13.num_bytes() > 0) {
      hin.w13 = host_.w13.view();
      hin.w13_scales = host_.w13s.view();
    }
    if (host_.w2.num_bytes() > 0) {
      hin.w2 = host_.w2.view();
      hin.w2_scales = host_.w2s.view();
    }
    auto ref = oracle::Moe(p_, hin);
    EXPECT_TRUE(ref.ok()) << ref.status();
    if (ref.ok()) ref_ = *std::move(ref);
  }

  const MoeParams& params() const { return p_; }
  OpCall call() const { return MoeCall(p_, device_->in); }

  void Expect(const std::string& what, const Launch& launch, double tol) {
    const HostTensor got = RunPoisoned(p_, launch);
    const std::vector<double> out = numerics::ToDoubles(got.view());
    ASSERT_EQ(out.size(), ref_.size()) << what;
    const numerics::ErrorMetrics m = numerics::CompareToReference(out.data(), ref_.data(), ref_.size());
    EXPECT_EQ(CountNan(out), 0) << what << ": unwritten or NaN outputs";
    EXPECT_EQ(m.nonfinite, 0) << what;
    EXPECT_LT(m.rel_rms, tol) << what << ": max_abs " << m.max_abs;
    std::printf("%s stage=%d swiglu=%d weighted=%d T=%lld k=%lld E=%lld routing=%d: rel_rms %.3g\n", what.c_str(),
                static_cast<int>(c_.stage), c_.swiglu, c_.weighted, static_cast<long long>(c_.tokens),
                static_cast<long long>(c_.top_k), static_cast<long long>(c_.experts), static_cast<int>(c_.routing),
                m.rel_rms);
  }

 private:
  Case c_;
  Inputs host_;
  MoeParams p_;
  std::unique_ptr<Device> device_;
  std::vector<double> ref_;
};

gpu::DeviceCaps Caps() {
  const absl::StatusOr<gpu::DeviceCaps> caps = gpu::QueryDeviceCaps(0);
  EXPECT_TRUE(caps.ok()) << caps.status();
  return caps.ok() ? *caps : gpu::DeviceCaps{};
}

// Every table entry that serves the case, and the dispatcher's pick; returns
// how many entries served it.
int CheckTable(const Case& c, double tol = 4e-3) {
  MoeCheck check(c);
  const gpu::DeviceCaps caps = Caps();
  const OpCall call = check.call();
  int served = 0;
  for (const gpu::KernelVariant& v : gpu::MoeVariants()) {
    const std::string no = v.unsupported(caps, call);
    if (!no.empty()) {
      std::printf("%s: does not serve it (%s)\n", v.name, no.c_str());
      continue;
    }
    ++served;
    check.Expect(v.name, [&](TensorView& out) { return v.run(call, out, nullptr); }, tol);
  }
  check.Expect("default", [&](TensorView& out) {
    return gpu::RunSelected(gpu::MoeVariants(), "moe", caps, call, out, nullptr);
  }, tol);
  EXPECT_GE(served, 1);
  return served;
}

// Every GEMM of the call on one kernel, forced by its tile rows: 0 the
// weight-streaming kernel, kRsRows the wgmma kernel with the weights in
// registers (with B resident over several column tiles where K allows, as
// the dispatcher runs it, and without), else the mma.sync kernel with that
// row tile (each on small shapes).
constexpr int kForceRs = gpu::moe::kRsRows;
void CheckForcedGemm(int tile_rows, const Case& c, double tol = 4e-3) {
  MoeCheck check(c);
  gpu::moe::MoePlan plan;
  plan.stream = tile_rows == 0;
  plan.wgmma_rs = tile_rows == kForceRs;
  plan.rs_b_resident = plan.wgmma_rs;
  plan.rs_stream_cols = gpu::moe::kRsStreamCols;
  if (tile_rows != 0 && !plan.wgmma_rs) plan.mma_rows = tile_rows;
  auto run = [&](const gpu::moe::MoePlan& pl) {
    return [&check, pl](TensorView& out) {
      return gpu::RunMoeWithPlan(pl, check.params(), check.call().moe_in, out, nullptr);
    };
  };
  check.Expect(tile_rows == 0           ? std::string("stream")
               : tile_rows == kForceRs ? std::string("wgmma_rs")
                                       : "mma_sync/tile " + std::to_string(tile_rows),
               run(plan), tol);
  if (plan.wgmma_rs) {
    // Walks of other lengths: with and without a partial last walk.
    plan.rs_resident_cols = 3;
    check.Expect("wgmma_rs, B resident over 3 column tiles", run(plan), tol);
    plan.rs_b_resident = false;
    for (int cols : {1, 3}) {
      plan.rs_stream_cols = cols;
      check.Expect("wgmma_rs, B streamed over " + std::to_string(cols) + " column tiles", run(plan), tol);
    }
  }
}

// Gate/up at K = hidden: skewed routing (expert 0 on every token: 16-row
// tiles; expert 1 on one row), then the decode case with SwiGLU (one or two
// rows per expert).
void CheckSkewedThenDecode(int tile_rows, int64_t hidden, Scales scales) {
  Case c;
  c.scales = scales;
  c.routing = Routing::kSkewed;
  c.tokens = 150;
  c.experts = 16;
  c.hidden = hidden;
  c.inter = 64;
  CheckForcedGemm(tile_rows, c);
  c.routing = Routing::kDistinct;
  c.tokens = 3;
  c.swiglu = true;
  CheckForcedGemm(tile_rows, c);
}

Case GateUpSwigluPartialColumnTile() {
  Case c;
  c.swiglu = true;
  c.inter = 96;
  c.hidden = 384;
  c.tokens = 70;
  return c;
}

Case DownStage() {
  Case c;
  c.stage = MoeStage::kDown;
  c.inter = 256;
  c.out_dim = 200;
  return c;
}

Case LayerManyExpertsFewTokens() {
  Case c;
  c.stage = MoeStage::kLayer;
  c.tokens = 5;
  c.top_k = 8;
  c.experts = 300;
  c.inter = 128;
  c.out_dim = 256;
  return c;
}

// ~300 rows per expert: full tiles and partial ones in every tiling.
Case ManyRowsPerExpert(bool swiglu) {
  Case c;
  c.swiglu = swiglu;
  c.tokens = 600;
  c.top_k = 4;
  c.experts = 8;
  c.hidden = 512;
  c.inter = 384;
  return c;
}

class MoeForcedGemmTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { KS_SKIP_WITHOUT_CUDA(); }
};

INSTANTIATE_TEST_SUITE_P(Gemms, MoeForcedGemmTest, ::testing::Values(0, 64, kForceRs),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 0          ? std::string("Stream")
                                  : i.param == kForceRs ? std::string("WgmmaRs")
                                                        : "MmaSyncRows" + std::to_string(i.param);
                         });

// 20 rows per expert: full and partial 16-row tiles, both of the streaming
// kernel's n8 tiles.
TEST_P(MoeForcedGemmTest, GateUpPerPair) { CheckForcedGemm(GetParam(), Case{}); }

TEST_P(MoeForcedGemmTest, GateUpSwigluPartialColumnTile) {
  CheckForcedGemm(GetParam(), GateUpSwigluPartialColumnTile());
  Case c = GateUpSwigluPartialColumnTile();
  c.inter = 100;  // intermediate columns no multiple of 8; 200 weight rows no multiple of 16
  CheckForcedGemm(GetParam(), c);
  c.swiglu = false;
  c.tokens = 3;  // one or two rows per expert, the decode case
  CheckForcedGemm(GetParam(), c);
}

TEST_P(MoeForcedGemmTest, DownPerPairAndWeighted) {
  Case c = DownStage();
  CheckForcedGemm(GetParam(), c);
  c.weighted = true;
  c.rounding = Rounding::kRtz;
  CheckForcedGemm(GetParam(), c, 6e-3);
}

TEST_P(MoeForcedGemmTest, LayerManyExpertsFewTokens) {
  CheckForcedGemm(GetParam(), LayerManyExpertsFewTokens(), 6e-3);
}

// K long enough that the streaming kernel holds only a few x rows in shared
// memory (K = 2048: 256-element chunks, up to 3 rows; K = 1152: 128-element
// chunks, up to 6): tiles of 1 to 16 rows take both x paths, with one
// and two n8 tiles.
TEST_P(MoeForcedGemmTest, LongKXInSharedMemoryOrNot) {
  for (int64_t hidden : {2048, 1152}) CheckSkewedThenDecode(GetParam(), hidden, Scales::kBoth);
}

// Scales that need one multiply only, so that the streaming kernel's warps
// take the vote's common path on every chunk (the other cases mostly take
// the two-multiply one): 256-element chunks (K = 256, 2048) and 128-element
// ones (K = 384, 1152), x in shared memory and from global memory, one and
// two n8 tiles, gate/up with and without SwiGLU, and down.
TEST_P(MoeForcedGemmTest, ScalesOfOneMultiplyOnly) {
  for (int64_t hidden : {256, 384, 2048, 1152}) {
    CheckSkewedThenDecode(GetParam(), hidden, Scales::kOneMultiply);
  }
  Case d = DownStage();
  d.scales = Scales::kOneMultiply;
  CheckForcedGemm(GetParam(), d);
}

// Both paths in one launch and in one warp's K loop (Scales::kBandsOfTwo):
// a warp's vote is its own and per chunk or k-tile.
TEST_P(MoeForcedGemmTest, WarpsOnBothScalePaths) {
  for (int64_t hidden : {384, 2048}) CheckSkewedThenDecode(GetParam(), hidden, Scales::kBandsOfTwo);
  Case d = DownStage();
  d.scales = Scales::kBandsOfTwo;
  CheckForcedGemm(GetParam(), d);
}

TEST_P(MoeForcedGemmTest, ExpertsWithZeroOneAndAllRows) {
  Case c;
  c.routing = Routing::kSkewed;
  c.tokens = 150;
  c.experts = 16;
  CheckForcedGemm(GetParam(), c);
  c.stage = MoeStage::kLayer;
  CheckForcedGemm(GetParam(), c, 6e-3);
}

// One expert holding 1 to 257 rows: every N of the wgmma kernel with the
// weights in registers (a tile's rows rounded up to 32, a switch over 6
// instantiations), at and around each multiple of 32, and second tiles.
TEST(MoeWgmmaRsTest, EveryTileWidth) {
  KS_SKIP_WITHOUT_CUDA();
  int i = 0;
  for (int64_t rows : {1, 31, 32, 33, 64, 95, 97, 128, 150, 161, 192, 200, 224, 230, 255, 256, 257}) {
    Case c;
    c.tokens = rows;
    c.top_k = 1;
    c.experts = 1;
    c.stage = i % 3 == 2 ? MoeStage::kDown : MoeStage::kGateUp;
    c.swiglu = c.stage == MoeStage::kGateUp && i % 2 == 1;
    c.inter = 128;
    c.out_dim = 192;
    SCOPED_TRACE("rows " + std::to_string(rows));
    CheckForcedGemm(kForceRs, c, c.stage == MoeStage::kDown ? 6e-3 : 4e-3);
    ++i;
  }
}

// The epilogue's two store paths: 16-byte pieces of output rows where a row's
// bytes are a multiple of 16, element by element where they are not (202
// bf16 or fp32 columns), each with a partial last column tile, at tile widths
// of one pass and of several (fp32 passes are 32 rows, bf16 64).
TEST(MoeWgmmaRsTest, EpilogueRowWidths) {
  KS_SKIP_WITHOUT_CUDA();
  for (int64_t out_dim : {200, 202}) {
    for (bool weighted : {false, true}) {
      for (int64_t rows : {20, 150}) {
        Case c;
        c.stage = MoeStage::kDown;
        c.weighted = weighted;
        c.tokens = rows;
        c.top_k = 1;
        c.experts = 1;
        c.inter = 128;
        c.out_dim = out_dim;
        SCOPED_TRACE("N " + std::to_string(out_dim) + " weighted " + std::to_string(weighted) + " rows " +
                     std::to_string(rows));
        CheckForcedGemm(kForceRs, c, 6e-3);
      }
    }
  }
}

// Column tiles that a walk of 2, 3 or 4 does not divide (5 of gate/up, 7
// of down, the last partial), so that a grid's last CTA walks fewer: gate/up
// with and without SwiGLU (B streamed: K = 512), down per pair and weighted
// (B resident), 192- and 8-row routing tiles.
TEST(MoeWgmmaRsTest, WalksWithAShortLastOne) {
  KS_SKIP_WITHOUT_CUDA();
  for (int i = 0; i < 4; ++i) {
    Case c;
    c.tokens = 200;
    c.top_k = 2;
    c.experts = 2;
    c.hidden = 512;
    c.stage = i < 2 ? MoeStage::kGateUp : MoeStage::kDown;
    c.inter = c.stage == MoeStage::kDown ? 256 : 320;  // down's K: a multiple of 128
    c.out_dim = 840;
    c.swiglu = i == 1;
    c.weighted = i == 3;
    SCOPED_TRACE("case " + std::to_string(i));
    CheckForcedGemm(kForceRs, c, c.stage == MoeStage::kDown ? 6e-3 : 4e-3);
  }
}

// Every table entry on the shapes it serves; the bool is SwiGLU (gate/up)
// or the weighted sum (down).
class MoeVariantsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { KS_SKIP_WITHOUT_CUDA(); }
};

INSTANTIATE_TEST_SUITE_P(Epilogue, MoeVariantsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Fused" : "PerPair"; });

TEST_P(MoeVariantsTest, FewRowsPerExpert) {
  Case c;
  c.swiglu = GetParam();
  EXPECT_EQ(CheckTable(c), 3);  // every entry serves it
}

TEST_P(MoeVariantsTest, PartialColumnTileAndOddKTiles) {
  Case c = GateUpSwigluPartialColumnTile();  // one partial column tile, 6 k-tiles of 64
  c.swiglu = GetParam();
  CheckTable(c);
  c.inter = 160;  // 1.25 / 2.5 column tiles
  c.rounding = Rounding::kRtz;
  CheckTable(c);
}

TEST_P(MoeVariantsTest, ManyRowsPerExpert) {
  CheckTable(ManyRowsPerExpert(GetParam()));
  Case c = ManyRowsPerExpert(GetParam());
  c.rounding = Rounding::kRtna;
  CheckTable(c);
}

TEST_P(MoeVariantsTest, ExpertsWithZeroOneAndAllRows) {
  Case c = ManyRowsPerExpert(GetParam());
  c.routing = Routing::kSkewed;  // 600 rows on expert 0, 1 on expert 1, none on 4..7
  c.top_k = 3;
  CheckTable(c);
}

// More pairs than the one-block routing takes (8192): the three-kernel routing.
TEST_P(MoeVariantsTest, RoutingPastOneBlock) {
  Case c;
  c.swiglu = GetParam();
  c.tokens = 2100;  // 8400 pairs
  EXPECT_EQ(CheckTable(c), 3);
}

TEST_P(MoeVariantsTest, Down) {
  Case c = DownStage();
  c.weighted = GetParam();
  if (c.weighted) c.rounding = Rounding::kRtz;
  EXPECT_EQ(CheckTable(c, 6e-3), 3);  // stream, wgmma_rs and mma_sync
}

TEST(MoeVariantsLayerTest, LayerRunsOnEveryEntry) {
  KS_SKIP_WITHOUT_CUDA();
  EXPECT_EQ(CheckTable(LayerManyExpertsFewTokens(), 6e-3), 3);
  Case c;
  c.stage = MoeStage::kLayer;
  c.tokens = 100;
  c.top_k = 4;
  c.experts = 6;
  c.hidden = 256;
  c.inter = 128;
  c.out_dim = 256;
  EXPECT_EQ(CheckTable(c, 6e-3), 3);
}

// The dispatcher takes the entry of PlanMoe's GEMM (a host-side check: no device).
TEST(MoeVariantsDispatchTest, FollowsThePlan) {
  gpu::DeviceCaps caps;
  caps.cc_major = 9;
  caps.cc_minor = 0;
  struct Want {
    MoeStage stage;
    int64_t tokens;
    const char* entry;
  };
  for (const Want& w : {Want{MoeStage::kGateUp, 8, "stream"}, Want{MoeStage::kGateUp, 32, "stream"},
                        Want{MoeStage::kDown, 8, "stream"}, Want{MoeStage::kLayer, 32, "stream"},
                        Want{MoeStage::kGateUp, 1024, "wgmma_rs"}, Want{MoeStage::kLayer, 1024, "wgmma_rs"},
                        Want{MoeStage::kDown, 2048, "mma_sync"}, Want{MoeStage::kDown, 4096, "wgmma_rs"},
                        Want{MoeStage::kGateUp, 8192, "wgmma_rs"}, Want{MoeStage::kLayer, 16384, "wgmma_rs"}}) {
    const auto v = gpu::SelectVariant(gpu::MoeVariants(), "moe", caps, MoeCall(KimiMoeParams(w.stage, w.tokens), {}));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_STREQ((*v)->name, w.entry) << "T=" << w.tokens;
  }
  gpu::DeviceCaps ampere;
  ampere.cc_major = 8;
  const auto none = gpu::SelectVariant(gpu::MoeVariants(), "moe", ampere, MoeCall(KimiMoeParams(MoeStage::kGateUp, 8), {}));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnimplemented);
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
  MoeCheck check(c);
  const MoeParams& p = check.params();
  const MoeInputs in = check.call().moe_in;
  const Launch run = [&](TensorView& out) { return gpu::RunMoe(p, in, out, nullptr); };
  check.Expect("RunMoe", run, 6e-3);
  const HostTensor a = RunPoisoned(p, run);
  const HostTensor b = RunPoisoned(p, run);
  EXPECT_TRUE(SameBytes(a, b));

  DeviceTensor out(p.OutputDesc());
  KS_CUDA_OK(out.Fill(0xFF));
  TensorView ov = out.view();
  ASSERT_NO_FATAL_FAILURE(
      CaptureAndReplay([&](cudaStream_t stream) { return gpu::RunMoe(p, in, ov, stream); }, 2));
  EXPECT_TRUE(SameBytes(out.ToHost(), a));
}

// An E8M0 NaN scale (0xFF) in one weight block poisons exactly the outputs
// that read it (every pair of that expert, in that weight row's column), in
// every entry that serves the call; all the others match the oracle.
TEST(MoeCudaNanTest, NanBlockPoisonsOnlyItsReaders) {
  KS_SKIP_WITHOUT_CUDA();
  Case c;
  c.tokens = 6;
  std::mt19937_64 rng(FreshSeed());
  Inputs h = MakeInputs(c, rng);
  const int32_t e = h.ids.data<int32_t>()[0];
  const int64_t row = 37, blocks = c.hidden / 32;
  h.w13s.bytes()[(e * 2 * c.inter + row) * blocks + 3] = 0xFF;
  const MoeParams p = Validated(c, h);
  Device d(h);
  MoeInputs hin;
  hin.x = h.x.view();
  hin.topk_ids = h.ids.view();
  hin.topk_weights = h.weights.view();
  hin.w13 = h.w13.view();
  hin.w13_scales = h.w13s.view();
  const auto ref = oracle::Moe(p, hin);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const OpCall call = MoeCall(p, d.in);
  const int64_t cols = 2 * c.inter;
  int served = 0;
  for (const gpu::KernelVariant& v : gpu::MoeVariants()) {
    if (!v.unsupported(Caps(), call).empty()) continue;
    ++served;
    const HostTensor got = RunPoisoned(p, [&](TensorView& out) { return v.run(call, out, nullptr); });
    const std::vector<double> out = numerics::ToDoubles(got.view());
    ASSERT_EQ(out.size(), ref->size());
    std::vector<double> kept_out, kept_ref;
    int64_t wrong_nan = 0, not_canonical = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
      const bool reads = h.ids.data<int32_t>()[i / cols] == e && i % cols == row;
      if (std::isnan(out[i]) != reads) ++wrong_nan;
      // DESIGN §4: a NaN rounds to the canonical 0x7FFF in every mode.
      if (reads && got.data<uint16_t>()[i] != 0x7FFF) ++not_canonical;
      if (!reads) {
        kept_out.push_back(out[i]);
        kept_ref.push_back((*ref)[i]);
      }
    }
    EXPECT_EQ(wrong_nan, 0) << v.name << ": NaN where no read of the block, or a reader left finite";
    EXPECT_EQ(not_canonical, 0) << v.name << ": a NaN output is not 0x7FFF";
    const numerics::ErrorMetrics m = numerics::CompareToReference(kept_out.data(), kept_ref.data(), kept_ref.size());
    EXPECT_LT(m.rel_rms, 4e-3) << v.name;
  }
  EXPECT_EQ(served, 3);
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
  const absl::Status table = gpu::RunSelected(gpu::MoeVariants(), "moe_gateup", Caps(), MoeCall(p, d.in), ov, nullptr);
  EXPECT_EQ(table.code(), absl::StatusCode::kUnimplemented) << table;
  EXPECT_NE(table.message().find("128"), absl::string_view::npos) << table;
}

}  // namespace
}  // namespace kernelserve
