// FP8 (e4m3fn) attention forward with ZYFA numerics (DESIGN §4) on
// mma.sync e4m3 (sm_89+), instantiated for (d_qk, d_v) = (192, 128).
//
// One CTA = 128 query rows of one (batch, head), 8 warps of 16 rows; keys in
// tiles of 64, which are exactly the P blocks. Q fragments stay in registers;
// K and V stream in by cp.async (two stages); V is transposed once per tile
// into shared memory with its keys permuted so that the accumulator layout of
// S = Q K^T is directly the A operand of P V (no shuffles). Both products run
// on mma.sync m16n8k32 e4m3 with fp32 accumulation.
//
// P per row and block: t = s * descales * scale * log2 e; R = ceil(max t) - 8;
// exact: code = e4m3(2^(t-R)) (RNE, exp2 in fp32); lean: code =
// clamp(rint(8 (t-R) + 56), 0, 120). The row sum counts the rounded P through
// one more mma against a ones vector. O and L live in the frame of the last
// block's R and are multiplied by the exact power of two 2^(R_prev - R) before
// each block is added; blocks more than 60 binades below the row's largest R
// are dropped (they contribute below fp32 precision). naive: p = 2^(t - running
// max) rounded to e4m3 without block scaling, divided by the sum of the
// unrounded p.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_MMA_SYNC_KERNEL_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_MMA_SYNC_KERNEL_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/fp8_attention/p_block.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace mma_sync {

using namespace ::kernelserve::gpu::sm80;  // NOLINT: the instruction wrappers

constexpr int kRows = 128;
constexpr int kTok = 64;
constexpr int kThreads = 256;
constexpr int kDV = 128;
constexpr int kVStr = kDV + 16;   // raw V rows (bytes)
constexpr int kVtStr = kTok + 16; // transposed V rows (bytes)

using KParams = Fp8KernelParams;

template <int DQK>
struct Smem {
  static constexpr int kKStr = DQK + 16;
  static constexpr int kK = kTok * kKStr;
  static constexpr int kV = kTok * kVStr;
  static constexpr int kStage = kK + kV;
  static constexpr int kVt = kDV * kVtStr;
  static constexpr int kBytes = 2 * kStage + kVt;
};

__device__ __forceinline__ uint32_t PackCodes(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
  return c0 | (c1 << 8) | (c2 << 16) | (c3 << 24);
}

// e4m3 code of one fp32 (RNE, saturating).
__device__ __forceinline__ uint32_t E4m3(float x) { return F32x2ToE4m3fnX2(x, 0.f) & 0xFFu; }

template <int DQK, bool kCausal, int kMode>
__global__ void __launch_bounds__(kThreads, 1) Fp8AttnKernel(const KParams p) {
  using S = Smem<DQK>;
  constexpr int kKs = DQK / 32;  // k32 steps of QK
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* sVt = smem + 2 * S::kStage;

  const int qb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, c = lane & 3;
  const int q0 = qb * kRows;
  const int64_t diag = static_cast<int64_t>(p.seq_kv) - p.seq_q;  // causal: row i sees keys <= i + diag
  int64_t kv_end = p.seq_kv;
  if (kCausal) kv_end = min(kv_end, static_cast<int64_t>(q0) + kRows - 1 + diag + 1);
  const int n_tiles = kv_end > 0 ? static_cast<int>((kv_end + kTok - 1) / kTok) : 0;

  const float q_ds = p.q_ds[p.q_ds_per_head ? b * p.heads_q + h : 0];
  const float k_ds = p.k_ds[p.k_ds_per_head ? b * p.heads_kv + hk : 0];
  const float v_ds = p.v_ds[p.v_ds_per_head ? b * p.heads_kv + hk : 0];
  const float sc = q_ds * k_ds * p.scale_log2;

  const uint8_t* k_head = p.k + RowOff(p.bshd, b, hk, 0, p.heads_kv, p.seq_kv, DQK);
  const uint8_t* v_head = p.v + RowOff(p.bshd, b, hk, 0, p.heads_kv, p.seq_kv, kDV);
  const int64_t k_row_str = p.bshd ? static_cast<int64_t>(p.heads_kv) * DQK : DQK;
  const int64_t v_row_str = p.bshd ? static_cast<int64_t>(p.heads_kv) * kDV : kDV;

  auto issue = [&](int it) {
    uint8_t* st = smem + (it & 1) * S::kStage;
    const int64_t j0 = static_cast<int64_t>(it) * kTok;
    for (int ch = tid; ch < kTok * (DQK / 16); ch += kThreads) {
      const int r = ch / (DQK / 16), col = ch % (DQK / 16);
      const bool ok = j0 + r < p.seq_kv;
      CpAsync16(SmemAddr(st + r * S::kKStr + col * 16), ok ? k_head + (j0 + r) * k_row_str + col * 16 : k_head,
                ok ? 16 : 0);
    }
    uint8_t* sv = st + S::kK;
    for (int ch = tid; ch < kTok * (kDV / 16); ch += kThreads) {
      const int r = ch / (kDV / 16), col = ch % (kDV / 16);
      const bool ok = j0 + r < p.seq_kv;
      CpAsync16(SmemAddr(sv + r * kVStr + col * 16), ok ? v_head + (j0 + r) * v_row_str + col * 16 : v_head,
                ok ? 16 : 0);
    }
    CpAsyncCommit();
  };
  if (n_tiles > 0) issue(0);

  // Q fragments (A of m16n8k32): rows warp*16 + g (+8), bytes 4c.. and 16+4c.. of each k32 step.
  uint32_t qf[kKs][4];
  {
    const int r0 = q0 + warp * 16 + g;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = r0 + hf * 8;
      const uint8_t* qr = p.q + RowOff(p.bshd, b, h, r, p.heads_q, p.seq_q, DQK);
#pragma unroll
      for (int ks = 0; ks < kKs; ++ks) {
        const bool ok = r < p.seq_q;
        qf[ks][hf] = ok ? *reinterpret_cast<const uint32_t*>(qr + ks * 32 + 4 * c) : 0u;
        qf[ks][2 + hf] = ok ? *reinterpret_cast<const uint32_t*>(qr + ks * 32 + 16 + 4 * c) : 0u;
      }
    }
  }
  int64_t lim[2];  // last visible key of this thread's two rows
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int64_t i = q0 + warp * 16 + g + hf * 8;
    lim[hf] = kCausal ? min(static_cast<int64_t>(p.seq_kv) - 1, i + diag) : static_cast<int64_t>(p.seq_kv) - 1;
  }

  float o[kDV / 8][4];
#pragma unroll
  for (int n = 0; n < kDV / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
  }
  float lacc[4] = {0.f, 0.f, 0.f, 0.f};  // exact/lean: sum of rounded P (mma against ones)
  float lsum[2] = {0.f, 0.f};            // naive: sum of unrounded p
  int r_last[2] = {-(1 << 30), -(1 << 30)}, r_max[2] = {-(1 << 30), -(1 << 30)};
  float m_run[2] = {-INFINITY, -INFINITY};

  // ldmatrix lane addresses (bytes within a stage / sVt).
  const int ld_row = (lane & 7) + ((lane >> 4) & 1) * 8;
  const int ld_col = ((lane >> 3) & 1) * 16;

  for (int it = 0; it < n_tiles; ++it) {
    CpAsyncWait<0>();
    __syncthreads();  // tile `it` landed; the previous tile's PV is done with sVt and its stage
    if (it + 1 < n_tiles) issue(it + 1);
    const uint8_t* sK = smem + (it & 1) * S::kStage;
    const uint8_t* sV = sK + S::kK;
    // Transpose V into sVt[dv][position], positions permuted within each 32
    // keys: position 4c+i (and 16+4c+i) holds key 2c + (i&1) + 8(i>>1) (+16).
    for (int task = tid; task < (kDV / 4) * (kTok / 4); task += kThreads) {
      const int pw = task % (kTok / 4), dq = task / (kTok / 4);
      const int kc = pw / 8, p0 = (pw % 8) * 4;
      const int key0 = kc * 32 + (p0 / 16) * 16 + 2 * ((p0 % 16) / 4);
      const uint32_t r0 = *reinterpret_cast<const uint32_t*>(sV + (key0 + 0) * kVStr + dq * 4);
      const uint32_t r1 = *reinterpret_cast<const uint32_t*>(sV + (key0 + 1) * kVStr + dq * 4);
      const uint32_t r2 = *reinterpret_cast<const uint32_t*>(sV + (key0 + 8) * kVStr + dq * 4);
      const uint32_t r3 = *reinterpret_cast<const uint32_t*>(sV + (key0 + 9) * kVStr + dq * 4);
      const uint32_t t0 = __byte_perm(r0, r1, 0x5140), t1 = __byte_perm(r2, r3, 0x5140);
      const uint32_t t2 = __byte_perm(r0, r1, 0x7362), t3 = __byte_perm(r2, r3, 0x7362);
      uint8_t* dst = sVt + (dq * 4) * kVtStr + pw * 4;
      *reinterpret_cast<uint32_t*>(dst) = __byte_perm(t0, t1, 0x5410);
      *reinterpret_cast<uint32_t*>(dst + kVtStr) = __byte_perm(t0, t1, 0x7632);
      *reinterpret_cast<uint32_t*>(dst + 2 * kVtStr) = __byte_perm(t2, t3, 0x5410);
      *reinterpret_cast<uint32_t*>(dst + 3 * kVtStr) = __byte_perm(t2, t3, 0x7632);
    }

    // S = Q K^T for 16 rows x 64 keys.
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
    }
    const uint32_t k_base = SmemAddr(sK + ld_row * S::kKStr + ld_col);
#pragma unroll
    for (int ks = 0; ks < kKs; ++ks) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b0, b1, b2, b3;
        LdMatrixX4(k_base + np * 16 * S::kKStr + ks * 32, b0, b1, b2, b3);
        // ldmatrix: b0/b1 = keys 16np..+7, bytes 0-15 / 16-31; b2/b3 = keys +8..+15.
        MmaE4m3(s[2 * np], qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], b0, b1);
        MmaE4m3(s[2 * np + 1], qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], b2, b3);
      }
    }

    // Scores in base 2, masked.
    const int64_t j0 = static_cast<int64_t>(it) * kTok;
    float bmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + n * 8 + 2 * c + (e & 1);
        float t = s[n][e] * sc;
        if (j > lim[e >> 1]) t = -INFINITY;
        s[n][e] = t;
        bmax[e >> 1] = fmaxf(bmax[e >> 1], t);
      }
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      bmax[hf] = fmaxf(bmax[hf], __shfl_xor_sync(0xffffffffu, bmax[hf], 1));
      bmax[hf] = fmaxf(bmax[hf], __shfl_xor_sync(0xffffffffu, bmax[hf], 2));
    }

    float factor[2], ref[2];
    UpdateBlockFrame<kMode>(bmax, m_run, r_last, r_max, factor, ref);
    // Rescale into this block's frame.
#pragma unroll
    for (int n = 0; n < kDV / 8; ++n) {
      o[n][0] *= factor[0];
      o[n][1] *= factor[0];
      o[n][2] *= factor[1];
      o[n][3] *= factor[1];
    }
    if (kMode != kNaive) {
      lacc[0] *= factor[0];
      lacc[1] *= factor[0];
      lacc[2] *= factor[1];
      lacc[3] *= factor[1];
    }
    __syncthreads();  // sVt ready

    // O += P V; L += P 1.
    const uint32_t vt_base = SmemAddr(sVt + ld_row * kVtStr + ld_col);
    float psum[2] = {0.f, 0.f};
#pragma unroll
    for (int kc = 0; kc < 2; ++kc) {
      // P codes of keys [32 kc, 32 kc + 32) as the A operand (m16n8k32): a0/a1
      // rows g/g+8 from n-tiles 4kc, 4kc+1; a2/a3 from 4kc+2, 4kc+3.
      uint32_t pa[4];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t code[2][4];  // [row hf][4 keys]
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int n = 4 * kc + 2 * half + q;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int hf = e >> 1;
            const float y = s[n][e] - ref[hf];
            uint32_t cd;
            if (kMode == kLean) {
              cd = LeanCode(y);
            } else {
              const float pv = exp2f(y);
              if (kMode == kNaive) psum[hf] += pv;
              cd = E4m3(pv);
            }
            code[hf][q * 2 + (e & 1)] = cd;
          }
        }
        pa[half * 2 + 0] = PackCodes(code[0][0], code[0][1], code[0][2], code[0][3]);
        pa[half * 2 + 1] = PackCodes(code[1][0], code[1][1], code[1][2], code[1][3]);
      }
      if (kMode != kNaive) {
        MmaE4m3(lacc, pa[0], pa[1], pa[2], pa[3], 0x38383838u, 0x38383838u);
      }
#pragma unroll
      for (int nd = 0; nd < kDV / 16; ++nd) {
        uint32_t b0, b1, b2, b3;
        LdMatrixX4(vt_base + nd * 16 * kVtStr + kc * 32, b0, b1, b2, b3);
        MmaE4m3(o[2 * nd], pa[0], pa[1], pa[2], pa[3], b0, b1);
        MmaE4m3(o[2 * nd + 1], pa[0], pa[1], pa[2], pa[3], b2, b3);
      }
    }
    if (kMode == kNaive) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        psum[hf] += __shfl_xor_sync(0xffffffffu, psum[hf], 1);
        psum[hf] += __shfl_xor_sync(0xffffffffu, psum[hf], 2);
        lsum[hf] = lsum[hf] * factor[hf] + psum[hf];
      }
    }
  }

  // Epilogue: O / L * v_descale, rows that see no key are 0.
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = q0 + warp * 16 + g + hf * 8;
    if (r >= p.seq_q) continue;
    const float l = kMode == kNaive ? lsum[hf] : lacc[hf * 2];
    const float inv = l > 0.f ? v_ds / l : 0.f;
    uint16_t* orow = p.out + RowOff(p.bshd, b, h, r, p.heads_q, p.seq_q, kDV);
#pragma unroll
    for (int n = 0; n < kDV / 8; ++n) {
      *reinterpret_cast<uint32_t*>(orow + n * 8 + 2 * c) =
          PackBf16x2(o[n][hf * 2] * inv, o[n][hf * 2 + 1] * inv, p.rounding);
    }
  }
}

}  // namespace mma_sync
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_MMA_SYNC_KERNEL_CUH_
