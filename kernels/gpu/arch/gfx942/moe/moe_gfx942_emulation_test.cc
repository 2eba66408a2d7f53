// The gfx942 slab-walking MoE GEMM (moe_gemm_mxfp4_cta.h) emulated on the
// CPU and held to the fp64 oracle, at both routing tiles (16-pair decode,
// 64-pair prefill): the host's own launch arguments (MakeRoutingParams,
// GateUpGemm, DownGemm over a workspace laid out by MoeWorkspaceLayout), the
// routing's padded tiles, and per CTA of the grid the kernel's index math as
// moe_gfx942_launch.h states it: every thread's slab pieces (SlabPieceAt,
// ExpertWeightRow) and scale bytes moved into an LDS image poisoned with NaN
// patterns, each wave's MFMA tiles fed from it at WaveRow / WaveCol in the
// MFMA's lane layout (A[l % 16][4 (l / 16) + i], B[4 (l / 16) + i][l % 16],
// D[4 (l / 16) + i][l % 16]), the E2M1 x E8M0 decode, the half slab past K,
// columns past out_cols, and the epilogue's pair rows. Fresh random inputs:
// gate/up plain and SwiGLU, down, and the layer (SwiGLU into bf16, down into
// fp32, the weighted sum), with K, I and N that leave part slabs and part
// column blocks. It does not run the device code (no AMD GPU exists here):
// the MFMA's summation order and v_exp_f32's last bits are not emulated.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/cpu/cpu_test_util.h"
#include "kernels/cpu/moe_routing.h"
#include "kernels/cpu/oracle.h"
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"
#include "kernels/gpu/moe/moe_gemm_args.h"
#include "kernels/gpu/moe/moe_params.h"
#include "kernels/gpu/moe/moe_plan.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {
namespace {

using cpu_test::ExpectDecodeMatchesOracle;
using cpu_test::FreshSeed;
using cpu_test::PoisonedBf16;

// What the routing kernels leave in the workspace for `rows`-row tiles.
struct Routed {
  MoePlan plan;
  MoeWorkspace layout;
  std::vector<uint8_t> ws;
  RoutingParams rp;
};

void Route(const MoeParams& p, const MoeInputs& in, int rows, Routed& r) {
  r.plan.mma_rows = rows;
  r.layout = MoeWorkspaceLayout(p, r.plan);
  r.ws.assign(r.layout.bytes, 0xFF);  // -1 everywhere: the padding the kernels' memset leaves
  r.rp = MakeRoutingParams(p, in, r.plan, r.layout, r.ws.data());
  auto routing = BuildMoeRouting(in.topk_ids.as<const int32_t>(), p.tokens, p.top_k, p.experts, rows);
  ASSERT_TRUE(routing.ok()) << routing.status();
  ASSERT_LE(routing->num_blocks(), r.layout.max_tiles);
  std::copy(routing->sorted_pairs.begin(), routing->sorted_pairs.end(), r.rp.sorted);
  std::copy(routing->block_expert.begin(), routing->block_expert.end(), r.rp.tile_expert);
  *r.rp.num_tiles = static_cast<int>(routing->num_blocks());
}

uint16_t Bf16At(const uint8_t* b) {
  uint16_t v;
  std::memcpy(&v, b, 2);
  return v;
}

// One CTA (column block bx, routing tile `tile`) of the kernel of `rows` and `epi`.
void RunCta(const GemmParams& p, int rows, int epi, int64_t bx, int tile) {
  const CtaShape s = CtaOf(rows, epi == kEpiSwiglu);
  if (tile >= *p.num_tiles) return;
  const int64_t e = p.tile_expert[tile];
  const int w_rows = WeightRows(s), mt = WaveRowTiles(s), nt = WaveColTiles(s);
  const int loads = (rows * kKSlab / 8 + 2 * w_rows + kThreads - 1) / kThreads;
  const int waves = kThreads / 64;
  // acc[((wave * mt + m) * nt + n) * 256 + r * 16 + c]: D of the wave's tile (m, n); up likewise.
  std::vector<float> acc(waves * mt * nt * 256, 0.f), up(acc.size(), 0.f);
  std::vector<uint8_t> lds(SlabBytes(s));
  const int64_t slabs = (p.k + kKSlab - 1) / kKSlab;
  for (int64_t sl = 0; sl < slabs; ++sl) {
    const int64_t k0 = sl * kKSlab;
    std::fill(lds.begin(), lds.end(), 0xFF);  // bf16 NaN, E8M0 NaN: a byte nobody stored poisons the sum
    for (int t = 0; t < kThreads; ++t) {
      for (int i = 0; i < loads; ++i) {
        const SlabPiece sp = SlabPieceAt(s, t + kThreads * i);
        if (sp.kind == kNone) continue;
        const int64_t k = k0 + sp.k;
        uint8_t piece[16] = {};
        if (sp.kind == kActivation) {
          const int pair = p.sorted[tile * rows + sp.row];
          if (pair >= 0 && k < p.k) std::memcpy(piece, p.a + static_cast<int64_t>(pair / p.a_row_div) * p.k + k, 16);
        } else {
          const int64_t row = ExpertWeightRow(s, bx, sp.row, e, p.nw, p.inter, p.out_cols);
          if (row >= 0 && k < p.k) std::memcpy(piece, p.w + row * (p.k / 2) + k / 2, 16);
        }
        std::memcpy(lds.data() + sp.lds, piece, 16);
      }
      if (t < w_rows * 2) {
        const int64_t row = ExpertWeightRow(s, bx, t / 2, e, p.nw, p.inter, p.out_cols);
        const int64_t k = k0 + (t % 2) * 32;
        lds[SlabScaleLds(s, t)] = row >= 0 && k < p.k ? p.ws[row * (p.k / 32) + k / 32] : 0;
      }
    }
    const int steps = p.k - k0 >= kKSlab ? kKSlab / 16 : kKMultiple / 16;
    for (int wave = 0; wave < waves; ++wave) {
      for (int ks = 0; ks < steps; ++ks) {
        // The operands as the lanes hold them: a[lane][i], b[n][lane][i] (bu: the up rows).
        float a[2][64][4], b[4][64][4], bu[4][64][4];
        for (int lane = 0; lane < 64; ++lane) {
          const int lr = lane % 16, lq = lane / 16, kk = ks * 16 + lq * 4;
          for (int m = 0; m < mt; ++m) {
            const uint8_t* src = lds.data() + WaveRow(s, wave, m, lr) * kARowBytes + kk * 2;
            for (int i = 0; i < 4; ++i) a[m][lane][i] = numerics::Bf16ToFloat(Bf16At(src + 2 * i));
          }
          for (int n = 0; n < nt; ++n) {
            for (int half = 0; half < (epi == kEpiSwiglu ? 2 : 1); ++half) {
              const int r = WaveCol(s, wave, n, lr) + half * s.out_cols;
              const uint8_t* nib = lds.data() + AStageBytes(s) + r * kWRowBytes + kk / 2;
              const float scale = numerics::E8M0ToFloat(lds[SlabScaleLds(s, r * 2 + kk / 32)]);
              for (int i = 0; i < 4; ++i) {
                (half ? bu : b)[n][lane][i] = numerics::E2M1ToFloat(numerics::Fp4Nibble(nib, i)) * scale;
              }
            }
          }
        }
        for (int m = 0; m < mt; ++m) {
          for (int n = 0; n < nt; ++n) {
            float* d = acc.data() + ((wave * mt + m) * nt + n) * 256;
            float* du = up.data() + ((wave * mt + m) * nt + n) * 256;
            for (int r = 0; r < 16; ++r) {
              for (int c = 0; c < 16; ++c) {
                float sum = 0.f, sum_up = 0.f;
                for (int kq = 0; kq < 16; ++kq) {
                  // k = 4 lq + i: A from lane (row r, quarter lq), B from lane (column c, quarter lq).
                  const int la = kq / 4 * 16 + r, lb = kq / 4 * 16 + c;
                  sum += a[m][la][kq % 4] * b[n][lb][kq % 4];
                  if (epi == kEpiSwiglu) sum_up += a[m][la][kq % 4] * bu[n][lb][kq % 4];
                }
                d[r * 16 + c] += sum;
                du[r * 16 + c] += sum_up;
              }
            }
          }
        }
      }
    }
  }
  // The epilogue: lane (lr, lq) holds D[4 lq + i][lr] of each tile.
  for (int wave = 0; wave < waves; ++wave) {
    for (int lane = 0; lane < 64; ++lane) {
      const int lr = lane % 16, lq = lane / 16;
      for (int n = 0; n < nt; ++n) {
        const int64_t col = bx * s.out_cols + WaveCol(s, wave, n, lr);
        if (col >= p.out_cols) continue;
        for (int m = 0; m < mt; ++m) {
          const int first = tile * rows + WaveRow(s, wave, m, 0) + 4 * lq;
          for (int i = 0; i < 4; ++i) {
            const int pair = p.sorted[first + i];
            if (pair < 0) continue;
            const size_t at = ((wave * mt + m) * nt + n) * 256 + (4 * lq + i) * 16 + lr;
            const int64_t o = static_cast<int64_t>(pair) * p.out_cols + col;
            if (epi == kEpiF32) {
              static_cast<float*>(p.out)[o] = acc[at];
              continue;
            }
            float v = acc[at];
            if (epi == kEpiSwiglu) v = v / (1.f + std::exp(-v)) * up[at];
            static_cast<uint16_t*>(p.out)[o] = numerics::FloatToBf16(v, static_cast<Rounding>(p.rounding));
          }
        }
      }
    }
  }
}

// The GEMM's whole grid, as Grid launches it.
void RunGemm(const GemmParams& p, int rows, int epi, int64_t max_tiles) {
  const GemmGrid g = Grid(CtaOf(rows, epi == kEpiSwiglu), p.out_cols, max_tiles);
  for (unsigned y = 0; y < g.y; ++y) {
    for (unsigned x = 0; x < g.x; ++x) RunCta(p, rows, epi, x, static_cast<int>(y));
  }
}

// One stage through the emulated kernels on `rows`-row tiles, against the oracle.
void CheckStage(const cpu_test::MoeProblem& pr, MoeStage stage, bool swiglu, Rounding rounding, int rows) {
  SCOPED_TRACE(testing::Message() << "tile " << rows << " stage " << static_cast<int>(stage)
                                  << (swiglu ? " swiglu " : " ") << RoundingName(rounding));
  MoeParams p;
  p.stage = stage;
  p.swiglu = swiglu;
  p.weighted_sum = stage == MoeStage::kLayer;
  p.rounding = rounding;
  const bool gate_up = stage != MoeStage::kDown, down = stage != MoeStage::kGateUp;
  const HostTensor& x = stage == MoeStage::kDown ? pr.x_pairs : pr.x_tokens;
  const TensorDesc wd = pr.weights.desc(), w13 = pr.w.w13.desc(), w13s = pr.w.w13_scales.desc(),
                   w2 = pr.w.w2.desc(), w2s = pr.w.w2_scales.desc();
  ASSERT_TRUE(p.Validate(x.desc(), pr.ids, &wd, gate_up ? &w13 : nullptr, gate_up ? &w13s : nullptr,
                         down ? &w2 : nullptr, down ? &w2s : nullptr)
                  .ok());
  ASSERT_EQ(Unsupported(p), "");
  const MoeInputs in = cpu_test::MoeProblemInputs(pr, stage);
  Routed r;
  Route(p, in, rows, r);
  HostTensor out = PoisonedBf16(p.OutputDesc().shape);
  const int64_t pairs = p.tokens * p.top_k;
  switch (stage) {
    case MoeStage::kGateUp:
      RunGemm(GateUpGemm(p, in, r.rp, swiglu, static_cast<int>(rounding), out.bytes()), rows,
              swiglu ? kEpiSwiglu : kEpiBf16, r.rp.max_tiles);
      break;
    case MoeStage::kDown:
      RunGemm(DownGemm(p, in, r.rp, x.data<uint16_t>(), out.bytes()), rows, kEpiBf16, r.rp.max_tiles);
      break;
    case MoeStage::kLayer: {
      // h and y poisoned: a pair row the GEMMs skip shows in the sum.
      std::vector<uint16_t> h(pairs * p.inter, 0xFFFF);
      std::vector<float> y(pairs * p.out_dim, std::nanf(""));
      RunGemm(GateUpGemm(p, in, r.rp, true, static_cast<int>(Rounding::kRtne), h.data()), rows, kEpiSwiglu,
              r.rp.max_tiles);
      RunGemm(DownGemm(p, in, r.rp, h.data(), y.data()), rows, kEpiF32, r.rp.max_tiles);
      const WeightedSumParams sp = MakeWeightedSum(p, in, y.data(), out.bytes());
      for (int64_t t = 0; t < sp.tokens; ++t) {
        for (int64_t n = 0; n < sp.n; ++n) {
          float acc = 0.f;
          for (int k = 0; k < sp.top_k; ++k) acc += sp.weights[t * sp.top_k + k] * sp.y[(t * sp.top_k + k) * sp.n + n];
          sp.out[t * sp.n + n] = numerics::FloatToBf16(acc, rounding);
        }
      }
      break;
    }
  }
  auto ref = oracle::Moe(p, in);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ExpectDecodeMatchesOracle(out, *ref, rounding);
}

TEST(Gfx942MoeEmulation, BothTilesMatchTheOracleOnEveryStage) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "KERNELSERVE_TEST_SEED=" << seed);
  // 80 pairs per expert on average: two 64-row tiles each (the second part
  // padding), five or six 16-row ones. K = 160 and I = 96: a half slab past
  // the last whole one; 2 I = 192, I = 96 and N = 160 columns: part column
  // blocks of every CTA width.
  const cpu_test::MoeProblem pr = cpu_test::MakeMoeProblem(120, 2, 3, 160, 96, seed);
  for (int rows : {kTileRows, kPrefillTileRows}) {
    CheckStage(pr, MoeStage::kGateUp, false, Rounding::kRtne, rows);
    CheckStage(pr, MoeStage::kGateUp, true, Rounding::kRtz, rows);
    CheckStage(pr, MoeStage::kDown, false, Rounding::kRtna, rows);
    CheckStage(pr, MoeStage::kLayer, true, Rounding::kRtne, rows);
  }
}

}  // namespace
}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
