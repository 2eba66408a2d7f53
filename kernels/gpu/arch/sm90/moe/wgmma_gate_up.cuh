// The wgmma gate/up GEMM of the MXFP4 MoE (sm_90a), for many rows per
// expert; included by its instantiation files wgmma_gate_up_<tiling>.cu.
//
// One CTA = 64 kWgs expert rows x kBNw weight rows (with SwiGLU: kBNw/2
// gate rows and the matching up rows, so the epilogue stays in registers);
// kWgs warpgroups, each 64 rows x kBNw columns (m64nNk16, kBNw/2 fp32
// accumulators per thread). A (gathered bf16 rows) and the raw MXFP4
// weights stream in by cp.async, kWgStages deep, in k-tiles of 64; the
// dequantized bf16 weights alternate between two shared buffers, so all
// threads dequantize k-tile i+1 while the tensor cores run the asynchronous
// wgmma of k-tile i (one wgmma group kept in flight). Both operands use the
// 128-byte-swizzled K-major layout (row r of 64 bf16 = 128 bytes at 128 r,
// its 16-byte chunk c at chunk c ^ (r & 7); 8-row groups 1024 bytes apart),
// the base aligned to 1024 bytes.
// Tilings: 128 x 256 (2 warpgroups; x rows read by 3 column tiles at I =
// 384) and 192 x 192 (3 warpgroups; one tile per expert up to 192 rows).
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_WGMMA_GATE_UP_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_WGMMA_GATE_UP_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/moe/moe_gemm.h"
#include "kernels/gpu/arch/sm90/moe/moe_gemm_common.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace wgmma {

using sm80::CpAsync16;
using sm80::CpAsync4;
using sm80::CpAsyncCommit;
using sm80::CpAsyncWait;
using sm80::SmemAddr;
using sm90::FenceOperand;
using sm90::FenceProxyAsync;
using sm90::WgmmaCommit;
using sm90::WgmmaFence;
using sm90::WgmmaWait;

constexpr int kWgBK = 64, kWgStages = 4;
constexpr int kWgRawStr = 48;  // bytes per raw fp4 row (32 + 16)

// Warpgroups and weight rows per CTA of each row tile.
template <int kRows>
struct Tiling;
template <>
struct Tiling<128> {
  static constexpr int kWgs = 2, kBNw = 256;
};
template <>
struct Tiling<192> {
  static constexpr int kWgs = 3, kBNw = 192;
};

template <int kWgs, int kBNw>
struct WgCfg {
  static constexpr int kBM = 64 * kWgs;
  static constexpr int kThreads = 128 * kWgs;
  static constexpr int kAcc = kBNw / 2;
  static constexpr int kStageA = kBM * kWgBK * 2;
  static constexpr int kStageRaw = kBNw * kWgRawStr;
  static constexpr int kStageScale = kBNw * 4;  // the 4 scales of the 128-wide K window holding the k-tile
  // Swizzled stages start on 1024-byte boundaries (a no-op but for 192 columns).
  static constexpr int kStageAlign = 1024;
  static constexpr int kStageBytes =
      (kStageA + kStageRaw + kStageScale + kStageAlign - 1) / kStageAlign * kStageAlign;
  static constexpr int kSB = kBNw * kWgBK * 2;
  static constexpr int kSmemBytes = kWgStages * kStageBytes + 2 * kSB + 1024;  // + slack to align the base to 1024
  static constexpr int kRawChunks = kBNw * 2;          // 16-byte raw chunks per stage
  static constexpr int kItems = kBNw * 4;              // dequant items (16 elements) per k-tile
  static constexpr int kItemsPerThread = kItems / kThreads;
  static_assert(kSB % kStageAlign == 0, "dequantized-buffer alignment");
  static_assert(kItems % kThreads == 0, "dequant split");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// D(64xN fp32) += A(64x16 bf16, K-major smem) * B(16xN bf16, K-major smem),
// operands as the descriptors say (OperandDesc); N = 256 or 192.
template <int kAcc>
__device__ __forceinline__ void WgmmaK16Bf16(float (&d)[kAcc], uint64_t da, uint64_t db) {
  sm90::WgmmaSS<2 * kAcc, sm90::Bf16>(d, da, db, 1);
}

// Byte offset of (row r, 16-byte K chunk c) in a 128-byte-swizzled [rows x 64] bf16 tile.
__device__ __forceinline__ uint32_t SwizzledOffset(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

// Descriptor of a swizzled K-major [rows x 64] bf16 operand (8-row groups 1024 apart).
__device__ __forceinline__ uint64_t OperandDesc(uint32_t addr) { return sm90::MakeSmemDesc(addr, 16, 1024); }

template <int kWgs, int kBNw, int kEpi>
__global__ void __launch_bounds__(WgCfg<kWgs, kBNw>::kThreads, 1) GateUpWgmmaKernel(const GemmParams p) {
  using C = WgCfg<kWgs, kBNw>;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw;
  smem += (1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u;
  uint8_t* sB = smem + kWgStages * C::kStageBytes;

  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int e = p.tile_expert[tile];
  const int tid = threadIdx.x, wg = tid >> 7;
  const int col_tile = blockIdx.x;
  const int valid_rows = p.tile_rows[tile];
  const bool active = wg * 64 < valid_rows;  // this warpgroup holds real rows
  const int k_tiles = static_cast<int>(p.k / kWgBK);

  // Fixed per thread across k-tiles: the A rows it copies (chunk c = tid +
  // kThreads i) and the weight rows it copies.
  int64_t a_off[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = tid + i * C::kThreads;
    const int r = ((c >> 6) << 3) + (c & 7);
    const int pair = p.sorted[tile * C::kBM + r];
    a_off[i] = pair < 0 ? -1 : static_cast<int64_t>(pair / p.a_row_div) * p.k + ((c >> 3) & 7) * 8;
  }
  const uint8_t* w_e = p.w + static_cast<int64_t>(e) * p.nw * (p.k / 2);
  const uint8_t* s_e = p.ws + static_cast<int64_t>(e) * p.nw * (p.k / 32);
  constexpr int kRawPer = (C::kRawChunks + C::kThreads - 1) / C::kThreads;
  int64_t w_row[kRawPer];
#pragma unroll
  for (int i = 0; i < kRawPer; ++i) {
    const int j = ((tid + i * C::kThreads) >> 1) % kBNw;
    int64_t row;
    if (kEpi == kEpiSwiglu) {
      const int col = col_tile * (kBNw / 2) + j % (kBNw / 2);
      row = col >= p.inter ? -1 : (j >= kBNw / 2 ? p.inter + col : col);
    } else {
      row = static_cast<int64_t>(col_tile) * kBNw + j;
      if (row >= p.nw) row = -1;
    }
    w_row[i] = row;
  }

  auto issue = [&](int kt) {
    if (kt < k_tiles) {
      uint8_t* st = smem + (kt % kWgStages) * C::kStageBytes;
      uint8_t* sRaw = st + C::kStageA;
      uint8_t* sScale = sRaw + C::kStageRaw;
      const int64_t k0 = static_cast<int64_t>(kt) * kWgBK;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = tid + i * C::kThreads;
        // Chunk c is (row ((c >> 6) << 3) + (c & 7), K chunk (c >> 3) & 7).
        const uint32_t dst = SwizzledOffset(((c >> 6) << 3) + (c & 7), (c >> 3) & 7);
        CpAsync16(SmemAddr(st + dst), a_off[i] >= 0 ? p.a + a_off[i] + k0 : p.a, a_off[i] >= 0 ? 16 : 0);
      }
#pragma unroll
      for (int i = 0; i < kRawPer; ++i) {
        const int c = tid + i * C::kThreads;
        if (c < C::kRawChunks) {
          const int j = c >> 1, ch = c & 1;
          const int64_t row = w_row[i];
          CpAsync16(SmemAddr(sRaw + j * kWgRawStr + ch * 16),
                    row >= 0 ? w_e + row * (p.k / 2) + k0 / 2 + ch * 16 : w_e, row >= 0 ? 16 : 0);
          if (ch == 0) {
            const uint8_t* src = row >= 0 ? s_e + row * (p.k / 32) + (k0 / 128) * 4 : s_e;
            CpAsync4(SmemAddr(sScale + j * 4), src, row >= 0 ? 4 : 0);
          }
        }
      }
    }
    CpAsyncCommit();  // an empty group past the end keeps the wait counts uniform
  };

  // k-tile kt's raw weights -> bf16 in sB[kt & 1] (exact; see mma_sync_gemm.cuh).
  // Item = 16 elements (8 raw bytes) of one weight row.
  auto dequant = [&](int kt) {
    const uint8_t* st = smem + (kt % kWgStages) * C::kStageBytes;
    const uint8_t* sRaw = st + C::kStageA;
    const uint8_t* sScale = sRaw + C::kStageRaw;
    uint8_t* dstb = sB + (kt & 1) * C::kSB;
#pragma unroll
    for (int i = 0; i < C::kItemsPerThread; ++i) {
      const int item = tid + i * C::kThreads;
      const int j = item % kBNw, hb = item / kBNw;  // hb: 16-element quarter of the k-tile
      const uint2 raw = *reinterpret_cast<const uint2*>(sRaw + j * kWgRawStr + hb * 8);
      const uint32_t sc = sScale[j * 4 + (kt & 1) * 2 + (hb >> 1)];
      const bool one = sc >= 1 && sc <= 128;
      const uint32_t f1 = one ? ((sc + 126u) << 7) * 0x10001u : 0x7E807E80u;
      const uint32_t f2 = sc == 255 ? 0x7FC07FC0u : (sc == 0 ? 0x00400040u : (sc << 7) * 0x10001u);
      const uint32_t w2[2] = {raw.x, raw.y};
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        uint32_t o[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          uint32_t v = MulBf16x2(Fp4PairBits(w2[q] >> (8 * b)), f1);
          if (!one) v = MulBf16x2(v, f2);
          o[b] = v;
        }
        *reinterpret_cast<uint4*>(dstb + SwizzledOffset(j, hb * 2 + q)) = make_uint4(o[0], o[1], o[2], o[3]);
      }
    }
  };

  float acc[C::kAcc];
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.f;

#pragma unroll
  for (int s = 0; s < kWgStages - 1; ++s) issue(s);
  CpAsyncWait<kWgStages - 2>();
  FenceProxyAsync();
  __syncthreads();
  dequant(0);
  FenceProxyAsync();
  __syncthreads();

  const uint32_t smem_base = SmemAddr(smem);
  for (int kt = 0; kt < k_tiles; ++kt) {
    // sB[kt & 1] and stage kt's A are ready and visible to the async proxy.
    // Issued by every warpgroup, also over padding rows: a wgmma under a
    // per-warpgroup branch makes ptxas serialize all of them (C7520).
    {
      const uint32_t a_addr = smem_base + (kt % kWgStages) * C::kStageBytes + wg * 8 * 1024;
      const uint32_t b_addr = smem_base + kWgStages * C::kStageBytes + (kt & 1) * C::kSB;
      const uint64_t da = OperandDesc(a_addr), db = OperandDesc(b_addr);
      constexpr uint64_t kStep = 32 >> 4;  // a k-step of 16 is 32 bytes along the swizzled row
      FenceOperand(acc);
      WgmmaFence();
#pragma unroll
      for (int ks = 0; ks < kWgBK / 16; ++ks) WgmmaK16Bf16(acc, da + ks * kStep, db + ks * kStep);
    }
    WgmmaCommit();
    FenceOperand(acc);
    CpAsyncWait<kWgStages - 3>();  // this thread's copies of k-tile kt + 1
    WgmmaWait<1>();                // this warpgroup's k-tile kt - 1
    FenceProxyAsync();
    __syncthreads();  // every warpgroup is done with sB[(kt+1)&1] and stage kt-1; kt+1 landed
    issue(kt + kWgStages - 1);  // into stage (kt - 1) % kWgStages
    if (kt + 1 < k_tiles) {
      dequant(kt + 1);  // overlaps the wgmma of k-tile kt
      FenceProxyAsync();
    }
    __syncthreads();
  }
  WgmmaWait<0>();
  FenceOperand(acc);

  // Epilogue. Accumulator layout of m64nN: row 16 w + lane/4 + 8 h, column
  // 8 j + 2 (lane%4) + c in register 4 j + 2 h + c (w = warp within the warpgroup).
  if (!active) return;
  const int warp = (tid >> 5) & 3, lane = tid & 31;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = wg * 64 + warp * 16 + (lane >> 2) + 8 * h;
    const int pair = p.sorted[tile * C::kBM + r];
    if (pair < 0) continue;
    uint16_t* o = static_cast<uint16_t*>(p.out) + static_cast<int64_t>(pair) * p.out_cols;
    if (kEpi == kEpiSwiglu) {
#pragma unroll
      for (int j = 0; j < kBNw / 16; ++j) {
        const int col = col_tile * (kBNw / 2) + 8 * j + 2 * (lane & 3);
        if (col >= p.inter) continue;
        float v[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float g = acc[4 * j + 2 * h + c], u = acc[4 * (j + kBNw / 16) + 2 * h + c];
          v[c] = g / (1.f + expf(-g)) * u;
        }
        *reinterpret_cast<uint32_t*>(o + col) = PackBf16x2(v[0], v[1], p.rounding);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kBNw / 8; ++j) {
        const int64_t col = static_cast<int64_t>(col_tile) * kBNw + 8 * j + 2 * (lane & 3);
        if (col >= p.nw) continue;
        *reinterpret_cast<uint32_t*>(o + col) = PackBf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], p.rounding);
      }
    }
  }
}

}  // namespace wgmma

template <int kRows, int kEpi>
cudaError_t LaunchWgmmaGateUp(const GemmParams& p, int64_t max_tiles, cudaStream_t stream) {
  constexpr int kWgs = wgmma::Tiling<kRows>::kWgs, kBNw = wgmma::Tiling<kRows>::kBNw;
  using C = wgmma::WgCfg<kWgs, kBNw>;
  const int64_t col_tiles = kEpi == kEpiSwiglu ? (p.inter + kBNw / 2 - 1) / (kBNw / 2) : (p.nw + kBNw - 1) / kBNw;
  return LaunchOverTiles<C::kThreads, C::kSmemBytes>(wgmma::GateUpWgmmaKernel<kWgs, kBNw, kEpi>, p, col_tiles,
                                                     max_tiles, stream);
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_WGMMA_GATE_UP_CUH_
