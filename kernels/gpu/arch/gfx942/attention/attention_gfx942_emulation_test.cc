// The gfx942 forward's algorithm emulated on the CPU and held to the fp64
// oracle: the launch's device parameters and work split (PlanAttention, or a
// split forced onto it), V^T laid out as the transpose kernel writes it, each
// CTA's rows walked over its chunk's K tiles in 16-key online-softmax steps
// with P rounded to bf16 (RTNE) and the rounded row sum, the partials of a
// tail chunk merged by the kernel's own MergeChunks, the output rounded once.
// It checks the plan, the work order, the chunking and the merge together on
// fresh random inputs (causal and not, GQA, BSHD and BHSD, Sq != Skv, every
// rounding) at head dims 64, 128 and 256 (each with its own rows per CTA and
// CTAs per CU, attention_gfx942_launch.h's FwdShape). It does not run the device code (no AMD GPU exists here): the
// MFMA's summation order and v_exp_f32's last bits are not emulated.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/cpu/oracle.h"
#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"
#include "kernels/gpu/attention/attention_params.h"
#include "kernels/gpu/attention/dense_tail.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {
namespace {

float Bf(uint16_t b) { return numerics::Bf16ToFloat(b); }

// The V transpose: vt[((b * heads_kv + hk) * head_dim + d) * vt_len + j].
std::vector<uint16_t> Transpose(const Gfx942AttnParams& ap) {
  const FlashFwdParams& f = ap.f;
  const int kHeadDim = ap.head_dim;
  std::vector<uint16_t> vt(static_cast<size_t>(f.batch) * f.heads_kv * ap.vt_head_stride, 0);
  const uint16_t* v = static_cast<const uint16_t*>(f.v);
  for (int b = 0; b < f.batch; ++b) {
    for (int hk = 0; hk < f.heads_kv; ++hk) {
      for (int j = 0; j < f.seq_kv; ++j) {
        for (int d = 0; d < kHeadDim; ++d) {
          vt[(static_cast<size_t>(b) * f.heads_kv + hk) * ap.vt_head_stride + static_cast<size_t>(d) * ap.vt_len + j] =
              v[b * f.v_batch_stride + hk * f.v_head_stride + static_cast<int64_t>(j) * f.v_row_stride + d];
        }
      }
    }
  }
  return vt;
}

// One CTA (block id `bid`) of the forward, row by row.
void RunCta(const Gfx942AttnParams& ap, bool causal, int bid, const std::vector<uint16_t>& vt,
            std::vector<float>& part_o, std::vector<float>& part_ml) {
  const FlashFwdParams& p = ap.f;
  const int kHeadDim = ap.head_dim, kRows = ShapeOf(ap.head_dim).rows();
  const bool tail = bid >= ap.full_items;
  const int tail_idx = tail ? (bid - ap.full_items) / ap.splits : 0;
  const int split = tail ? (bid - ap.full_items) % ap.splits : 0;
  const WorkItem w = WorkItemAt(tail ? ap.full_items + tail_idx : bid, ap.q_blocks, p.heads_q, p.batch);
  const int n_tiles = ItemKvTiles(p, kRows, w.qb, causal);
  const int t_begin = tail ? ChunkBegin(n_tiles, split, ap.splits) : 0;
  const int t_end = tail ? ChunkBegin(n_tiles, split + 1, ap.splits) : n_tiles;
  const int hk = w.head / p.group;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + w.batch * p.q_batch_stride + w.head * p.q_head_stride;
  const uint16_t* k = static_cast<const uint16_t*>(p.k) + w.batch * p.k_batch_stride + hk * p.k_head_stride;
  const uint16_t* vth = vt.data() + (static_cast<int64_t>(w.batch) * p.heads_kv + hk) * ap.vt_head_stride;
  uint16_t* o = static_cast<uint16_t*>(p.o) + w.batch * p.o_batch_stride + w.head * p.o_head_stride;
  for (int cta_row = 0; cta_row < kRows; ++cta_row) {
    const int row = w.qb * kRows + cta_row;
    if (row >= p.seq_q) continue;
    const int last = causal ? row + p.causal_offset : p.seq_kv - 1;
    float m = -INFINITY, l = 0.f;
    std::vector<float> acc(kHeadDim, 0.f);
    for (int jb = t_begin * kTileTok; jb < t_end * kTileTok; jb += 16) {
      float t[16], tmax = -INFINITY;
      for (int i = 0; i < 16; ++i) {
        const int j = jb + i;
        float s = 0.f;  // K past seq_kv reads as zeros (the buffer's bound)
        if (j < p.seq_kv) {
          for (int d = 0; d < kHeadDim; ++d) {
            s += Bf(q[static_cast<int64_t>(row) * p.q_row_stride + d]) * Bf(k[static_cast<int64_t>(j) * p.k_row_stride + d]);
          }
        }
        t[i] = j <= last ? s * p.scale_log2 : -INFINITY;
        tmax = std::fmax(tmax, t[i]);
      }
      const float mn = std::fmax(m, tmax);
      const float m_use = mn == -INFINITY ? 0.f : mn;
      const float alpha = std::exp2(m - m_use);
      m = mn;
      float psum = 0.f;
      for (float& a : acc) a *= alpha;
      for (int i = 0; i < 16; ++i) {
        const float pr = Bf(numerics::FloatToBf16(std::exp2(t[i] - m_use), Rounding::kRtne));
        psum += pr;
        for (int d = 0; d < kHeadDim; ++d) acc[d] += pr * Bf(vth[static_cast<int64_t>(d) * ap.vt_len + jb + i]);
      }
      l = l * alpha + psum;
    }
    if (!tail) {
      const float inv = l > 0.f ? 1.f / l : 0.f;
      for (int d = 0; d < kHeadDim; ++d) {
        o[static_cast<int64_t>(row) * p.o_row_stride + d] =
            numerics::FloatToBf16(acc[d] * inv, static_cast<Rounding>(p.rounding));
      }
    } else {
      const int64_t pi = (static_cast<int64_t>(tail_idx) * ap.splits + split) * kRows + cta_row;
      for (int d = 0; d < kHeadDim; ++d) part_o[pi * kHeadDim + d] = acc[d];
      part_ml[pi * 2] = m;
      part_ml[pi * 2 + 1] = l;
    }
  }
}

// The merge kernel.
void Merge(const Gfx942AttnParams& ap, const std::vector<float>& part_o, const std::vector<float>& part_ml) {
  const FlashFwdParams& p = ap.f;
  const int kHeadDim = ap.head_dim, kRows = ShapeOf(ap.head_dim).rows();
  for (int t = 0; t < ap.tail_items; ++t) {
    const WorkItem w = WorkItemAt(ap.full_items + t, ap.q_blocks, p.heads_q, p.batch);
    uint16_t* o = static_cast<uint16_t*>(p.o) + w.batch * p.o_batch_stride + w.head * p.o_head_stride;
    for (int r = 0; r < kRows; ++r) {
      const int row = w.qb * kRows + r;
      if (row >= p.seq_q) continue;
      const int64_t base = static_cast<int64_t>(t) * ap.splits * kRows + r;
      for (int d = 0; d < kHeadDim; ++d) {
        const float v = MergeChunks(ap.splits, part_ml.data() + base * 2, int64_t{kRows} * 2,
                                    part_o.data() + base * kHeadDim + d, int64_t{kRows} * kHeadDim);
        o[static_cast<int64_t>(row) * p.o_row_stride + d] = numerics::FloatToBf16(v, static_cast<Rounding>(p.rounding));
      }
    }
  }
}

// The whole call: transpose, every CTA of the forward grid, merge.
void Emulate(const Gfx942AttnParams& ap, bool causal, int ctas) {
  const std::vector<uint16_t> vt = Transpose(ap);
  const size_t rows = static_cast<size_t>(ap.tail_items) * ap.splits * ShapeOf(ap.head_dim).rows();
  std::vector<float> part_o(rows * ap.head_dim, std::nanf("")), part_ml(rows * 2, std::nanf(""));
  for (int bid = 0; bid < ctas; ++bid) RunCta(ap, causal, bid, vt, part_o, part_ml);
  Merge(ap, part_o, part_ml);
}

struct Case {
  Layout layout;
  bool causal;
  int64_t b, hq, hkv, sq, skv;
  Rounding rounding;
  int64_t d = 128;
};

class Gfx942AttentionEmulation : public ::testing::TestWithParam<Case> {};

// Relative RMS error of bf16 `out` against the oracle; NaN counts as failure.
double RelRms(const std::vector<uint16_t>& out, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = Bf(out[i]);
    if (std::isnan(got)) return INFINITY;
    err += (got - want[i]) * (got - want[i]);
    norm += want[i] * want[i];
  }
  return norm == 0 ? std::sqrt(err) : std::sqrt(err / norm);
}

TEST_P(Gfx942AttentionEmulation, PlannedAndForcedSplitsMatchTheOracle) {
  const Case& c = GetParam();
  AttentionParams p;
  p.layout = c.layout;
  p.causal = c.causal;
  p.rounding = c.rounding;
  const bool bshd = c.layout == Layout::kBshd;
  const Shape qs = bshd ? Shape{c.b, c.sq, c.hq, c.d} : Shape{c.b, c.hq, c.sq, c.d};
  const Shape kvs = bshd ? Shape{c.b, c.skv, c.hkv, c.d} : Shape{c.b, c.hkv, c.skv, c.d};
  std::random_device rd;
  const uint64_t seed = (static_cast<uint64_t>(rd()) << 32) | rd();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  // Scores spread enough that the softmax is far from uniform; V off zero.
  const HostTensor q = numerics::GaussianBf16(qs, seed, 0.0, 2.0);
  const HostTensor k = numerics::GaussianBf16(kvs, seed + 1, 0.0, 1.0);
  const HostTensor v = numerics::GaussianBf16(kvs, seed + 2, 0.5, 1.0);
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
  ASSERT_EQ(Unsupported(p), "");
  auto want = oracle::Attention(p, q, k, v);
  ASSERT_TRUE(want.ok()) << want.status();

  const int rows = ShapeOf(static_cast<int>(c.d)).rows();
  const int items = static_cast<int>((c.sq + rows - 1) / rows * c.hq * c.b);
  // The plan on a small device (so the grid has a partial round), then every
  // item split 2 or 5 ways whatever the cost model says (5: more chunks than
  // some items have tiles, so some chunks are empty).
  for (int forced : {0, 2, 5}) {
    SCOPED_TRACE(testing::Message() << "forced splits " << forced);
    std::vector<uint16_t> out(static_cast<size_t>(p.OutputDesc().num_elements()), 0xFFFF);  // poisoned: NaN
    TensorView ov{p.OutputDesc(), out.data()};
    auto f = MakeFlashFwdParams(p, q.view(), k.view(), v.view(), ov);
    ASSERT_TRUE(f.ok()) << f.status();
    AttentionLaunch l = PlanAttention(*f, static_cast<int>(c.d), c.causal, 5);
    ASSERT_EQ(l.params.head_dim, c.d);
    Gfx942AttnParams ap = l.params;
    int ctas = l.tail.ctas;
    if (forced > 0) {
      ap.full_items = 0;
      ap.tail_items = items;
      ap.splits = forced;
      ctas = items * forced;
    }
    Emulate(ap, c.causal, ctas);
    const double e = RelRms(out, *want);
    // bf16 P and the bf16 output put this near 2e-3 (RTNE, RTNA) and 3.5e-3
    // (RTZ) on these inputs.
    EXPECT_LT(e, 6e-3) << "relative RMS error against fp64";
    RecordProperty("rel_rms_splits_" + std::to_string(forced), std::to_string(e));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Gfx942AttentionEmulation,
    ::testing::Values(Case{Layout::kBhsd, false, 1, 2, 2, 400, 333, Rounding::kRtne},
                      Case{Layout::kBshd, true, 1, 4, 2, 400, 450, Rounding::kRtna},  // GQA, bottom-right
                      Case{Layout::kBshd, true, 2, 2, 1, 300, 100, Rounding::kRtz},   // seq_q > seq_kv: rows with no key
                      Case{Layout::kBhsd, false, 1, 1, 1, 1, 1, Rounding::kRtne},
                      Case{Layout::kBhsd, true, 1, 1, 1, 500, 500, Rounding::kRtz},
                      // d64: 384-row blocks at two CTAs per CU.
                      Case{Layout::kBshd, false, 1, 3, 3, 450, 300, Rounding::kRtne, 64},
                      Case{Layout::kBhsd, true, 2, 4, 2, 400, 420, Rounding::kRtna, 64},   // GQA, bottom-right
                      Case{Layout::kBshd, true, 1, 2, 1, 300, 90, Rounding::kRtz, 64},     // rows with no key
                      // d256: 256-row blocks (two Q tiles per wave).
                      Case{Layout::kBhsd, false, 1, 2, 2, 300, 333, Rounding::kRtne, 256},
                      Case{Layout::kBshd, true, 1, 4, 2, 520, 600, Rounding::kRtna, 256},  // GQA, three blocks
                      Case{Layout::kBshd, true, 2, 2, 1, 280, 100, Rounding::kRtz, 256},   // rows with no key
                      Case{Layout::kBhsd, false, 1, 1, 1, 1, 1, Rounding::kRtz, 256}));

}  // namespace
}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
