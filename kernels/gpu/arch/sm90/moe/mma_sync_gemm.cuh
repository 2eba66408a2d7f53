// The mma.sync grouped GEMM of the MXFP4 MoE (any stage), included by its
// instantiation files mma_sync_gemm_m<rows>_<epilogue>.cu.
//
// One CTA = (column tile of 128 weight rows, one expert row tile). A (bf16
// activations, rows gathered by pair) and the raw E2M1 nibbles with their
// E8M0 scales stream in by cp.async, kStages deep; each k-tile of 128 is
// dequantized once to bf16 in shared memory (exact: the E2M1 bits placed
// into bf16 bit fields with integer ops, then one or two exact bf16x2
// multiplies by powers of two for the block scale) and fed to
// mma.sync m16n8k16 with fp32 accumulation; m16 row blocks past the expert's
// rows are skipped, so padding costs no tensor-core work. Epilogues: bf16
// per pair, fused SwiGLU (gate and up rows of the same intermediate columns
// sit in the same thread), or fp32 per pair for the weighted down
// projection, whose per-token sum runs in a separate kernel.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_MMA_SYNC_GEMM_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_MMA_SYNC_GEMM_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/moe/moe_gemm.h"
#include "kernels/gpu/arch/sm90/moe/moe_gemm_common.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace mma_sync {

using sm80::CpAsync16;
using sm80::CpAsync4;
using sm80::CpAsyncCommit;
using sm80::CpAsyncWait;
using sm80::LdMatrixX4;
using sm80::MmaBf16;
using sm80::SmemAddr;

constexpr int kBN = kMmaSyncCols;      // weight rows per CTA
constexpr int kBK = kKMultiple;        // K per pipeline stage
constexpr int kAStr = kBK + 8;         // bf16 stride of sA / sB rows (272 B)
constexpr int kRawStr = kBK / 2 + 16;  // bytes per raw fp4 row (80: conflict-free)

// Warps along M and N and pipeline depth of each row tile (64 rows, the
// one the dispatcher uses: from 64 rows per expert on, wgmma_rs serves every
// stage; a 128-row tiling left with that, git keeps it).
template <int BM>
struct Tiling;
template <>
struct Tiling<64> {  // 2 CTAs per SM
  static constexpr int kWM = 2, kWN = 4, kStages = 2;
};

template <int BM>
struct Cfg {
  static constexpr int WM = Tiling<BM>::kWM, WN = Tiling<BM>::kWN, kStages = Tiling<BM>::kStages;
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kMT = BM / WM / 16;       // m16 tiles per warp
  static constexpr int kNT = kBN / WN / 8;       // n8 tiles per warp
  static constexpr int kSwGroup = kBN / WN / 2;  // swiglu: gate/up rows per half warp tile
  static constexpr int kStageA = BM * kAStr * 2;
  static constexpr int kStageRaw = kBN * kRawStr;
  static constexpr int kStageScale = kBN * 4;
  static constexpr int kStageBytes = kStageA + kStageRaw + kStageScale;
  static constexpr int kSmemB = kBN * kAStr * 2;
  static constexpr int kSmemBytes = kStages * kStageBytes + kSmemB + BM * 8;
};

template <int BM, int kEpi>
__global__ void __launch_bounds__(Cfg<BM>::kThreads) MmaSyncGemmKernel(const GemmParams p) {
  using C = Cfg<BM>;
  constexpr int WN = C::WN, kStages = C::kStages;
  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t* sB = reinterpret_cast<uint16_t*>(smem + kStages * C::kStageBytes);
  int64_t* sRow = reinterpret_cast<int64_t*>(smem + kStages * C::kStageBytes + C::kSmemB);

  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int e = p.tile_expert[tile];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp / WN, wn = warp % WN;
  const int col_tile = blockIdx.x;
  const int valid_rows = p.tile_rows[tile];

  // Pair id of each row of the tile, and the element offset of its A row.
  for (int r = tid; r < BM; r += C::kThreads) {
    const int pair = p.sorted[tile * BM + r];
    sRow[r] = pair < 0 ? -1 : static_cast<int64_t>(pair / p.a_row_div) * p.k;
  }
  // Weight row of each smem B row (-1: past the matrix, zero-filled).
  auto weight_row = [&](int j) -> int64_t {
    if (kEpi == kEpiSwiglu) {
      const int grp = j / C::kSwGroup;
      const int idx = (grp >> 1) * C::kSwGroup + j % C::kSwGroup;
      const int col = col_tile * (kBN / 2) + idx;
      if (col >= p.inter) return -1;
      return (grp & 1) ? p.inter + col : col;
    }
    const int64_t row = static_cast<int64_t>(col_tile) * kBN + j;
    return row < p.nw ? row : -1;
  };
  __syncthreads();

  const uint8_t* w_e = p.w + static_cast<int64_t>(e) * p.nw * (p.k / 2);
  const uint8_t* s_e = p.ws + static_cast<int64_t>(e) * p.nw * (p.k / 32);
  const int k_tiles = static_cast<int>(p.k / kBK);

  auto issue = [&](int kt) {
    if (kt < k_tiles) {
      uint8_t* st = smem + (kt % kStages) * C::kStageBytes;
      uint16_t* sA = reinterpret_cast<uint16_t*>(st);
      uint8_t* sRaw = st + C::kStageA;
      uint8_t* sScale = sRaw + C::kStageRaw;
      const int64_t k0 = static_cast<int64_t>(kt) * kBK;
      for (int c = tid; c < BM * (kBK / 8); c += C::kThreads) {
        const int r = c / (kBK / 8), ch = c % (kBK / 8);
        const int64_t off = sRow[r];
        CpAsync16(SmemAddr(sA + r * kAStr + ch * 8), off >= 0 ? p.a + off + k0 + ch * 8 : p.a,
                  off >= 0 ? 16 : 0);
      }
      for (int c = tid; c < kBN * (kBK / 32); c += C::kThreads) {
        const int j = c % kBN, ch = c / kBN;
        const int64_t row = weight_row(j);
        CpAsync16(SmemAddr(sRaw + j * kRawStr + ch * 16),
                  row >= 0 ? w_e + row * (p.k / 2) + k0 / 2 + ch * 16 : w_e, row >= 0 ? 16 : 0);
        if (ch == 0) {
          const uint8_t* src = row >= 0 ? s_e + row * (p.k / 32) + k0 / 32 : s_e;
          CpAsync4(SmemAddr(sScale + j * 4), src, row >= 0 ? 4 : 0);
        }
      }
    }
    CpAsyncCommit();  // an empty group past the end keeps the wait counts uniform
  };

  float acc[C::kMT][C::kNT][4];
#pragma unroll
  for (int i = 0; i < C::kMT; ++i) {
#pragma unroll
    for (int j = 0; j < C::kNT; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;
    }
  }

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  for (int kt = 0; kt < k_tiles; ++kt) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // stage kt landed; the previous k-tile's mma is done with sB
    {
      const uint8_t* st = smem + (kt % kStages) * C::kStageBytes;
      const uint8_t* sRaw = st + C::kStageA;
      const uint8_t* sScale = sRaw + C::kStageRaw;
      for (int c = tid; c < kBN * (kBK / 32); c += C::kThreads) {
        const int j = c % kBN, blk = c / kBN;
        const uint4 raw = *reinterpret_cast<const uint4*>(sRaw + j * kRawStr + blk * 16);
        const BlockScale bs = MakeBlockScale(sScale[j * 4 + blk]);
        const uint32_t w4[4] = {raw.x, raw.y, raw.z, raw.w};
        uint32_t o[16];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            o[q * 4 + b] = DequantPair(w4[q] >> (8 * b), bs);
          }
        }
        uint4* dst = reinterpret_cast<uint4*>(sB + j * kAStr + blk * 32);
        dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
        dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
        dst[2] = make_uint4(o[8], o[9], o[10], o[11]);
        dst[3] = make_uint4(o[12], o[13], o[14], o[15]);
      }
    }
    __syncthreads();           // sB ready
    issue(kt + kStages - 1);   // into the stage the previous k-tile used

    const uint16_t* sA = reinterpret_cast<const uint16_t*>(smem + (kt % kStages) * C::kStageBytes);
    const uint32_t a_base = SmemAddr(sA + (wm * C::kMT * 16 + (lane & 15)) * kAStr + (lane >> 4) * 8);
    const uint32_t b_base =
        SmemAddr(sB + (wn * C::kNT * 8 + (lane >> 4) * 8 + (lane & 7)) * kAStr + ((lane >> 3) & 1) * 8);
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t a[C::kMT][4];
#pragma unroll
      for (int mt = 0; mt < C::kMT; ++mt) {
        if (wm * C::kMT * 16 + mt * 16 >= valid_rows) continue;
        LdMatrixX4(a_base + (mt * 16 * kAStr + ks * 16) * 2, a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
      }
#pragma unroll
      for (int np = 0; np < C::kNT / 2; ++np) {
        uint32_t b0, b1, b2, b3;
        LdMatrixX4(b_base + (np * 16 * kAStr + ks * 16) * 2, b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < C::kMT; ++mt) {
          if (wm * C::kMT * 16 + mt * 16 >= valid_rows) continue;  // padding rows only
          MmaBf16(acc[mt][2 * np], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b0, b1);
          MmaBf16(acc[mt][2 * np + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b2, b3);
        }
      }
    }
  }

  // Epilogue.
#pragma unroll
  for (int mt = 0; mt < C::kMT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = wm * C::kMT * 16 + mt * 16 + hf * 8 + (lane >> 2);
      const int pair = p.sorted[tile * BM + r];
      if (pair < 0) continue;
      if (kEpi == kEpiSwiglu) {
        uint16_t* o = static_cast<uint16_t*>(p.out) + static_cast<int64_t>(pair) * p.out_cols;
#pragma unroll
        for (int nt = 0; nt < C::kNT / 2; ++nt) {
          const int col = col_tile * (kBN / 2) + wn * C::kSwGroup + nt * 8 + (lane & 3) * 2;
          if (col >= p.inter) continue;
          float v[2];
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const float g = acc[mt][nt][hf * 2 + q], u = acc[mt][nt + C::kNT / 2][hf * 2 + q];
            v[q] = g / (1.f + expf(-g)) * u;
          }
          *reinterpret_cast<uint32_t*>(o + col) = PackBf16x2(v[0], v[1], p.rounding);
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < C::kNT; ++nt) {
          const int64_t col = static_cast<int64_t>(col_tile) * kBN + wn * C::kNT * 8 + nt * 8 + (lane & 3) * 2;
          if (col >= p.nw) continue;
          const float v0 = acc[mt][nt][hf * 2], v1 = acc[mt][nt][hf * 2 + 1];
          if (kEpi == kEpiF32) {
            *reinterpret_cast<float2*>(static_cast<float*>(p.out) + pair * p.out_cols + col) = make_float2(v0, v1);
          } else {
            *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.out) + pair * p.out_cols + col) =
                PackBf16x2(v0, v1, p.rounding);
          }
        }
      }
    }
  }
}

}  // namespace mma_sync

template <int kRows, int kEpi>
cudaError_t LaunchMmaSyncGemm(const GemmParams& p, int64_t col_tiles, int64_t max_tiles, cudaStream_t stream) {
  using C = mma_sync::Cfg<kRows>;
  return LaunchOverTiles<C::kThreads, C::kSmemBytes>(mma_sync::MmaSyncGemmKernel<kRows, kEpi>, p, col_tiles,
                                                     max_tiles, stream);
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_MMA_SYNC_GEMM_CUH_
