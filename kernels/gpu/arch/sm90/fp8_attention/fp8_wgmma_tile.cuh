// The tile pieces of the wgmma e4m3 kernel, (d_qk, d_v) = (128 | 192, 128)
// (fp8_ws_kernel.cuh):
// the 128-byte swizzle, the V transpose with its key permutation, the
// scores' scale and mask, a 64-key block's frame and P codes (DESIGN §4,
// p_block.cuh), its P V into a fresh accumulator and the fp32 fold into O,
// the epilogue.
// A thread holds rows g and g + 8 of its warp's 16 (the m64nN accumulator
// layout, wgmma.cuh); c = lane & 3 indexes its column pairs.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_WGMMA_TILE_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_WGMMA_TILE_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/fp8_attention/p_block.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace wgmma_tile {

using sm80::F32x2ToE4m3fnX2;

constexpr int kRows = 128;         // query rows per CTA: 2 (consumer) warpgroups x 64
constexpr int kTile = 128;         // keys per tile: two 64-key P blocks
constexpr int kD = 128;            // d_v, and the 128-byte part of a Q or K row
constexpr int kVtRows = kD + 8;    // V^T rows; 128..135 are ones (row sums)
constexpr int kNt = kVtRows / 8;   // accumulator column tiles of O (+ L)

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

// V^T[dv][position] from a raw V tile (TMA's 128-byte swizzle, Swz):
// position 4c+i (and 16+4c+i) of each 32 keys holds key 2c + (i&1) +
// 8(i>>1) (+16), the order of the S accumulator columns, so that the codes
// are the A operand of P V as they lie. A task builds one 16-position chunk
// ch of 4 V^T rows (d_v 4dq..4dq+3) from 16 keys x 4 bytes and stores each
// row's chunk with one 16-byte store; a warp takes the 32 dq of one chunk
// (its 32 reads of one key fall in 32 distinct banks; the 16-byte stores of
// 8 lanes meet 2 swizzled chunks: 4-way conflicts, the shared-memory time
// of 4-byte stores with a quarter of the instructions).
// The 128 producer threads take tasks tid and tid + 128: dq = tid & 31 is
// the thread's for good and the two chunks' first keys are 16 (tid >> 5)
// and that + 64, multiples of 16, so a key's swizzle bits (key & 7) are
// its offset within its 16, known at compile time. The transposer keeps
// the few per-thread constants (in the producer's 40 registers) and per
// tile forms each address with one XOR and one three-input add, where the
// general swizzle cost about ten integer operations per access.
class VTransposer {
 public:
  __device__ explicit VTransposer(int tid)
      : row_(static_cast<uint32_t>((tid >> 5) * 16 * 128 + (tid & 3) * 4)),
        chunk_(static_cast<uint32_t>(((tid & 31) >> 2) << 4)),
        vt_row_(static_cast<uint32_t>((tid & 31) * 4 * 128)),
        vt_xor_(static_cast<uint32_t>((((tid >> 5) ^ ((tid & 1) * 4)) << 4))) {}

  // raw, vt: shared addresses of the raw V stage and the V^T stage.
  __device__ __forceinline__ void Run(uint32_t raw, uint32_t vt) const {
    // One task at a time: its 16 words fit the producer's registers, two would not.
#pragma unroll 1
    for (int t = 0; t < 2; ++t) {
      const uint32_t r = raw + row_ + t * 64 * 128;  // the second task's keys start 64 later
      uint32_t w[4][4];                               // [V^T row][position word]
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        // Keys 2c, 2c + 1, 2c + 8, 2c + 9 of the 16; swizzle bits 2c, 2c + 1, 2c, 2c + 1.
        const uint32_t a0 = r + (chunk_ ^ ((2 * c) << 4)), a1 = r + (chunk_ ^ ((2 * c + 1) << 4));
        const uint32_t r0 = Ld(a0 + (2 * c) * 128);
        const uint32_t r1 = Ld(a1 + (2 * c + 1) * 128);
        const uint32_t r2 = Ld(a0 + (2 * c + 8) * 128);
        const uint32_t r3 = Ld(a1 + (2 * c + 9) * 128);
        const uint32_t t0 = __byte_perm(r0, r1, 0x5140), t1 = __byte_perm(r2, r3, 0x5140);
        const uint32_t t2 = __byte_perm(r0, r1, 0x7362), t3 = __byte_perm(r2, r3, 0x7362);
        w[0][c] = __byte_perm(t0, t1, 0x5410);
        w[1][c] = __byte_perm(t0, t1, 0x7632);
        w[2][c] = __byte_perm(t2, t3, 0x5410);
        w[3][c] = __byte_perm(t2, t3, 0x7632);
      }
      // V^T row 4dq + i, chunk ch = w + 4t: its swizzle XOR is ch ^ ((4dq + i) & 7) = (w ^ 4(dq & 1)) ^ i ^ 4t.
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        St16(vt + vt_row_ + i * 128 + (vt_xor_ ^ ((i ^ (4 * t)) << 4)), w[i][0], w[i][1], w[i][2], w[i][3]);
      }
    }
  }

 private:
  // Volatile: ordered after the mbarrier wait that publishes the raw tile.
  __device__ __forceinline__ static uint32_t Ld(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
    return v;
  }
  __device__ __forceinline__ static void St16(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
  }
  uint32_t row_;     // first key row of the first task + this thread's byte within its 16-byte chunk
  uint32_t chunk_;   // this thread's 16-byte chunk of a raw V row, unswizzled (dq >> 2), times 16
  uint32_t vt_row_;  // V^T row 4 dq
  uint32_t vt_xor_;  // (w ^ 4 (dq & 1)) * 16: the first task's chunk XOR row bits, before i
};

// The scores stay raw: the scale sc > 0 (q_descale * k_descale *
// softmax_scale * log2(e), made positive by the kernel, fp8_ws_kernel.cuh)
// multiplies each row's block maximum once (rounding is monotone, so the
// frame R is that of the scaled scores) and is folded into the one
// multiply-add that makes each code (lean: fma(s, 8 sc, 1.5 * 2^23 + 56 -
// 8 R); exact and naive: 2^fma(s, sc, -R)): two operations per score fewer
// than scaling first, with codes that differ from the scaled form's only
// where the fp32 score's last bits do (DESIGN §4 allows that).

// Masks the raw scores of one tile (keys from j0), only on tiles that reach
// past seq_kv or (causal) past the CTA's first row's last key: every row's
// limit `lim` is at least that, so the test is CTA-uniform.
template <bool kCausal>
__device__ __forceinline__ void Mask(float (&s)[kTile / 8][4], const Fp8KernelParams& p, int64_t j0, int q0,
                                     int64_t diag, const int64_t (&lim)[2], int c) {
  const int64_t j_last = j0 + kTile - 1;
  if (j_last >= p.seq_kv || (kCausal && j_last > q0 + diag)) {
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + n * 8 + 2 * c + (e & 1);
        if (j > lim[e >> 1]) s[n][e] = -INFINITY;
      }
    }
  }
}

// The frames of both 64-key blocks of a tile, from the raw scores, before
// either block's codes: the row maxima of both blocks as trees (depth 4, and
// the four shuffles interleaved) rather than one 16-long chain per block, and
// block 1's frame right after block 0's, so that the tile pays the frame's
// dependency chain (maximum, shuffles, ceiling, frame) once and block 1's
// codes, under P0 V, are the codes alone. Block hb's frame is factor[hb],
// ref[hb] (UpdateBlockFrame), in block order as before. sc > 0 is applied
// to the maxima here; naive_shift (Fp8KernelParams) lowers naive P's
// reference: e4m3fnuz's code of p is e4m3fn's of 2p; the doubled unrounded
// sum cancels the doubled values. Exact and lean codes need no shift:
// e4m3fnuz's frame (headroom 7, code of 1.0 64) gives e4m3fn's codes.
template <int kMode>
__device__ __forceinline__ void TileFrames(const float (&s)[kTile / 8][4], float sc, float naive_shift,
                                           float (&m_run)[2], int (&r_last)[2], int (&r_max)[2],
                                           float (&factor)[2][2], float (&ref)[2][2]) {
  float bmax[2][2];
#pragma unroll
  for (int hb = 0; hb < 2; ++hb) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float m[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) m[i] = fmaxf(s[8 * hb + i][2 * hf], s[8 * hb + i][2 * hf + 1]);
#pragma unroll
      for (int w = 4; w >= 1; w >>= 1) {
#pragma unroll
        for (int i = 0; i < w; ++i) m[i] = fmaxf(m[i], m[i + w]);
      }
      bmax[hb][hf] = m[0];
    }
  }
#pragma unroll
  for (int x = 1; x <= 2; x <<= 1) {
#pragma unroll
    for (int hb = 0; hb < 2; ++hb) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) bmax[hb][hf] = fmaxf(bmax[hb][hf], __shfl_xor_sync(0xffffffffu, bmax[hb][hf], x));
    }
  }
#pragma unroll
  for (int hb = 0; hb < 2; ++hb) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) bmax[hb][hf] *= sc;  // -inf stays -inf: sc > 0
    UpdateBlockFrame<kMode>(bmax[hb], m_run, r_last, r_max, factor[hb], ref[hb]);
    if (kMode == kNaive) {
      ref[hb][0] -= naive_shift;
      ref[hb][1] -= naive_shift;
    }
  }
}

// Block hb (0, 1) of the tile in its frame `ref` (TileFrames): its codes as
// the A fragments pa[2hb], pa[2hb+1]: for keys [32 kc, 32 kc + 32), a0/a1
// rows g/g+8 from n-tiles 4kc, 4kc+1, a2/a3 from 4kc+2, 4kc+3 (V^T's
// positions are permuted to match). Naive P adds the unrounded p in key
// order (two per n-tile, n-tiles ascending) into lsum, rescaled by the
// block's `factor`. s is raw; sc > 0 is applied here.
template <int kMode>
__device__ __forceinline__ void BlockCodes(const float (&s)[kTile / 8][4], int hb, uint32_t (&pa)[kTile / 32][4],
                                           const float (&ref)[2], const float (&factor)[2], float (&lsum)[2],
                                           float sc) {
  // Lean: the code's multiply-add with the frame and the rounding bias in
  // its addend (ref = +inf: -inf, code 0).
  const float lean_a = 8.f * sc;
  float lean_c[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) lean_c[hf] = fmaf(-8.f, ref[hf], kLeanBias + 56.f);
  float psum[2] = {0.f, 0.f};
#pragma unroll
  for (int kc = 2 * hb; kc < 2 * hb + 2; ++kc) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        uint32_t word = 0;
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int n = 4 * kc + 2 * half + q;
          uint32_t pair;
          if (kMode == kLean) {
            pair = LeanCodePairFma(s[n][2 * hf], s[n][2 * hf + 1], lean_a, lean_c[hf]);
          } else {
            const float y0 = fmaf(s[n][2 * hf], sc, -ref[hf]), y1 = fmaf(s[n][2 * hf + 1], sc, -ref[hf]);
            const float p0 = exp2f(y0), p1 = exp2f(y1);
            if (kMode == kNaive) {
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
}

// P V of block hb (keys [64 hb, 64 hb + 64) of the tile) into a fresh ob
// (scale-d 0, then 1): fp8 wgmma accumulation truncates (~14-bit
// alignment), so each block's P V is folded into O in fp32 (FoldBlock)
// rather than accumulated across blocks in the tensor cores.
__device__ __forceinline__ void IssuePv(float (&ob)[kNt][4], const uint32_t (&pa)[kTile / 32][4], uint64_t vt_desc,
                                        int hb) {
#pragma unroll
  for (int kc = 2 * hb; kc < 2 * hb + 2; ++kc) {
    sm90::WgmmaRS<136, sm90::E4m3>(ob, pa[kc], sm90::DescPlus(vt_desc, 32u * kc), kc == 2 * hb ? 0 : 1);
  }
}

// O / L * v_descale into the two rows `row0` and row0 + 8 this thread holds
// (rows that see no key are 0; rows past seq_q are not written).
template <int kMode>
__device__ __forceinline__ void StoreRows(const Fp8KernelParams& p, const float (&o)[kNt][4], const float (&lsum)[2],
                                          float v_ds, int row0, int b, int h, int c) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = row0 + hf * 8;
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

}  // namespace wgmma_tile
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_WGMMA_TILE_CUH_
