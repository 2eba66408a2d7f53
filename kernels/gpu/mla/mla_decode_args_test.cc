// The host-side arguments -> device parameters conversion, on the CPU.
#include "kernels/gpu/mla/mla_decode_args.h"

#include <cmath>
#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/launch_test_fixtures.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace {

using gpu_test::FakeAddr;

TEST(MakeKParams, Contiguous) {
  MlaDecodeParams p;
  p.kv_scale = 0.25;
  p.rounding = Rounding::kRtz;
  const TensorDesc q{DType::kBf16, {2, 3, 12, kMlaLatentDim}}, pe{DType::kBf16, {2, 3, 12, kMlaRopeDim}};
  const TensorDesc kv{DType::kFp8E4M3Fn, {2, 100, kMlaRowDim}};
  ASSERT_TRUE(p.Validate(q, pe, kv, false, 1, nullptr, nullptr, nullptr, nullptr).ok());
  MlaDecodeInputs in;
  in.q_lat = TensorView{q, FakeAddr(0x1000)};
  in.q_pe = TensorView{pe, FakeAddr(0x2000)};
  in.kv = TensorView{kv, FakeAddr(0x3000)};
  const MlaSplitPlan plan = PlanMlaSplits(2, 3, 12, p.max_seq, 0, 132);
  const KParams k = MakeKParams(p, in, FakeAddr(0x4000), plan);
  EXPECT_EQ(k.q_lat, in.q_lat.data);
  EXPECT_EQ(k.q_pe, in.q_pe.data);
  EXPECT_EQ(k.kv, in.kv.data);
  EXPECT_EQ(k.out, FakeAddr(0x4000));
  EXPECT_EQ(k.seq_lens, nullptr);
  EXPECT_EQ(k.kv_indices, nullptr);
  EXPECT_EQ(k.kv_indptr, nullptr);
  EXPECT_EQ(k.q_lens, nullptr);
  EXPECT_EQ(k.part_o, nullptr);
  EXPECT_EQ(k.part_ml, nullptr);
  EXPECT_EQ(k.q_len, 3);
  EXPECT_EQ(k.heads, 12);
  EXPECT_EQ(k.rows, 36);
  EXPECT_EQ(k.row_groups, plan.row_groups);
  EXPECT_EQ(k.splits, plan.splits);
  EXPECT_EQ(k.chunk, plan.chunk);
  EXPECT_EQ(k.paged, 0);
  EXPECT_EQ(k.page_size, 1);
  EXPECT_EQ(k.kv_seq, 100);
  EXPECT_EQ(k.rounding, static_cast<int>(Rounding::kRtz));
  EXPECT_FLOAT_EQ(k.sl2, static_cast<float>(p.scale * 0.25 / std::log(2.0)));
  EXPECT_FLOAT_EQ(p.scale, 1.0 / std::sqrt(576.0));
  EXPECT_EQ(k.out_scale, 0.25f);
}

TEST(MakeKParams, PagedWithRaggedQ) {
  const gpu_test::MlaPagedRaggedCall c(2, 16, 2, 1);
  ASSERT_TRUE(c.validated.ok()) << c.validated;
  const MlaDecodeParams& p = c.p;
  const MlaDecodeInputs& in = c.in;
  const MlaSplitPlan plan = PlanMlaSplits(2, 2, 16, p.max_seq, 0, 132);
  const KParams k = MakeKParams(p, in, FakeAddr(0x4000), plan);
  EXPECT_EQ(k.seq_lens, in.seq_lens.data);
  EXPECT_EQ(k.kv_indices, in.kv_indices.data);
  EXPECT_EQ(k.kv_indptr, in.kv_indptr.data);
  EXPECT_EQ(k.q_lens, in.q_lens.data);
  EXPECT_EQ(k.paged, 1);
  EXPECT_EQ(k.page_size, 8);
  EXPECT_EQ(k.kv_seq, 0);
  EXPECT_EQ(k.out_scale, 1.f);
}

// Views the call did not declare are not passed on.
TEST(MakeKParams, UndeclaredIndexViewsAreNull) {
  MlaDecodeParams p;
  const TensorDesc q{DType::kBf16, {1, 1, 1, kMlaLatentDim}}, pe{DType::kBf16, {1, 1, 1, kMlaRopeDim}};
  const TensorDesc kv{DType::kFp8E4M3Fn, {1, 5, kMlaRowDim}};
  ASSERT_TRUE(p.Validate(q, pe, kv, false, 1, nullptr, nullptr, nullptr, nullptr).ok());
  MlaDecodeInputs in;
  in.kv = TensorView{kv, FakeAddr(0x3000)};
  in.seq_lens = TensorView{TensorDesc{DType::kInt32, {1}}, FakeAddr(0x5000)};
  in.q_lens = TensorView{TensorDesc{DType::kInt32, {1}}, FakeAddr(0x8000)};
  const KParams k = MakeKParams(p, in, FakeAddr(0x4000), PlanMlaSplits(1, 1, 1, p.max_seq, 1, 132));
  EXPECT_EQ(k.seq_lens, nullptr);
  EXPECT_EQ(k.q_lens, nullptr);
}

TEST(Workspace, OnlyWithSplits) {
  MlaSplitPlan one{2, 1, 1024};
  EXPECT_EQ(PartialRows(8, one), 0);
  EXPECT_EQ(WorkspaceBytes(8, one), 0u);
  MlaSplitPlan many{2, 16, 4096};
  EXPECT_EQ(PartialRows(8, many), 8 * 2 * 16 * 64);
  EXPECT_EQ(WorkspaceBytes(8, many), static_cast<size_t>(8 * 2 * 16 * 64) * 514 * 4);
}

}  // namespace
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
