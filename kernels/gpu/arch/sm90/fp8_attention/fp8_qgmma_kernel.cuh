// FP8 (e4m3fn) attention forward on sm_90a wgmma (QGMMA), (d_qk, d_v) =
// (128, 128). Numerics are the mma.sync kernel's (fp8_mma_sync_kernel.cuh,
// DESIGN §4) step for step:
// the same t, the same per-64-key-block R, the same exact / lean / naive P
// codes, the same frame changes by exact powers of two, the same dropped
// blocks, and the row sum of the rounded P accumulated by the tensor cores.
//
// One CTA = 128 query rows of one (batch, head) = 2 warpgroups of 64 rows;
// keys in tiles of 128 = two 64-key P blocks. Q and the K tiles sit in shared
// memory 128-byte swizzled (a row of 128 e4m3 is one 128-byte swizzle row),
// K and V stream in by cp.async (two stages). S = Q K^T is 4 wgmma
// m64n128k32 per warpgroup (both operands from shared memory). fp8 wgmma
// wants B K-major, so V is transposed once per tile into V^T[d_v][key],
// swizzled, its keys permuted within each 32 so that the S accumulator
// layout is directly the register A operand of P V (as the mma.sync kernel
// does it). V^T has
// 8 more rows of ones (1.0 = code 0x38): P V^T over 136 columns puts the sum
// of the rounded P of each row into columns 128..135, with the same rescales
// as O.
//
// Per tile: barrier (K, V landed) -> issue S -> transpose V under it ->
// barrier (V^T ready) -> per 64-key block: R, codes, B = P V^T into a fresh
// accumulator (2 wgmma m64n136k32 from registers), then O = O 2^(R_prev - R)
// + B in fp32 on the CUDA cores (fp8 wgmma accumulation truncates: see the
// comment at the fold). Block 1's codes are computed under block 0's P V. No
// warp specialization: the two warpgroups overlap each other only through the
// warp schedulers.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_QGMMA_KERNEL_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_QGMMA_KERNEL_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/fp8_attention/p_block.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace qgmma {

using namespace ::kernelserve::gpu::sm80;  // NOLINT: the instruction wrappers

constexpr int kRows = 128;  // query rows per CTA: 2 warpgroups x 64
constexpr int kTile = 128;  // keys per tile: two 64-key P blocks
constexpr int kThreads = 256;
constexpr int kD = 128;           // d_qk = d_v
constexpr int kVtRows = kD + 8;   // V^T rows; 128..135 are ones (row sums)
constexpr int kVStr = kD + 16;    // raw V rows (bytes), padded for the transpose
constexpr int kNt = kVtRows / 8;  // accumulator column tiles of O (+ L)

// Shared memory from a 1024-byte-aligned base (the swizzle atom is 8 rows of
// 128 bytes): Q, 2 K stages (swizzled), 2 raw V stages, V^T (swizzled).
constexpr int kQBytes = kRows * kD;
constexpr int kKBytes = kTile * kD;
constexpr int kVBytes = kTile * kVStr;
constexpr int kOffK = kQBytes;
constexpr int kOffV = kOffK + 2 * kKBytes;
constexpr int kOffVt = kOffV + 2 * kVBytes;
constexpr int kVtBytes = kVtRows * kTile;
constexpr int kSmemBytes = 1024 + kOffVt + kVtBytes;
static_assert(kOffVt % 1024 == 0 && kOffK % 1024 == 0, "swizzled tiles must be 1024-byte aligned");

// Byte offset of byte `col` of row `row` in a 128-byte-swizzled tile:
// 16-byte chunk c of row r is stored at chunk c ^ (r & 7).
__device__ __forceinline__ uint32_t Swz(int row, int col) {
  return static_cast<uint32_t>(row * 128 + ((((col >> 4) ^ (row & 7)) << 4) | (col & 15)));
}

// O = O * factor + B per row (fp32 on the CUDA cores): one 64-key block's
// P V (and P 1) joins O in the block's frame.
__device__ __forceinline__ void FoldBlock(float (&o)[kNt][4], const float (&ob)[kNt][4], const float (&factor)[2]) {
#pragma unroll
  for (int n = 0; n < kNt; ++n) {
    o[n][0] = fmaf(o[n][0], factor[0], ob[n][0]);
    o[n][1] = fmaf(o[n][1], factor[0], ob[n][1]);
    o[n][2] = fmaf(o[n][2], factor[1], ob[n][2]);
    o[n][3] = fmaf(o[n][3], factor[1], ob[n][3]);
  }
}

template <bool kCausal, int kMode>
__global__ void __launch_bounds__(kThreads, 1) Fp8AttnQgmmaKernel(const Fp8KernelParams p) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* sQ = smem;
  uint8_t* sVt = smem + kOffVt;

  const int qb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2;
  const int g = lane >> 2, c = lane & 3;
  const int q0 = qb * kRows;
  const int64_t diag = static_cast<int64_t>(p.seq_kv) - p.seq_q;  // causal: row i sees keys <= i + diag
  int64_t kv_end = p.seq_kv;
  if (kCausal) kv_end = min(kv_end, static_cast<int64_t>(q0) + kRows - 1 + diag + 1);
  const int n_tiles = kv_end > 0 ? static_cast<int>((kv_end + kTile - 1) / kTile) : 0;

  const float q_ds = p.q_ds[p.q_ds_per_head ? b * p.heads_q + h : 0];
  const float k_ds = p.k_ds[p.k_ds_per_head ? b * p.heads_kv + hk : 0];
  const float v_ds = p.v_ds[p.v_ds_per_head ? b * p.heads_kv + hk : 0];
  const float sc = q_ds * k_ds * p.scale_log2;

  const uint8_t* q_head = p.q + RowOff(p.bshd, b, h, 0, p.heads_q, p.seq_q, kD);
  const uint8_t* k_head = p.k + RowOff(p.bshd, b, hk, 0, p.heads_kv, p.seq_kv, kD);
  const uint8_t* v_head = p.v + RowOff(p.bshd, b, hk, 0, p.heads_kv, p.seq_kv, kD);
  const int64_t q_row_str = p.bshd ? static_cast<int64_t>(p.heads_q) * kD : kD;
  const int64_t kv_row_str = p.bshd ? static_cast<int64_t>(p.heads_kv) * kD : kD;

  // Q once (rows past seq_q zero-filled), joined to tile 0's copy group;
  // not at all when no tile is visited (no copy may outlive the CTA).
  for (int ch = tid; n_tiles > 0 && ch < kRows * (kD / 16); ch += kThreads) {
    const int r = ch / (kD / 16), col = ch % (kD / 16);
    const bool ok = q0 + r < p.seq_q;
    CpAsync16(SmemAddr(sQ + Swz(r, col * 16)), ok ? q_head + (q0 + r) * q_row_str + col * 16 : q_head, ok ? 16 : 0);
  }
  auto issue = [&](int it) {
    uint8_t* sk = smem + kOffK + (it & 1) * kKBytes;
    uint8_t* sv = smem + kOffV + (it & 1) * kVBytes;
    const int64_t j0 = static_cast<int64_t>(it) * kTile;
    for (int ch = tid; ch < kTile * (kD / 16); ch += kThreads) {
      const int r = ch / (kD / 16), col = ch % (kD / 16);
      const bool ok = j0 + r < p.seq_kv;
      const int64_t off = (j0 + r) * kv_row_str + col * 16;
      CpAsync16(SmemAddr(sk + Swz(r, col * 16)), ok ? k_head + off : k_head, ok ? 16 : 0);
      CpAsync16(SmemAddr(sv + r * kVStr + col * 16), ok ? v_head + off : v_head, ok ? 16 : 0);
    }
    CpAsyncCommit();
  };
  if (n_tiles > 0) issue(0);
  // The ones rows of V^T: constant, written once (the swizzle permutes equal bytes).
  reinterpret_cast<uint32_t*>(sVt + kD * kTile)[tid] = 0x38383838u;
  static_assert(kThreads * 4 == 8 * kTile, "one word of the ones rows per thread");

  int64_t lim[2];  // last visible key of this thread's two rows
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int64_t i = q0 + warp * 16 + g + hf * 8;
    lim[hf] = kCausal ? min(static_cast<int64_t>(p.seq_kv) - 1, i + diag) : static_cast<int64_t>(p.seq_kv) - 1;
  }

  // o[0..15]: O; o[16]: the rounded-P row sum (columns 128..135 all equal).
  float o[kNt][4];
#pragma unroll
  for (int n = 0; n < kNt; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
  }
  float ob[kNt][4];  // one 64-key block's P V (and P 1), added to O in fp32
#pragma unroll
  for (int n = 0; n < kNt; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) ob[n][e] = 0.f;
  }
  float factor_prev[2] = {1.f, 1.f};  // the frame change of the block whose P V is in ob
  float s[kTile / 8][4];
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
  }
  uint32_t pa[kTile / 32][4];  // P codes, one A fragment per 32 keys
#pragma unroll
  for (int k = 0; k < kTile / 32; ++k) {
#pragma unroll
    for (int e = 0; e < 4; ++e) pa[k][e] = 0u;
  }
  float lsum[2] = {0.f, 0.f};  // naive: sum of unrounded p
  int r_last[2] = {-(1 << 30), -(1 << 30)}, r_max[2] = {-(1 << 30), -(1 << 30)};
  float m_run[2] = {-INFINITY, -INFINITY};

  const uint32_t q_addr = SmemAddr(sQ) + wg * 64 * 128;  // this warpgroup's 64 rows
  const uint32_t vt_addr = SmemAddr(sVt);

  for (int it = 0; it < n_tiles; ++it) {
    CpAsyncWait<0>();
    sm90::FenceProxyAsync();  // cp.async wrote Q / K; wgmma reads them through the async proxy
    __syncthreads();          // tile `it` landed; the previous tile is done with V^T and its stage
    if (it + 1 < n_tiles) issue(it + 1);
    const uint8_t* sV = smem + kOffV + (it & 1) * kVBytes;
    const uint32_t k_addr = SmemAddr(smem + kOffK + (it & 1) * kKBytes);

    // S = Q K^T first, so that the V transpose runs under it.
    sm90::FenceOperand(s);
    sm90::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kD / 32; ++kk) {
      const uint64_t da = sm90::MakeSmemDesc(q_addr + 32u * kk, 16, 1024);
      const uint64_t db = sm90::MakeSmemDesc(k_addr + 32u * kk, 16, 1024);
      sm90::WgmmaSS<128, sm90::E4m3>(s, da, db, kk > 0 ? 1 : 0);
    }
    sm90::WgmmaCommit();

    // V^T[dv][position], positions permuted within each 32 keys as in the
    // mma.sync kernel: position 4c+i (and 16+4c+i) holds key 2c + (i&1) +
    // 8(i>>1) (+16). A task moves 4 keys x 4 dv. A warp takes 4 position
    // words x 8 dv words (the mma.sync kernel: 32 x 1): its raw-V reads then
    // fall in 32 distinct banks (32 x 1, with the 144-byte rows, hits 4
    // banks: 8-way conflicts), at the price of 4-way conflicts on the
    // swizzled stores.
    for (int task = tid; task < (kD / 4) * (kTile / 4); task += kThreads) {
      const int pw = ((task >> 5) & 7) * 4 + (task & 3), dq = (task >> 8) * 8 + ((task >> 2) & 7);
      const int kc = pw / 8, p0 = (pw % 8) * 4;
      const int key0 = kc * 32 + (p0 / 16) * 16 + 2 * ((p0 % 16) / 4);
      const uint32_t r0 = *reinterpret_cast<const uint32_t*>(sV + (key0 + 0) * kVStr + dq * 4);
      const uint32_t r1 = *reinterpret_cast<const uint32_t*>(sV + (key0 + 1) * kVStr + dq * 4);
      const uint32_t r2 = *reinterpret_cast<const uint32_t*>(sV + (key0 + 8) * kVStr + dq * 4);
      const uint32_t r3 = *reinterpret_cast<const uint32_t*>(sV + (key0 + 9) * kVStr + dq * 4);
      const uint32_t t0 = __byte_perm(r0, r1, 0x5140), t1 = __byte_perm(r2, r3, 0x5140);
      const uint32_t t2 = __byte_perm(r0, r1, 0x7362), t3 = __byte_perm(r2, r3, 0x7362);
      const int n0 = dq * 4, pos = pw * 4;
      *reinterpret_cast<uint32_t*>(sVt + Swz(n0 + 0, pos)) = __byte_perm(t0, t1, 0x5410);
      *reinterpret_cast<uint32_t*>(sVt + Swz(n0 + 1, pos)) = __byte_perm(t0, t1, 0x7632);
      *reinterpret_cast<uint32_t*>(sVt + Swz(n0 + 2, pos)) = __byte_perm(t2, t3, 0x5410);
      *reinterpret_cast<uint32_t*>(sVt + Swz(n0 + 3, pos)) = __byte_perm(t2, t3, 0x7632);
    }
    sm90::FenceProxyAsync();  // V^T (st.shared) is read by wgmma next
    sm90::WgmmaWait<0>();
    sm90::FenceOperand(s);
    __syncthreads();  // V^T ready

    // Scores in base 2, masked. The mask test runs only on tiles that reach
    // past seq_kv or (causal) past the first row's last key: every row's
    // limit is at least that (CTA-uniform, and no wgmma is in flight here).
    const int64_t j0 = static_cast<int64_t>(it) * kTile;
    const int64_t j_last = j0 + kTile - 1;
    if (j_last >= p.seq_kv || (kCausal && j_last > q0 + diag)) {
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = j0 + n * 8 + 2 * c + (e & 1);
          const float t = s[n][e] * sc;
          s[n][e] = j > lim[e >> 1] ? -INFINITY : t;
        }
      }
    } else {
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] *= sc;
      }
    }

#pragma unroll
    for (int hb = 0; hb < 2; ++hb) {  // the tile's two 64-key P blocks
      float bmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 8 * hb; n < 8 * hb + 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) bmax[e >> 1] = fmaxf(bmax[e >> 1], s[n][e]);
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        bmax[hf] = fmaxf(bmax[hf], __shfl_xor_sync(0xffffffffu, bmax[hf], 1));
        bmax[hf] = fmaxf(bmax[hf], __shfl_xor_sync(0xffffffffu, bmax[hf], 2));
      }
      float factor[2], ref[2];
      UpdateBlockFrame<kMode>(bmax, m_run, r_last, r_max, factor, ref);
      // P codes of this block as two A fragments: for keys [32 kc, 32 kc + 32)
      // of the tile, a0/a1 rows g/g+8 from n-tiles 4kc, 4kc+1; a2/a3 from
      // 4kc+2, 4kc+3 (V^T's positions are permuted to match).
      float psum[2] = {0.f, 0.f};
#pragma unroll
      for (int kc = 2 * hb; kc < 2 * hb + 2; ++kc) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            uint32_t word = 0;  // row hf's 4 keys: bytes (q, e) = (0, 0), (0, 1), (1, 0), (1, 1)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              const int n = 4 * kc + 2 * half + q;
              const float y0 = s[n][2 * hf] - ref[hf], y1 = s[n][2 * hf + 1] - ref[hf];
              uint32_t pair;
              if (kMode == kLean) {
                const int l0 = __float2int_rn(fmaf(y0, 8.f, 56.f)), l1 = __float2int_rn(fmaf(y1, 8.f, 56.f));
                pair = static_cast<uint32_t>(min(max(l0, 0), 120)) | (static_cast<uint32_t>(min(max(l1, 0), 120)) << 8);
              } else {
                const float p0 = exp2f(y0), p1 = exp2f(y1);
                if (kMode == kNaive) {  // the mma.sync kernel's order of the fp32 sum
                  psum[hf] += p0;
                  psum[hf] += p1;
                }
                pair = F32x2ToE4m3fnX2(p0, p1);
              }
              word |= pair << (16 * q);
            }
            pa[kc][half * 2 + hf] = word;
          }
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
      // Each block's P V goes into a fresh accumulator and is added to O on
      // the CUDA cores (O = O * factor + P V in fp32). Accumulating every
      // block in the wgmma accumulator loses the small blocks: fp8 wgmma adds
      // with a truncated ~14-bit alignment, and after a frame change to a
      // lower block O is large in that block's units (the long-tail test
      // measured 2x the oracle's error that way).
      if (hb == 1) {
        sm90::WgmmaWait<0>();  // block 0's P V retired: ob is free
        sm90::FenceOperand(ob);
        FoldBlock(o, ob, factor_prev);
      }
      factor_prev[0] = factor[0];
      factor_prev[1] = factor[1];
      sm90::FenceOperand(ob);
      sm90::FenceOperand(pa);
      sm90::WgmmaFence();
#pragma unroll
      for (int kc = 2 * hb; kc < 2 * hb + 2; ++kc) {
        const uint64_t db = sm90::MakeSmemDesc(vt_addr + 32u * kc, 16, 1024);
        sm90::WgmmaRS<136, sm90::E4m3>(ob, pa[kc], db, kc == 2 * hb ? 0 : 1);
      }
      sm90::WgmmaCommit();
    }
    sm90::WgmmaWait<0>();  // before the next tile overwrites V^T
    sm90::FenceOperand(ob);
    sm90::FenceOperand(pa);
    FoldBlock(o, ob, factor_prev);
  }

  // Epilogue: O / L * v_descale, rows that see no key are 0.
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = q0 + warp * 16 + g + hf * 8;
    if (r >= p.seq_q) continue;
    const float l = kMode == kNaive ? lsum[hf] : o[kNt - 1][hf * 2];
    const float inv = l > 0.f ? v_ds / l : 0.f;
    uint16_t* orow = p.out + RowOff(p.bshd, b, h, r, p.heads_q, p.seq_q, kD);
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(orow + n * 8 + 2 * c) =
          PackBf16x2(o[n][hf * 2] * inv, o[n][hf * 2 + 1] * inv, p.rounding);
    }
  }
}

}  // namespace qgmma
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_QGMMA_KERNEL_CUH_
