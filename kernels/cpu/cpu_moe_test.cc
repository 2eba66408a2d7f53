// The cpu backend's MXFP4 MoE against the fp64 oracle, every stage. The
// weights dequantize exactly; the GEMMs accumulate in fp32 and the result is
// rounded once to bf16, so rel_rms < 1e-2, each element within one bf16 step
// of the rounded oracle (or 2e-3 of the largest output where sums cancel),
// and >= 90% bit-equal. For the layer, the intermediate is stored as bf16
// from fp32 (the oracle rounds its fp64 value), which can move an
// intermediate by one step: the same bounds still hold.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/api/backend.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_test_util.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

using cpu_test::CompareBf16;
using cpu_test::FreshSeed;
using cpu_test::PoisonedBf16;

using Problem = cpu_test::MoeProblem;

void CheckStage(Backend& be, const Problem& pr, MoeStage stage, bool swiglu, bool weighted,
                Rounding rounding) {
  SCOPED_TRACE(absl::StrCat("stage ", static_cast<int>(stage), " swiglu=", swiglu, " weighted=", weighted,
                            " ", RoundingName(rounding)));
  MoeParams p;
  p.stage = stage;
  p.swiglu = swiglu;
  p.weighted_sum = weighted;
  p.rounding = rounding;
  const bool gate_up = stage != MoeStage::kDown;
  const bool down = stage != MoeStage::kGateUp;
  const HostTensor& x = stage == MoeStage::kDown ? pr.x_pairs : pr.x_tokens;
  const TensorDesc wd = pr.weights.desc(), w13 = pr.w.w13.desc(), w13s = pr.w.w13_scales.desc();
  const TensorDesc w2 = pr.w.w2.desc(), w2s = pr.w.w2_scales.desc();
  const absl::Status vst = p.Validate(x.desc(), pr.ids, &wd, gate_up ? &w13 : nullptr,
                                      gate_up ? &w13s : nullptr, down ? &w2 : nullptr, down ? &w2s : nullptr);
  ASSERT_TRUE(vst.ok()) << vst;
  MoeInputs in = cpu_test::MoeProblemInputs(pr, stage);
  HostTensor out = PoisonedBf16(p.OutputDesc().shape);
  TensorView ov = out.view();
  const absl::Status st = be.Moe(0, p, in, ov);
  ASSERT_TRUE(st.ok()) << st;
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    ASSERT_TRUE(std::isfinite(numerics::Bf16ToFloat(out.data<uint16_t>()[i]))) << "element " << i;
  }
  auto ref = oracle::Moe(p, in);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const auto cmp = CompareBf16(out, *ref, rounding);
  EXPECT_EQ(cmp.nonfinite, 0);
  EXPECT_LT(cmp.rel_rms, 1e-2);
  EXPECT_EQ(cmp.far, 0) << cmp.first_far;
  EXPECT_GE(cmp.exact, cmp.n * 9 / 10) << "exact " << cmp.exact << " of " << cmp.n;
}

TEST(CpuMoe, EveryStageMatchesOracle) {
  std::unique_ptr<Backend> be = CreateCpuBackend(0);
  struct Shape5 {
    int64_t tokens, top_k, experts, hidden, inter;
  };
  // The second shape routes ~40 pairs to each expert: more than one block;
  // the last runs in two token chunks.
  for (const Shape5& s : {Shape5{5, 3, 8, 128, 64}, Shape5{40, 4, 4, 96, 160}, Shape5{1, 1, 3, 64, 32},
                          Shape5{1100, 2, 5, 64, 32}}) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(absl::StrCat("T=", s.tokens, " top_k=", s.top_k, " E=", s.experts, " K=", s.hidden,
                              " I=", s.inter, " seed=", seed));
    const Problem pr = cpu_test::MakeMoeProblem(s.tokens, s.top_k, s.experts, s.hidden, s.inter, seed);
    CheckStage(*be, pr, MoeStage::kGateUp, false, false, Rounding::kRtne);
    CheckStage(*be, pr, MoeStage::kGateUp, true, false, Rounding::kRtne);
    CheckStage(*be, pr, MoeStage::kDown, false, false, Rounding::kRtne);
    CheckStage(*be, pr, MoeStage::kDown, false, true, Rounding::kRtne);
    CheckStage(*be, pr, MoeStage::kLayer, true, true, Rounding::kRtne);
    CheckStage(*be, pr, MoeStage::kGateUp, true, false, Rounding::kRtz);
    CheckStage(*be, pr, MoeStage::kLayer, true, true, Rounding::kRtna);
  }
}

TEST(CpuMoe, RejectsAnOutputOfTheWrongSize) {
  std::unique_ptr<Backend> be = CreateCpuBackend(1);
  const Problem pr = cpu_test::MakeMoeProblem(2, 2, 4, 64, 32, 7);
  MoeParams p;
  p.stage = MoeStage::kGateUp;
  const TensorDesc w13 = pr.w.w13.desc(), w13s = pr.w.w13_scales.desc();
  ASSERT_TRUE(p.Validate(pr.x_tokens.desc(), pr.ids, nullptr, &w13, &w13s, nullptr, nullptr).ok());
  MoeInputs in{pr.x_tokens.view(), pr.ids.view(), {}, pr.w.w13.view(), pr.w.w13_scales.view(), {}, {}};
  HostTensor out = PoisonedBf16({3, 3});
  TensorView ov = out.view();
  EXPECT_EQ(be->Moe(0, p, in, ov).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve
