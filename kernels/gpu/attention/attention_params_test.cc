// Host arguments -> device params of the bf16 attention kernels, on the CPU:
// strides per layout, GQA group, mask offset, scale, and the status of every
// call no kernel takes.
#include "kernels/gpu/attention/attention_params.h"

#include <cmath>
#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace {

// Addresses only: nothing reads them.
void* Addr(uintptr_t a) { return reinterpret_cast<void*>(a); }

Shape AttnShape(Layout l, int64_t b, int64_t h, int64_t s, int64_t d) {
  return l == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

struct Call {
  AttentionParams p;
  TensorView q, k, v, out;
};

Call MakeCall(Layout layout, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t skv, int64_t d,
              bool causal) {
  Call c;
  c.p.layout = layout;
  c.p.causal = causal;
  const TensorDesc q{DType::kBf16, AttnShape(layout, b, hq, sq, d)};
  const TensorDesc kv{DType::kBf16, AttnShape(layout, b, hkv, skv, d)};
  EXPECT_TRUE(c.p.Validate(q, kv, kv).ok());
  c.q = TensorView{q, Addr(0x10000)};
  c.k = TensorView{kv, Addr(0x20000)};
  c.v = TensorView{kv, Addr(0x30000)};
  c.out = TensorView{q, Addr(0x40000)};
  return c;
}

absl::StatusOr<FlashFwdParams> Make(const Call& c) { return MakeFlashFwdParams(c.p, c.q, c.k, c.v, c.out); }

TEST(AttentionParamsTest, BhsdStridesAndMask) {
  Call c = MakeCall(Layout::kBhsd, 2, 8, 2, 100, 300, 128, true);
  c.p.rounding = Rounding::kRtz;
  const auto fp = Make(c);
  ASSERT_TRUE(fp.ok()) << fp.status();
  EXPECT_EQ(fp->q, c.q.data);
  EXPECT_EQ(fp->o, c.out.data);
  EXPECT_EQ(fp->q_batch_stride, 8 * 100 * 128);
  EXPECT_EQ(fp->q_head_stride, 100 * 128);
  EXPECT_EQ(fp->q_row_stride, 128);
  EXPECT_EQ(fp->k_batch_stride, 2 * 300 * 128);
  EXPECT_EQ(fp->k_head_stride, 300 * 128);
  EXPECT_EQ(fp->v_row_stride, 128);
  EXPECT_EQ(fp->o_head_stride, 100 * 128);
  EXPECT_EQ(fp->group, 4);
  EXPECT_EQ(fp->causal_offset, 200);
  EXPECT_EQ(fp->rounding, kFlashRtz);
  EXPECT_FLOAT_EQ(fp->scale_log2, static_cast<float>(1.4426950408889634 / std::sqrt(128.0)));
}

TEST(AttentionParamsTest, BshdStrides) {
  const Call c = MakeCall(Layout::kBshd, 3, 4, 4, 50, 40, 64, false);
  const auto fp = Make(c);
  ASSERT_TRUE(fp.ok()) << fp.status();
  EXPECT_EQ(fp->q_batch_stride, 4 * 50 * 64);
  EXPECT_EQ(fp->q_head_stride, 64);
  EXPECT_EQ(fp->q_row_stride, 4 * 64);
  EXPECT_EQ(fp->k_row_stride, 4 * 64);
  EXPECT_EQ(fp->k_batch_stride, 4 * 40 * 64);
  EXPECT_EQ(fp->group, 1);
  EXPECT_EQ(fp->causal_offset, -10);
  EXPECT_EQ(fp->batch, 3);
  EXPECT_EQ(fp->seq_kv, 40);
}

TEST(AttentionParamsTest, HeadDimsWithoutKernelAreUnimplemented) {
  const Call c = MakeCall(Layout::kBhsd, 1, 2, 2, 8, 8, 96, false);
  EXPECT_EQ(Make(c).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(AttentionParamsTest, MisalignedDataIsUnimplemented) {
  Call c = MakeCall(Layout::kBhsd, 1, 2, 2, 8, 8, 64, false);
  c.k.data = Addr(0x20008);
  const auto st = Make(c).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_NE(st.message().find("16-byte"), absl::string_view::npos) << st;
}

TEST(AttentionParamsTest, ViewsThatDoNotMatchAreInvalid) {
  Call c = MakeCall(Layout::kBhsd, 1, 2, 2, 8, 8, 64, false);
  Call wrong_shape = c;
  wrong_shape.out.desc.shape = {1, 2, 9, 64};
  EXPECT_EQ(Make(wrong_shape).status().code(), absl::StatusCode::kInvalidArgument);
  Call wrong_dtype = c;
  wrong_dtype.v.desc.dtype = DType::kFp32;
  EXPECT_EQ(Make(wrong_dtype).status().code(), absl::StatusCode::kInvalidArgument);
  Call no_data = c;
  no_data.q.data = nullptr;
  EXPECT_EQ(Make(no_data).status().code(), absl::StatusCode::kInvalidArgument);
  Call bad_scale = c;
  bad_scale.p.scale = 0;
  EXPECT_EQ(Make(bad_scale).status().code(), absl::StatusCode::kInvalidArgument);
  Call bad_heads = c;
  bad_heads.p.heads_kv = 0;
  EXPECT_EQ(Make(bad_heads).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AttentionParamsTest, SizesPastTheGridAreUnimplemented) {
  Call c = MakeCall(Layout::kBhsd, 1, 2, 2, 8, 8, 64, false);
  c.p.heads_q = c.p.heads_kv = 70000;
  EXPECT_EQ(Make(c).status().code(), absl::StatusCode::kUnimplemented);
}

// An empty output is nothing to launch: no further checks.
TEST(AttentionParamsTest, NoWorkWithoutQueries) {
  Call c = MakeCall(Layout::kBhsd, 1, 2, 2, 8, 8, 64, false);
  c.p.seq_q = 0;
  c.p.scale = 0;
  c.q.desc.shape = c.out.desc.shape = {1, 2, 0, 64};
  const auto fp = Make(c);
  ASSERT_TRUE(fp.ok()) << fp.status();
  EXPECT_FALSE(HasWork(*fp));
  EXPECT_TRUE(HasWork(*Make(MakeCall(Layout::kBhsd, 1, 2, 2, 8, 8, 64, false))));
}

}  // namespace
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
