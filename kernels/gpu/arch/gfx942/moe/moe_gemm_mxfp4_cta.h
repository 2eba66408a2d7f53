// The slab-walking grouped GEMM of MXFP4 MoE for gfx942 (MI300X), one
// template for both CTA shapes (moe_gfx942_launch.h's CtaOf): bf16
// activations against E2M1 weights with one E8M0 scale per 32 k, on
// v_mfma_f32_16x16x16bf16_1k, over the routing's expert tiles (moe_params.h's
// GemmParams). moe_gemm_mxfp4.hip instantiates the 16-pair decode tile,
// moe_gemm_mxfp4_m64.hip the 64-pair prefill tile, three epilogues each: bf16
// per pair (gate/up alone; down alone), fused SwiGLU (a wave holds both its
// gate and its up columns, so silu(gate) * up never leaves registers), fp32
// per pair (the weighted per-token sum's input).
//
// K is walked in slabs of 64 (kKSlab), each staged in LDS by the whole CTA
// and double-buffered, as the seed's gate/up walks K in slabs: the tile's
// activation rows (shared by the waves, which otherwise each read them), the
// CTA's weight rows as packed E2M1 nibbles and their E8M0 scale bytes, all
// moved with 16-byte global loads (a weight row's 64 k are 32 bytes, two
// loads). Each thread issues its loads of slab s + 1 before slab s's MFMAs
// and writes them to the other buffer after them, one barrier per slab. The
// weights stay packed in LDS and are decoded from it into the MFMA's B
// operand: a lane needs 4 consecutive k of one weight row, i.e. 2 bytes of
// nibbles, and the scale of their 32-k block; E2M1 x 2^(e-127) is exact in
// bf16 (2 significant bits, bf16's exponent range). Staging the decoded bf16
// instead would quadruple the weights' LDS; a decoded operand is used by the
// wave's row tiles at once (one in the decode shape, two in the prefill
// shape). A slab past K (K a multiple of 32, not of 64) is loaded as zeros
// and its last two k-steps skipped.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GEMM_MXFP4_CTA_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GEMM_MXFP4_CTA_H_

#include <cstdint>

#include "kernels/gpu/arch/gfx942/mfma.h"
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/moe/mxfp4_device.h"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

using gpu::gfx942::Mfma;

// One slab's 16-byte pieces: the activation rows (8 per row), then the
// weight rows (2 per row); thread t takes pieces t, t + kThreads, ...
template <int kRows, int kEpi>
struct Slab {
  static constexpr CtaShape kShape = CtaOf(kRows, kEpi == kEpiSwiglu);
  static constexpr int kWRows = WeightRows(kShape);
  static constexpr int kPieces = kRows * kKSlab / 8 + kWRows * 2;
  static constexpr int kLoads = (kPieces + kThreads - 1) / kThreads;
  static constexpr int kScales = kWRows * (kKSlab / kKMultiple);  // bytes, one per thread at most
  static constexpr int kWOffset = AStageBytes(kShape);
  static constexpr int kSOffset = kWOffset + kWRows * kWRowBytes;
  static constexpr int kBytes = SlabBytes(kShape);
  static_assert(kScales <= kThreads, "a scale byte per thread");
  static_assert(kSOffset + kScales == kBytes && kBytes % 16 == 0, "the slab map of moe_gfx942_launch.h");
  static_assert(kKSlab % 32 == 0 && kKSlab / 32 == 2, "a weight row's slab is two 16-byte pieces");
};

// What one thread moves of a slab: its pieces and its scale byte.
template <int kRows, int kEpi>
struct SlabLoads {
  U32x4 piece[Slab<kRows, kEpi>::kLoads];
  uint32_t scale;
};

// Weight row r of the CTA's slab as a row of the expert's weights, or -1
// past out_cols.
template <int kRows, int kEpi>
__device__ __forceinline__ int64_t CtaWeightRow(const GemmParams& p, int64_t e, int r) {
  return ExpertWeightRow(Slab<kRows, kEpi>::kShape, blockIdx.x, r, e, p.nw, p.inter, p.out_cols);
}

// Thread's share of the slab at k0 into registers; zeros for padding pairs,
// columns past out_cols and k past K.
template <int kRows, int kEpi>
__device__ __forceinline__ void LoadSlab(const GemmParams& p, const uint16_t* const* a_rows, int64_t e, int64_t k0,
                                         SlabLoads<kRows, kEpi>& v) {
  using S = Slab<kRows, kEpi>;
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < S::kLoads; ++i) {
    const SlabPiece sp = SlabPieceAt(S::kShape, t + kThreads * i);
    const int64_t k = k0 + sp.k;
    U32x4 x = U32x4{0u, 0u, 0u, 0u};
    if (sp.kind == kActivation) {
      const uint16_t* a = a_rows[i];
      if (a != nullptr && k < p.k) x = LoadGlobal16(a + k);
    } else if (sp.kind == kWeight) {
      const int64_t row = CtaWeightRow<kRows, kEpi>(p, e, sp.row);
      if (row >= 0 && k < p.k) x = LoadGlobal16(p.w + row * (p.k / 2) + k / 2);
    }
    v.piece[i] = x;
  }
  v.scale = 0u;
  if (t < S::kScales) {
    const int64_t row = CtaWeightRow<kRows, kEpi>(p, e, t / 2);
    const int64_t k = k0 + (t % 2) * 32;
    if (row >= 0 && k < p.k) v.scale = p.ws[row * (p.k / 32) + k / 32];
  }
}

template <int kRows, int kEpi>
__device__ __forceinline__ void StoreSlab(uint8_t* buf, const SlabLoads<kRows, kEpi>& v) {
  using S = Slab<kRows, kEpi>;
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < S::kLoads; ++i) {
    const SlabPiece sp = SlabPieceAt(S::kShape, t + kThreads * i);
    if (sp.kind != kNone) *reinterpret_cast<U32x4*>(buf + sp.lds) = v.piece[i];
  }
  if (t < S::kScales) buf[SlabScaleLds(S::kShape, t)] = static_cast<uint8_t>(v.scale);
}

// B operand of the slab's weight row r at k = 16 ks + 4 lq .. + 3, from LDS.
template <int kRows, int kEpi>
__device__ __forceinline__ Bf16x4 WeightOperand(const uint8_t* buf, int r, int ks, int lq) {
  using S = Slab<kRows, kEpi>;
  const int kk = ks * 16 + lq * 4;
  const uint32_t two = *reinterpret_cast<const uint16_t*>(buf + S::kWOffset + r * kWRowBytes + kk / 2);
  return DecodeFp4x4(two, E8m0(buf[S::kSOffset + r * 2 + kk / 32]));
}

// One CTA: routing tile blockIdx.y x the shape's out_cols output columns of
// column block blockIdx.x. Wave w computes its WaveRowTiles x WaveColTiles
// MFMA tiles (and their up tiles under SwiGLU) at WaveRow / WaveCol.
template <int kRows, int kEpi>
__device__ __forceinline__ void GemmCta(const GemmParams& p) {
  using S = Slab<kRows, kEpi>;
  constexpr CtaShape kS = S::kShape;
  constexpr int kMt = WaveRowTiles(kS), kNt = WaveColTiles(kS);
  constexpr bool kSwiglu = kEpi == kEpiSwiglu;
  __shared__ __attribute__((aligned(16))) uint8_t lds[LdsBytes(kS)];
  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int lane = threadIdx.x & 63, wave = threadIdx.x >> 6;
  const int lr = lane & 15, lq = lane >> 4;
  const int64_t e = p.tile_expert[tile];

  // The activation row each of this thread's A pieces reads (null for a
  // padding pair): pair row pc / 8 of the tile.
  const uint16_t* a_rows[S::kLoads];
#pragma unroll
  for (int i = 0; i < S::kLoads; ++i) {
    const SlabPiece sp = SlabPieceAt(kS, threadIdx.x + kThreads * i);
    const int pair = sp.kind == kActivation ? p.sorted[tile * kRows + sp.row] : -1;
    a_rows[i] = pair >= 0 ? p.a + static_cast<int64_t>(pair / p.a_row_div) * p.k : nullptr;
  }

  F32x4 acc[kMt][kNt], acc_up[kMt][kNt];
#pragma unroll
  for (int m = 0; m < kMt; ++m) {
#pragma unroll
    for (int n = 0; n < kNt; ++n) acc[m][n] = acc_up[m][n] = F32x4{0.f, 0.f, 0.f, 0.f};
  }
  const int64_t slabs = (p.k + kKSlab - 1) / kKSlab;
  SlabLoads<kRows, kEpi> next;
  LoadSlab<kRows, kEpi>(p, a_rows, e, 0, next);
  StoreSlab<kRows, kEpi>(lds, next);
  __syncthreads();
  for (int64_t s = 0; s < slabs; ++s) {
    const bool more = s + 1 < slabs;
    const uint8_t* buf = lds + (s & 1) * S::kBytes;
    if (more) LoadSlab<kRows, kEpi>(p, a_rows, e, (s + 1) * kKSlab, next);
    const int steps = p.k - s * kKSlab >= kKSlab ? kKSlab / 16 : kKMultiple / 16;
#pragma unroll
    for (int ks = 0; ks < kKSlab / 16; ++ks) {
      if (ks >= steps) break;
      // A operands: pair row WaveRow of the tile at k = 16 ks + 4 lq.
      Bf16x4 av[kMt];
#pragma unroll
      for (int m = 0; m < kMt; ++m) {
        av[m] = *reinterpret_cast<const Bf16x4*>(buf + WaveRow(kS, wave, m, lr) * kARowBytes + (ks * 16 + lq * 4) * 2);
      }
#pragma unroll
      for (int n = 0; n < kNt; ++n) {
        const int c = WaveCol(kS, wave, n, lr);
        const Bf16x4 bv = WeightOperand<kRows, kEpi>(buf, c, ks, lq);
#pragma unroll
        for (int m = 0; m < kMt; ++m) acc[m][n] = Mfma(av[m], bv, acc[m][n]);
        if (kSwiglu) {
          const Bf16x4 bu = WeightOperand<kRows, kEpi>(buf, kS.out_cols + c, ks, lq);
#pragma unroll
          for (int m = 0; m < kMt; ++m) acc_up[m][n] = Mfma(av[m], bu, acc_up[m][n]);
        }
      }
    }
    if (more) StoreSlab<kRows, kEpi>(lds + ((s + 1) & 1) * S::kBytes, next);
    __syncthreads();
  }

  // This lane holds rows WaveRow(.., m, 0) + 4 lq + i of the tile, column WaveCol(.., n, lr).
#pragma unroll
  for (int n = 0; n < kNt; ++n) {
    const int col = blockIdx.x * kS.out_cols + WaveCol(kS, wave, n, lr);
    if (col >= p.out_cols) continue;
#pragma unroll
    for (int m = 0; m < kMt; ++m) {
      StorePairOutputs<kEpi>(p, tile * kRows + WaveRow(kS, wave, m, 0) + 4 * lq, col, acc[m][n], acc_up[m][n]);
    }
  }
}

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

// C names: the host finds them with hipModuleGetFunction (moe_gfx942_launch.h's
// GemmKernel). The waves per SIMD are the occupancy each shape is built for.
#define KS_MOE_GFX942_GEMM(NAME, ROWS, EPI)                                                              \
  extern "C" __global__ void __attribute__((                                                            \
      amdgpu_flat_work_group_size(256, 256),                                                            \
      amdgpu_waves_per_eu(kernelserve::gpu::moe::gfx942::WavesPerSimd(ROWS))))                          \
  NAME(const kernelserve::gpu::moe::GemmParams p) {                                                     \
    kernelserve::gpu::moe::gfx942::GemmCta<ROWS, EPI>(p);                                               \
  }

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GEMM_MXFP4_CTA_H_
