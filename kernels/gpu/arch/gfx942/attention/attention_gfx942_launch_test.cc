// The gfx942 MHA forward launch on the CPU: grid and the shapes it serves.
#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/attention/attention_params.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {
namespace {

TEST(Gfx942AttentionLaunch, TheFiguresTheCodeObjectIsHeldTo) {
  EXPECT_EQ(sizeof(FlashFwdParams), 168u);  // attention_gfx942_hip_test's argument size
  EXPECT_EQ(kLdsBytes, 17408);
  EXPECT_EQ(kThreads, 4 * 64);
  EXPECT_EQ(kRows, 4 * 16);
}

TEST(Gfx942AttentionLaunch, GridOverRowBlocksHeadsAndBatchInEitherLayout) {
  for (Layout layout : {Layout::kBhsd, Layout::kBshd}) {
    AttentionParams p;
    p.layout = layout;
    p.causal = true;
    const bool bshd = layout == Layout::kBshd;
    const TensorDesc q{DType::kBf16, bshd ? std::vector<int64_t>{2, 100, 8, 128} : std::vector<int64_t>{2, 8, 100, 128}};
    const TensorDesc kv{DType::kBf16, bshd ? std::vector<int64_t>{2, 300, 2, 128} : std::vector<int64_t>{2, 2, 300, 128}};
    ASSERT_TRUE(p.Validate(q, kv, kv).ok());
    EXPECT_EQ(Unsupported(p), "");
    alignas(16) static uint16_t buf[8];
    const TensorView qv{q, buf}, kvv{kv, buf}, ov{p.OutputDesc(), buf};
    auto fp = MakeFlashFwdParams(p, qv, kvv, kvv, ov);
    ASSERT_TRUE(fp.ok()) << fp.status();
    const Grid g = GridOf(*fp);
    EXPECT_EQ(g.x, 2u);  // 100 rows in blocks of 64
    EXPECT_EQ(g.y, 8u);
    EXPECT_EQ(g.z, 2u);
    EXPECT_EQ(fp->group, 4);
    EXPECT_EQ(fp->causal_offset, 200);
    EXPECT_EQ(fp->q_row_stride, bshd ? 8 * 128 : 128);
  }
}

TEST(Gfx942AttentionLaunch, OnlyHeadDim128) {
  AttentionParams p;
  const TensorDesc t{DType::kBf16, {1, 2, 64, 64}};
  ASSERT_TRUE(p.Validate(t, t, t).ok());
  EXPECT_EQ(Unsupported(p), "attention: the hip backend serves head_dim 128 (got 64)");
}

}  // namespace
}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
