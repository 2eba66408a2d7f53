// The grouped GEMM of MXFP4 MoE for gfx942 (MI300X): bf16 activations
// against E2M1 weights with one E8M0 scale per 32 k, on
// v_mfma_f32_16x16x16bf16_1k. It walks the routing's expert tiles
// (moe_params.h's GemmParams): a CTA is one 16-pair tile x 64 output columns,
// four waves of 16 columns each. Three epilogues, one kernel each: bf16 per
// pair (gate/up alone; down alone), fused SwiGLU (a wave holds both its gate
// and its up columns, so silu(gate) * up never leaves registers), fp32 per
// pair (the weighted per-token sum's input).
//
// K is walked in slabs of 64 (kKSlab), each staged in LDS by the whole CTA
// and double-buffered, as the seed's gate/up walks K in slabs: the tile's 16
// activation rows (shared by the four waves, which otherwise each read them),
// the CTA's weight rows as packed E2M1 nibbles and their E8M0 scale bytes,
// all moved with 16-byte global loads (a weight row's 64 k are 32 bytes, two
// loads) instead of a 2-byte load per lane per k-step. Each thread issues
// its loads of slab s + 1 before slab s's MFMAs and writes them to the other
// buffer after them, one barrier per slab. The weights stay packed in LDS
// and are decoded from it into the MFMA's B operand: a lane needs 4
// consecutive k of one weight row, i.e. 2 bytes of nibbles, and the scale
// of their 32-k block; E2M1 x 2^(e-127) is exact in bf16 (2 significant
// bits, bf16's exponent range). Staging the decoded bf16 instead would
// quadruple the weights' LDS and gain nothing: each decoded value is used by
// one lane of one MFMA. A slab past K (K a multiple of 32, not of 64) is
// loaded as zeros and its last two k-steps skipped.
//
// Occupancy (checked on the code object by moe_gfx942_hip_test): LDS 11008
// bytes (bf16 and fp32 epilogues) and 17408 (SwiGLU: 128 weight rows), so
// three CTAs per CU for every epilogue, three waves per SIMD: VGPR + AGPR
// <= 168 per lane (two accumulators of 4 fp32, one k-step's operands, the
// next slab's loads in flight). No scratch.
#include <cstdint>

#include "kernels/gpu/arch/gfx942/mfma.h"
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/moe/mxfp4_device.h"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

using gpu::gfx942::Mfma;

// One slab's 16-byte pieces: the 16 activation rows (8 per row), then the
// weight rows (2 per row); thread t takes pieces t, t + kThreads, ...
template <int kEpi>
struct Slab {
  static constexpr bool kSwiglu = kEpi == kEpiSwiglu;
  static constexpr int kWRows = WeightRows(kSwiglu);
  static constexpr int kAPieces = kTileRows * kKSlab / 8;
  static constexpr int kWPieces = kWRows * 2;
  static constexpr int kPieces = kAPieces + kWPieces;
  static constexpr int kLoads = (kPieces + kThreads - 1) / kThreads;
  static constexpr int kScales = kWRows * (kKSlab / kKMultiple);  // bytes, one per thread at most
  static constexpr int kWOffset = kAStageBytes;
  static constexpr int kSOffset = kAStageBytes + kWRows * kWRowBytes;
  static constexpr int kBytes = SlabBytes(kSwiglu);
  static_assert(kScales <= kThreads, "a scale byte per thread");
  static_assert(kSOffset + kScales == kBytes && kBytes % 16 == 0, "the slab map above");
  static_assert(kKSlab % 32 == 0 && kKSlab / 32 == 2, "a weight row's slab is two 16-byte pieces");
};

// What one thread moves of a slab: its pieces and its scale byte.
template <int kEpi>
struct SlabLoads {
  U32x4 piece[Slab<kEpi>::kLoads];
  uint32_t scale;
};

// Weight row r of the CTA's slab (r < 64: the gate or only rows; r >= 64 the
// up rows at + inter) as a row of the expert's weights, or -1 past out_cols.
template <int kEpi>
__device__ __forceinline__ int64_t CtaWeightRow(const GemmParams& p, int64_t e, int r) {
  const int c = r % kCtaCols;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kCtaCols + c;
  if (col >= p.out_cols) return -1;
  return e * p.nw + col + (r >= kCtaCols ? p.inter : 0);
}

// Thread's share of the slab at k0 into registers; zeros for padding pairs,
// columns past out_cols and k past K.
template <int kEpi>
__device__ __forceinline__ void LoadSlab(const GemmParams& p, const uint16_t* const* a_rows, int64_t e, int64_t k0,
                                         SlabLoads<kEpi>& v) {
  using S = Slab<kEpi>;
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < S::kLoads; ++i) {
    const SlabPiece sp = SlabPieceAt(S::kSwiglu, t + kThreads * i);
    const int64_t k = k0 + sp.k;
    U32x4 x = U32x4{0u, 0u, 0u, 0u};
    if (sp.kind == kActivation) {
      const uint16_t* a = a_rows[i];
      if (a != nullptr && k < p.k) x = LoadGlobal16(a + k);
    } else if (sp.kind == kWeight) {
      const int64_t row = CtaWeightRow<kEpi>(p, e, sp.row);
      if (row >= 0 && k < p.k) x = LoadGlobal16(p.w + row * (p.k / 2) + k / 2);
    }
    v.piece[i] = x;
  }
  v.scale = 0u;
  if (t < S::kScales) {
    const int64_t row = CtaWeightRow<kEpi>(p, e, t / 2);
    const int64_t k = k0 + (t % 2) * 32;
    if (row >= 0 && k < p.k) v.scale = p.ws[row * (p.k / 32) + k / 32];
  }
}

template <int kEpi>
__device__ __forceinline__ void StoreSlab(uint8_t* buf, const SlabLoads<kEpi>& v) {
  using S = Slab<kEpi>;
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < S::kLoads; ++i) {
    const SlabPiece sp = SlabPieceAt(S::kSwiglu, t + kThreads * i);
    if (sp.kind != kNone) *reinterpret_cast<U32x4*>(buf + sp.lds) = v.piece[i];
  }
  if (t < S::kScales) buf[SlabScaleLds(S::kSwiglu, t)] = static_cast<uint8_t>(v.scale);
}

// B operand of the slab's weight row r at k = 16 ks + 4 lq .. + 3, from LDS.
template <int kEpi>
__device__ __forceinline__ Bf16x4 WeightOperand(const uint8_t* buf, int r, int ks, int lq) {
  using S = Slab<kEpi>;
  const int kk = ks * 16 + lq * 4;
  const uint32_t two = *reinterpret_cast<const uint16_t*>(buf + S::kWOffset + r * kWRowBytes + kk / 2);
  return DecodeFp4x4(two, E8m0(buf[S::kSOffset + r * 2 + kk / 32]));
}

template <int kEpi>
__device__ __forceinline__ void GemmCta(const GemmParams& p) {
  using S = Slab<kEpi>;
  __shared__ __attribute__((aligned(16))) uint8_t lds[LdsBytes(S::kSwiglu)];
  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int lane = threadIdx.x & 63, wave = threadIdx.x >> 6;
  const int lr = lane & 15, lq = lane >> 4;
  const int64_t e = p.tile_expert[tile];
  const int col = blockIdx.x * kCtaCols + wave * 16 + lr;  // this lane's B column (output column)
  const bool col_ok = col < p.out_cols;

  // The activation row each of this thread's A pieces reads (null for a
  // padding pair): pair row pc / 8 of the tile.
  const uint16_t* a_rows[S::kLoads];
#pragma unroll
  for (int i = 0; i < S::kLoads; ++i) {
    const SlabPiece sp = SlabPieceAt(S::kSwiglu, threadIdx.x + kThreads * i);
    const int pair = sp.kind == kActivation ? p.sorted[tile * kTileRows + sp.row] : -1;
    a_rows[i] = pair >= 0 ? p.a + static_cast<int64_t>(pair / p.a_row_div) * p.k : nullptr;
  }

  F32x4 acc = F32x4{0.f, 0.f, 0.f, 0.f}, acc_up = F32x4{0.f, 0.f, 0.f, 0.f};
  const int64_t slabs = (p.k + kKSlab - 1) / kKSlab;
  SlabLoads<kEpi> next;
  LoadSlab<kEpi>(p, a_rows, e, 0, next);
  StoreSlab<kEpi>(lds, next);
  __syncthreads();
  for (int64_t s = 0; s < slabs; ++s) {
    const bool more = s + 1 < slabs;
    const uint8_t* buf = lds + (s & 1) * S::kBytes;
    if (more) LoadSlab<kEpi>(p, a_rows, e, (s + 1) * kKSlab, next);
    const int steps = p.k - s * kKSlab >= kKSlab ? kKSlab / 16 : kKMultiple / 16;
#pragma unroll
    for (int ks = 0; ks < kKSlab / 16; ++ks) {
      if (ks >= steps) break;
      // A operand: pair row lr of the tile at k = 16 ks + 4 lq.
      const Bf16x4 av = *reinterpret_cast<const Bf16x4*>(buf + lr * kARowBytes + (ks * 16 + lq * 4) * 2);
      acc = Mfma(av, WeightOperand<kEpi>(buf, wave * 16 + lr, ks, lq), acc);
      if (kEpi == kEpiSwiglu) acc_up = Mfma(av, WeightOperand<kEpi>(buf, kCtaCols + wave * 16 + lr, ks, lq), acc_up);
    }
    if (more) StoreSlab<kEpi>(lds + ((s + 1) & 1) * S::kBytes, next);
    __syncthreads();
  }

  // This lane holds rows 4 lq + i of the tile, column `col`.
  if (col_ok) StorePairOutputs<kEpi>(p, tile, lq, col, acc, acc_up);
}

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

// C names: the host finds them with hipModuleGetFunction. Three waves per
// SIMD is the occupancy the comment above states.
#define KS_MOE_GFX942_GEMM(NAME, EPI)                                                                  \
  extern "C" __global__ void __attribute__((amdgpu_flat_work_group_size(256, 256),                     \
                                            amdgpu_waves_per_eu(kernelserve::gpu::moe::gfx942::kWavesPerSimd))) \
  NAME(const kernelserve::gpu::moe::GemmParams p) {                                                    \
    kernelserve::gpu::moe::gfx942::GemmCta<EPI>(p);                                                    \
  }
KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942Bf16, kernelserve::gpu::moe::kEpiBf16)
KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942Swiglu, kernelserve::gpu::moe::kEpiSwiglu)
KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942F32, kernelserve::gpu::moe::kEpiF32)
#undef KS_MOE_GFX942_GEMM
