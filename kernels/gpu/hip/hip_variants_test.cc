// The HIP variant table's selection and its messages, on the CPU; and the
// kernel-name lookup the backend resolves table launches with.
#include "kernels/gpu/hip/hip_variants.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/gpu/hip/hip_code_objects.h"

namespace kernelserve {
namespace gpu {
namespace hip {
namespace {

using ::testing::HasSubstr;

OpCall Mla(DType kv) {
  OpCall c;
  c.op = BenchOp::kMlaDecode;
  const TensorDesc q{DType::kBf16, {1, 2, 16, kMlaLatentDim}}, pe{DType::kBf16, {1, 2, 16, kMlaRopeDim}};
  const TensorDesc cache{kv, {1, 64, kMlaRowDim}};
  EXPECT_TRUE(c.mla.Validate(q, pe, cache, false, 1, nullptr, nullptr, nullptr, nullptr).ok());
  return c;
}

TEST(HipVariants, MlaOnGfx942WithFnuzKvTakesTheMfmaKernel) {
  auto v = Select("gfx942", Mla(DType::kFp8E4M3Fnuz));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_STREQ((*v)->name, "mfma_a16w8");
  EXPECT_EQ((*v)->op, BenchOp::kMlaDecode);
}

TEST(HipVariants, MlaWithOcpKvIsUnimplementedNamingTheCase) {
  auto v = Select("gfx942", Mla(DType::kFp8E4M3Fn));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(v.status().message(),
            "hip backend has no gfx942 kernel for mla_decode (mfma_a16w8: KV fp8_e4m3fn (serves fp8_e4m3fnuz))");
}

TEST(HipVariants, AnotherArchitectureIsUnimplemented) {
  auto v = Select("gfx950", Mla(DType::kFp8E4M3Fnuz));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(),
            "hip backend has no gfx950 kernel for mla_decode (mfma_a16w8: device is gfx950 (serves gfx942))");
}

OpCall Fp8(Fp8Format format, DType dtype, int64_t d_qk) {
  OpCall c;
  c.op = BenchOp::kFp8Attention;
  c.fp8.format = format;
  const TensorDesc q{dtype, {1, 4, 32, d_qk}}, k{dtype, {1, 2, 64, d_qk}}, v{dtype, {1, 2, 64, 128}};
  const TensorDesc ds{DType::kFp32, {1}};
  const bool fp8 = dtype != DType::kBf16;
  EXPECT_TRUE(c.fp8.Validate(q, k, v, fp8 ? &ds : nullptr, fp8 ? &ds : nullptr, fp8 ? &ds : nullptr).ok());
  return c;
}

TEST(HipVariants, Fp8AttentionOnFnuzInputsTakesTheMfmaFp8Kernel) {
  for (int64_t d_qk : {128, 192}) {
    auto v = Select("gfx942", Fp8(Fp8Format::kE4M3Fnuz, DType::kFp8E4M3Fnuz, d_qk));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_STREQ((*v)->name, "mfma_fp8");
    EXPECT_EQ((*v)->op, BenchOp::kFp8Attention);
    // bf16 inputs are quantized to e4m3fnuz on the device first.
    v = Select("gfx942", Fp8(Fp8Format::kE4M3Fnuz, DType::kBf16, d_qk));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_STREQ((*v)->name, "mfma_fp8");
  }
}

TEST(HipVariants, Fp8AttentionItDoesNotServeIsUnimplementedNamingTheCase) {
  auto v = Select("gfx942", Fp8(Fp8Format::kE4M3Fn, DType::kFp8E4M3Fn, 128));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(v.status().message(),
            "hip backend has no gfx942 kernel for fp8_attention (mfma_fp8: format e4m3fn (serves e4m3fnuz))");
  v = Select("gfx950", Fp8(Fp8Format::kE4M3Fnuz, DType::kFp8E4M3Fnuz, 128));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(),
            "hip backend has no gfx950 kernel for fp8_attention (mfma_fp8: device is gfx950 (serves gfx942))");
}

TEST(HipVariants, EveryMoeStageTakesTheMxfp4KernelWithinItsShapes) {
  for (BenchOp op : {BenchOp::kMoeGateUp, BenchOp::kMoeDown, BenchOp::kMoeLayer}) {
    OpCall c;
    c.op = op;
    c.moe.stage = op == BenchOp::kMoeGateUp ? MoeStage::kGateUp : op == BenchOp::kMoeDown ? MoeStage::kDown
                                                                                           : MoeStage::kLayer;
    c.moe.tokens = 8;
    c.moe.top_k = 16;
    c.moe.experts = 896;
    c.moe.hidden = 3584;
    c.moe.inter = 384;
    c.moe.out_dim = 3584;
    auto v = Select("gfx942", c);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_STREQ((*v)->name, "mfma_mxfp4");
    c.moe.hidden = 3600;
    c.moe.inter = 400;
    v = Select("gfx942", c);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(v.status().message()),
                HasSubstr("hip backend has no gfx942 kernel for " + BenchOpName(op) + " (mfma_mxfp4: moe: the hip "
                          "backend needs "));
  }
}

TEST(HipVariants, AttentionAtHeadDims64128And256OnGfx942) {
  OpCall c;
  c.op = BenchOp::kAttention;
  for (int64_t d : {64, 128, 256}) {
    const TensorDesc t{DType::kBf16, {1, 4, 32, d}};
    ASSERT_TRUE(c.attention.Validate(t, t, t).ok());
    auto v = Select("gfx942", c);
    ASSERT_TRUE(v.ok()) << d << ": " << v.status();
    EXPECT_STREQ((*v)->name, "mfma_bf16");
    v = Select("gfx950", c);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().message(),
              "hip backend has no gfx950 kernel for attention (mfma_bf16: device is gfx950 (serves gfx942))");
  }
  const TensorDesc t96{DType::kBf16, {1, 4, 32, 96}};
  ASSERT_TRUE(c.attention.Validate(t96, t96, t96).ok());
  auto v = Select("gfx942", c);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(v.status().message(), "hip backend has no gfx942 kernel for attention (mfma_bf16: attention: the hip "
                                  "backend serves head_dim 64, 128 or 256 (got 96))");
}

TEST(HipVariants, EveryEntryDescribesItself) {
  for (const Variant& v : Variants()) {
    EXPECT_GT(std::string(v.name).size(), 0u);
    EXPECT_GT(std::string(v.description).size(), 0u);
    EXPECT_THAT(v.serves, HasSubstr("gfx942"));
    EXPECT_NE(v.run, nullptr);
  }
}

TEST(FindKernelSymbol, CNamesAndMangledIdentifiers) {
  const CodeObject o{"x_gfx942", "gfx942", nullptr, 0,
                     {"KsMlaDecodeA16w8Gfx942", "_ZN11kernelserve3gpu3mla12_GLOBAL__N_114MlaMergeKernelENS1_7KParamsE",
                      "_ZN11kernelserve3gpu3mla12_GLOBAL__N_118MlaMergeHalfKernelENS1_7KParamsE"}};
  EXPECT_EQ(FindKernelSymbol(o, "KsMlaDecodeA16w8Gfx942"), "KsMlaDecodeA16w8Gfx942");
  EXPECT_EQ(FindKernelSymbol(o, "MlaMergeKernel"), o.kernels[1]);
  EXPECT_EQ(FindKernelSymbol(o, "MlaMergeHalfKernel"), o.kernels[2]);
  EXPECT_EQ(FindKernelSymbol(o, "MergeKernel"), "");  // "14MlaMergeKernel" is not "11MergeKernel"
  EXPECT_EQ(FindKernelSymbol(o, "KsMlaDecode"), "");
}

}  // namespace
}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
