// FP8 attention forward for gfx942 (MI300X) on e4m3fnuz operands, with
// ZYFA's numerics (DESIGN §4): per-64-key power-of-two block frames with
// headroom h = 7, exact P (2^y rounded once to e4m3fnuz), lean P (the code
// by one multiply-add on the float pipe, common/fp8_lean_code.h) or naive P,
// normalization by the sum of the rounded probabilities; descales per tensor
// or per head. (d_qk, d_v) = (128 | 192, 128); causal (bottom-right aligned)
// or not; GQA; BHSD or BSHD (strides); the output rounded once to bf16 in
// RTNE, RTNA or RTZ.
//
// Both products are v_mfma_f32_16x16x32_fp8_fp8 (16 x 16 x 32, fp32
// accumulation). One CTA = 64 query rows of one head, four wave64s of 16
// rows; the keys go through LDS 64 at a time, one P block per tile, loaded
// into registers a tile ahead, two barriers per tile.
//
// Layout. The scores are computed transposed, S^T = K Q^T, so that the MFMA's
// result is already P's A-operand layout for P V: the probabilities never
// pass through LDS. The 32-wide A operand holds 8 keys per lane (keys
// 8 (l / 16) + e of a 32-key chunk, e = 0..7) while a 16 x 16 result holds 4,
// so each chunk's two S^T tiles read their K rows permuted (tile sub, row m:
// key 8 (m / 4) + 4 sub + m % 4) and lane l's 8 scores of a chunk are
// exactly its 8 A-operand keys. V is stored transposed in LDS (V^T[d][key]),
// so P V's B operand is one 8-byte read. The rounded-P row sum is one more
// MFMA per chunk against a B operand of e4m3fnuz ones (code 0x40): it lands
// in O's layout and is exactly the fp32 sum of the decoded codes.
//
// Frames. For exact and lean P, O and L stay in the frame of the last
// block's R and are multiplied by the exact power of two 2^(R_prev - R)
// before the block is added; a block more than 60 binades under the row's
// largest R is dropped (below fp32 precision), as the CUDA kernels do.
// Naive P keeps a running maximum and the sum of the unrounded p.
//
// Occupancy (checked on the code object by fp8_attention_gfx942_hip_test):
// LDS is 17920 bytes per CTA at d_qk = 128 (three CTAs in a CU's 64 KiB:
// three waves per SIMD) and 22016 at d_qk = 192 (two CTAs). Registers are
// held to three waves per SIMD in both: VGPR + AGPR <= 168 per lane (a third
// of the 512-entry unified file, in 8-register granules). No scratch.
#include <cstdint>

#include "kernels/gpu/arch/gfx942/fp8_attention/fp8_attention_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/mfma.h"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/fp8_lean_code.h"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace gfx942 {

using gpu::gfx942::F32x4;
using gpu::gfx942::LaneValue;
using gpu::gfx942::RowMax;
using gpu::gfx942::RowSum;

// e4m3fnuz: headroom 7 (2^7 has code 120); 1.0 is code 0x40.
constexpr int kHeadroom = 7;
constexpr long kOnes = 0x4040404040404040L;
// A block this many binades under the row's largest reference is dropped.
constexpr int kDropBinades = 60;

// D = A B + C on one 16 x 16 x 32 tile of e4m3fnuz codes (8 per lane).
__device__ __forceinline__ F32x4 MfmaFp8(long a, long b, F32x4 c) {
  return __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a, b, c, 0, 0, 0);
}

// Element offset of row s of head h of batch b in a [B,H,S,D] (or, bshd,
// [B,S,H,D]) tensor of head dim d.
__device__ __forceinline__ int64_t RowOffset(int bshd, int64_t b, int64_t h, int64_t s, int64_t heads, int64_t seq,
                                             int64_t d) {
  return bshd ? ((b * seq + s) * heads + h) * d : ((b * heads + h) * seq + s) * d;
}

// Four codes of 2^y (RNE, on the conversion instruction), byte e from y[e].
__device__ __forceinline__ uint32_t Pow2Codes(const float (&p)[4]) {
  const int lo = __builtin_amdgcn_cvt_pk_fp8_f32(p[0], p[1], 0, false);
  return static_cast<uint32_t>(__builtin_amdgcn_cvt_pk_fp8_f32(p[2], p[3], lo, true));
}

template <int kDqk>
struct Tile {
  static constexpr int kKRow = KRowBytes(kDqk);
  static constexpr int kKBytes = kTile * kKRow;
  static constexpr int kKPer = kTile * kDqk / 16 / kThreads;  // 16-byte pieces of K per thread: 2 or 3
  static constexpr int kVPer = kTile * kDv / 16 / kThreads;   // of V: 2
  static_assert(kKPer * kThreads * 16 == kTile * kDqk && kVPer * kThreads * 16 == kTile * kDv, "whole pieces");
  uint4 k[kKPer], v[kVPer];

  // Keys [j0, j0 + 64) of K and V (zeros past seq_kv).
  __device__ __forceinline__ void Load(const uint8_t* kb, const uint8_t* vb, int64_t k_stride, int64_t v_stride,
                                       int j0, int seq_kv) {
#pragma unroll
    for (int i = 0; i < kKPer; ++i) {
      const int pc = threadIdx.x + i * kThreads, tok = pc / (kDqk / 16), c = pc % (kDqk / 16);
      k[i] = make_uint4(0u, 0u, 0u, 0u);
      if (j0 + tok < seq_kv) k[i] = *reinterpret_cast<const uint4*>(kb + (j0 + tok) * k_stride + c * 16);
    }
#pragma unroll
    for (int i = 0; i < kVPer; ++i) {
      const int pc = threadIdx.x + i * kThreads, tok = pc / (kDv / 16), c = pc % (kDv / 16);
      v[i] = make_uint4(0u, 0u, 0u, 0u);
      if (j0 + tok < seq_kv) v[i] = *reinterpret_cast<const uint4*>(vb + (j0 + tok) * v_stride + c * 16);
    }
  }

  // K rows as they are (8-byte stores: a padded row is 8-byte aligned), V
  // transposed byte by byte.
  __device__ __forceinline__ void Store(uint8_t* lds) const {
#pragma unroll
    for (int i = 0; i < kKPer; ++i) {
      const int pc = threadIdx.x + i * kThreads, tok = pc / (kDqk / 16), c = pc % (kDqk / 16);
      uint2* dst = reinterpret_cast<uint2*>(lds + tok * kKRow + c * 16);
      dst[0] = make_uint2(k[i].x, k[i].y);
      dst[1] = make_uint2(k[i].z, k[i].w);
    }
    uint8_t* vt = lds + kKBytes;
#pragma unroll
    for (int i = 0; i < kVPer; ++i) {
      const int pc = threadIdx.x + i * kThreads, tok = pc / (kDv / 16), c = pc % (kDv / 16);
      const uint32_t w[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
      for (int e = 0; e < 16; ++e) vt[(c * 16 + e) * kVtRowBytes + tok] = static_cast<uint8_t>(w[e / 4] >> (8 * (e % 4)));
    }
  }
};

template <int kDqk, bool kCausal, int kMode>
__device__ __forceinline__ void Fp8Cta(const Fp8KernelParams& p) {
  using T = Tile<kDqk>;
  constexpr int kKSteps = kDqk / 32;  // 4 or 6
  constexpr int kNTiles = kDv / 16;   // 8
  __shared__ __attribute__((aligned(16))) uint8_t lds[LdsBytes(kDqk)];
  const uint8_t* kt = lds;
  const uint8_t* vt = lds + T::kKBytes;

  // Causal: CTA 0 takes the last query block (the most keys), so the long
  // CTAs start first and the short ones fill the tail.
  const int n_qb = (p.seq_q + kRows - 1) / kRows;
  const int qb = kCausal ? n_qb - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.heads_q / p.heads_kv);
  const int lane = threadIdx.x & 63, wave = threadIdx.x >> 6;
  const int lr = lane & 15, lq = lane >> 4;
  const int diag = p.seq_kv - p.seq_q;  // causal: row i sees keys j <= i + diag

  const float q_ds = p.q_ds[p.q_ds_per_head ? b * p.heads_q + h : 0];
  const float k_ds = p.k_ds[p.k_ds_per_head ? b * p.heads_kv + hk : 0];
  const float v_ds = p.v_ds[p.v_ds_per_head ? b * p.heads_kv + hk : 0];
  const float sc = q_ds * k_ds * p.scale_log2;

  // This lane's query row in S^T (the B operand's column): Q[row][8 lq + e] per 32-wide step.
  const int q0 = qb * kRows;
  const int row = q0 + wave * 16 + lr;
  const bool live = row < p.seq_q;
  const int last = !live ? -1 : (kCausal && row + diag < p.seq_kv - 1) ? row + diag : p.seq_kv - 1;
  long q[kKSteps];
  {
    const uint8_t* qrow = p.q + RowOffset(p.bshd, b, h, live ? row : 0, p.heads_q, p.seq_q, kDqk);
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) q[ks] = live ? *reinterpret_cast<const long*>(qrow + ks * 32 + lq * 8) : 0L;
  }
  // The BSHD/BHSD row stride of K and V and their head's first row.
  const int64_t k_stride = p.bshd ? static_cast<int64_t>(p.heads_kv) * kDqk : kDqk;
  const int64_t v_stride = p.bshd ? static_cast<int64_t>(p.heads_kv) * kDv : kDv;
  const uint8_t* kb = p.k + RowOffset(p.bshd, b, hk, 0, p.heads_kv, p.seq_kv, kDqk);
  const uint8_t* vb = p.v + RowOffset(p.bshd, b, hk, 0, p.heads_kv, p.seq_kv, kDv);

  int kv_end = p.seq_kv;
  if (kCausal && q0 + kRows + diag < kv_end) kv_end = q0 + kRows + diag;
  const int n_tiles = kv_end > 0 ? (kv_end + kTile - 1) / kTile : 0;

  F32x4 acc[kNTiles];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) acc[n] = F32x4{0.f, 0.f, 0.f, 0.f};
  F32x4 lacc = F32x4{0.f, 0.f, 0.f, 0.f};  // exact, lean: the rounded-P row sums, in O's layout
  float l_naive = 0.f;                     // naive: the unrounded sum of this lane's row
  float m_run = -INFINITY;
  int r_last = -(1 << 30), r_max = -(1 << 30);

  // K row of S^T tile t's row lr (A operand): chunk t / 2, sub t % 2.
  int key_of[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) key_of[t] = 32 * (t / 2) + 8 * (lr / 4) + 4 * (t % 2) + (lr % 4);

  T regs;
  if (n_tiles > 0) regs.Load(kb, vb, k_stride, v_stride, 0, p.seq_kv);
  for (int it = 0; it < n_tiles; ++it) {
    const int j0 = it * kTile;
    __syncthreads();  // the previous tile's reads are done
    regs.Store(lds);
    __syncthreads();
    if (it + 1 < n_tiles) regs.Load(kb, vb, k_stride, v_stride, j0 + kTile, p.seq_kv);

    // s[t][i]: key j0 + 32 (t / 2) + 8 lq + 4 (t % 2) + i of this lane's row.
    F32x4 s[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      s[t] = F32x4{0.f, 0.f, 0.f, 0.f};
      const uint8_t* krow = kt + key_of[t] * T::kKRow + lq * 8;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) s[t] = MfmaFp8(*reinterpret_cast<const long*>(krow + ks * 32), q[ks], s[t]);
    }
    float bmax = -INFINITY;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = j0 + 32 * (t / 2) + 8 * lq + 4 * (t % 2) + i;
        s[t][i] = j <= last ? s[t][i] * sc : -INFINITY;
        bmax = fmaxf(bmax, s[t][i]);
      }
    }
    bmax = RowMax(bmax);

    // The block's frame: `factor` moves O and L into it, `ref` is
    // subtracted from the scores before encoding (+inf: every code is 0).
    float factor, ref;
    if (kMode == kNaive) {
      const float mn = fmaxf(m_run, bmax);
      const float mu = mn == -INFINITY ? 0.f : mn;
      factor = Exp2Approx(m_run - mu);
      m_run = mn;
      ref = mu;
    } else if (bmax == -INFINITY) {
      factor = 1.f;  // no key of this row in the block
      ref = INFINITY;
    } else {
      const int rb = static_cast<int>(__builtin_ceilf(bmax)) - kHeadroom;
      if (rb < r_max - kDropBinades) {
        factor = 1.f;
        ref = INFINITY;
      } else {
        factor = __builtin_ldexpf(1.f, r_last - rb);  // exact power of two (0 at the start)
        r_last = rb;
        r_max = rb > r_max ? rb : r_max;
        ref = static_cast<float>(rb);
      }
    }

    // P's A operands: chunk c's byte e is key 32 c + 8 lq + e of this lane's row.
    long pa[2];
    float psum = 0.f;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      uint32_t w[2];
#pragma unroll
      for (int sub = 0; sub < 2; ++sub) {
        const F32x4& st = s[2 * c + sub];
        if (kMode == kLean) {
          uint32_t word = 0;
#pragma unroll
          for (int i = 0; i < 4; ++i) word |= LeanCode<64, kHeadroom>(st[i] - ref) << (8 * i);
          w[sub] = word;
        } else {
          float pw[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            pw[i] = Exp2Approx(st[i] - ref);
            if (kMode == kNaive) psum += pw[i];
          }
          w[sub] = Pow2Codes(pw);
        }
      }
      pa[c] = static_cast<long>(static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32));
    }
    if (kMode == kNaive) l_naive = l_naive * factor + RowSum(psum);

    // O (and L) into the block's frame, then the block's P V (and P 1).
    float f_row[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) f_row[i] = LaneValue(factor, lq * 4 + i);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) acc[n][i] *= f_row[i];
      if (kMode != kNaive) lacc[i] *= f_row[i];
    }
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
        const long vv = *reinterpret_cast<const long*>(vt + (16 * n + lr) * kVtRowBytes + 32 * c + 8 * lq);
        acc[n] = MfmaFp8(pa[c], vv, acc[n]);
      }
      if (kMode != kNaive) lacc = MfmaFp8(pa[c], kOnes, lacc);
    }
  }

  // This lane holds O[row 4 lq + i of the wave][d 16 n + lr]; a row that
  // sees no key (causal, seq_q > seq_kv) is 0, as the oracle's.
  float l_row[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) l_row[i] = kMode == kNaive ? LaneValue(l_naive, lq * 4 + i) : lacc[i];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int orow = q0 + wave * 16 + lq * 4 + i;
    if (orow >= p.seq_q) continue;
    const float inv = l_row[i] > 0.f ? v_ds / l_row[i] : 0.f;
    uint16_t* o = p.out + RowOffset(p.bshd, b, h, orow, p.heads_q, p.seq_q, kDv) + lr;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) o[n * 16] = static_cast<uint16_t>(FloatToBf16Bits(acc[n][i] * inv, p.rounding));
  }
}

}  // namespace gfx942
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

// C names for hipModuleGetFunction (fp8_attention_gfx942_launch.h's
// kKernels). The occupancy target is what the LDS allows (three CTAs per CU
// at d_qk = 128, two at 192); the code object test holds the registers of
// both to three waves per SIMD.
#define KS_FP8_ATTN_GFX942(NAME, DQK, CAUSAL, MODE)                                                   \
  extern "C" __global__ void __attribute__((amdgpu_flat_work_group_size(256, 256),                    \
                                            amdgpu_waves_per_eu(DQK == 128 ? 3 : 2)))                 \
  NAME(const kernelserve::gpu::fp8_attention::Fp8KernelParams p) {                                        \
    kernelserve::gpu::fp8_attention::gfx942::Fp8Cta<DQK, CAUSAL, kernelserve::gpu::fp8_attention::gfx942::MODE>(p); \
  }
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D128FullExact, 128, false, kExact)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D128FullLean, 128, false, kLean)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D128FullNaive, 128, false, kNaive)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D128CausalExact, 128, true, kExact)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D128CausalLean, 128, true, kLean)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D128CausalNaive, 128, true, kNaive)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D192FullExact, 192, false, kExact)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D192FullLean, 192, false, kLean)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D192FullNaive, 192, false, kNaive)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D192CausalExact, 192, true, kExact)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D192CausalLean, 192, true, kLean)
KS_FP8_ATTN_GFX942(KsFp8AttnGfx942D192CausalNaive, 192, true, kNaive)
#undef KS_FP8_ATTN_GFX942
