// MLA absorbed decode a16w8 for gfx942 (MI300X): bf16 Q against e4m3fnuz KV,
// every product on v_mfma_f32_16x16x16bf16_1k. One fused 576-wide KV row is
// both K (all 576) and V (its first 512), so each token's row is read from
// memory once, at fp8 width, into LDS, and serves both products from there.
//
// One CTA = (KV split, group of 64 query rows, request), the grid and the
// partials of kernels/gpu/mla/mla_decode_params.h, so the split plan, the
// launch arguments and the portable merge (mla_merge.cu, MlaPartials::kF32)
// are the ones the CUDA kernels use. Eight waves: wave w owns rows
// [16 (w % 4), +16) of the group and output columns [256 (w / 4), +256). The
// two waves of a row block both compute its scores (36 of the 52 MFMAs a wave
// issues per tile): the kernel reads KV at fp8 width and is bound by memory,
// and halving O is what keeps a wave within two waves per SIMD.
//
// Why S^T = K Q^T instead of S = Q K^T: the MFMA's result layout (lane l holds
// column l % 16, rows 4 (l / 16) + i) is then exactly its A-operand layout
// (lane l holds row l % 16, k = 4 (l / 16) + i) with tokens as k, so the
// probabilities go from the first product into the second (O = P V) without
// passing through LDS. The row statistics live on the lanes of row l % 16;
// the accumulator's rows are 4 (l / 16) + i, fetched by ds_bpermute.
//
// Occupancy (checked on the code object by mla_gfx942_hip_test): Q stays in
// registers (36 k-steps x 4 bf16 = 72 VGPRs), O is 16 MFMA tiles x 4 fp32 =
// 64; VGPR + AGPR <= 256 per lane, so two waves per SIMD (the 512-entry
// unified register file): one eight-wave CTA per CU. LDS is two 16-token
// tiles of fp8 rows padded to 592 bytes: 18944 bytes. No scratch.
//
// Tokens go through LDS 16 at a time, double-buffered: the global loads of
// tile t + 1 are issued before tile t's MFMAs and land in the other buffer
// after them, one barrier per tile. Tokens past the split's range are zero
// rows (0x80, not zero, is NaN in e4m3fnuz; a masked probability is 0 and
// 0 x NaN would still poison O).
#include <cstdint>

#include "kernels/gpu/arch/gfx942/mfma.h"
#include "kernels/gpu/arch/gfx942/mla/mla_gfx942_device.h"
#include "kernels/gpu/arch/gfx942/mla/mla_gfx942_launch.h"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/mla/mla_decode_params.h"
#include "kernels/gpu/mla/mla_tile_scheduler.cuh"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace gfx942 {

// kThreads, kTileTok (one MFMA k-step of P V), kRowBytes (16-byte aligned
// rows, at most 2-way LDS bank conflicts) and kLdsBytes come from
// mla_gfx942_launch.h, which the host's launch reads too.
constexpr int kTileBytes = kTileTok * kRowBytes;    // 9472
static_assert(kLdsBytes == 2 * kTileBytes, "double-buffered tiles");
constexpr int kChunks = kTileTok * kD / 16;         // 576 16-byte pieces per tile
constexpr int kChunksPerThread = (kChunks + kThreads - 1) / kThreads;  // 2
constexpr int kNTiles = kDL / 2 / 16;               // 16 MFMA column tiles of O per wave (half the columns)
static_assert(kRows == 4 * 16, "four wave rows of 16 query rows");

// This thread's share of tile `t`'s 16 KV rows, as 16-byte pieces (zeros for
// tokens past the split).
struct TileRegs {
  uint4 v[kChunksPerThread];
};

__device__ __forceinline__ void LoadTile(const KParams& p, const CtaWork& w, int64_t j0, TileRegs& r) {
#pragma unroll
  for (int c = 0; c < kChunksPerThread; ++c) {
    const int i = threadIdx.x + c * kThreads;
    r.v[c] = make_uint4(0u, 0u, 0u, 0u);
    if (i < kChunks) {
      const int64_t slot = SlotOf(p, w, j0 + i / (kD / 16));
      if (slot >= 0) r.v[c] = *reinterpret_cast<const uint4*>(p.kv + slot * kD + (i % (kD / 16)) * 16);
    }
  }
}

__device__ __forceinline__ void StoreTile(uint8_t* tile, const TileRegs& r) {
#pragma unroll
  for (int c = 0; c < kChunksPerThread; ++c) {
    const int i = threadIdx.x + c * kThreads;
    if (i < kChunks) {
      *reinterpret_cast<uint4*>(tile + (i / (kD / 16)) * kRowBytes + (i % (kD / 16)) * 16) = r.v[c];
    }
  }
}

__device__ __forceinline__ void DecodeCta(const KParams& p) {
  __shared__ __attribute__((aligned(16))) uint8_t lds[kLdsBytes];
  const CtaWork w = GetCtaWork(p);
  const int lane = threadIdx.x & 63, wave = (threadIdx.x >> 6) & 3, half = threadIdx.x >> 8;
  const int lr = lane & 15, lq = lane >> 4;  // MFMA lane coordinates

  // This lane's Q: row lr of the wave, d = 16 ks + 4 lq + i (the B operand of S^T).
  const int qrow = wave * 16 + lr;  // in the group
  const int r = w.row0 + qrow;      // in the request
  const int t = r / p.heads;        // draft position
  const bool live = qrow < w.nrows && t < w.ql;
  // Last token this row sees (end-aligned causal window); -1: masked.
  const int64_t lim = live ? w.seq - w.ql + t : -1;
  Bf16x4 q[kKSteps];
  LoadQ(p, w.b, r, live, lq, q);

  F32x4 acc[kNTiles];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) acc[n] = F32x4{0.f, 0.f, 0.f, 0.f};
  float m = -INFINITY, l = 0.f;  // row lr's running max (log2 units) and sum

  const int n_tiles =
      w.tok_end > w.tok_begin ? static_cast<int>((w.tok_end - w.tok_begin + kTileTok - 1) / kTileTok) : 0;
  TileRegs next;
  if (n_tiles > 0) {
    LoadTile(p, w, w.tok_begin, next);
    StoreTile(lds, next);
  }
  __syncthreads();
  for (int it = 0; it < n_tiles; ++it) {
    const int64_t j0 = w.tok_begin + static_cast<int64_t>(it) * kTileTok;
    const bool more = it + 1 < n_tiles;
    if (more) LoadTile(p, w, j0 + kTileTok, next);
    const uint8_t* tile = lds + (it & 1) * kTileBytes;

    // S^T[token 4 lq + i][row lr] over the 576 columns.
    F32x4 s = F32x4{0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const uint32_t k = *reinterpret_cast<const uint32_t*>(tile + lr * kRowBytes + ks * 16 + lq * 4);
      s = Mfma(Fp8x4ToBf16x4(k), q[ks], s);
    }

    // Online softmax in base 2 for row lr; this lane holds tokens 4 lq + i.
    float alpha;
    const Bf16x4 pa = SoftmaxStep(s, j0, lq, w.tok_end, lim, p.sl2, m, l, alpha);

    // O rows 4 lq + i take their row's alpha from a lane of that row.
    float a_row[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a_row[i] = LaneValue(alpha, lq * 4 + i);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[n][i] *= a_row[i];
      acc[n] = Mfma(pa, VOperand(tile, lq, half * (kDL / 2) + n * 16 + lr), acc[n]);
    }
    if (more) StoreTile(lds + ((it + 1) & 1) * kTileBytes, next);
    __syncthreads();
  }

  // Epilogue: this lane holds O[row 4 lq + i][column 16 n + lr].
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int orow = wave * 16 + lq * 4 + i;  // in the group
    const float m_r = LaneValue(m, lq * 4 + i);
    const float l_r = LaneValue(l, lq * 4 + i);
    if (orow >= w.nrows) continue;
    const int rr = w.row0 + orow;
    if (p.splits == 1) {
      uint16_t* o = p.out + (static_cast<int64_t>(w.b) * p.rows + rr) * kDL + half * (kDL / 2) + lr;
      const bool row_live = rr / p.heads < w.ql;
      const float inv = p.out_scale / l_r;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
        o[n * 16] = row_live ? static_cast<uint16_t>(FloatToBf16Bits(acc[n][i] * inv, p.rounding)) : 0;
      }
    } else {
      const int64_t pi =
          ((static_cast<int64_t>(w.b) * p.row_groups + w.group) * p.splits + w.split) * kRows + orow;
      float* o = p.part_o + pi * kDL + half * (kDL / 2) + lr;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) o[n * 16] = acc[n][i];
      if (lr == 0 && half == 0) {
        p.part_ml[pi * 2] = m_r;
        p.part_ml[pi * 2 + 1] = l_r;
      }
    }
  }
}

}  // namespace gfx942
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

// A C name: the host finds it in the code object with hipModuleGetFunction.
// Two waves per SIMD is the occupancy the register budget above is built for.
extern "C" __global__ void __attribute__((amdgpu_flat_work_group_size(kernelserve::gpu::mla::gfx942::kThreads, kernelserve::gpu::mla::gfx942::kThreads), amdgpu_waves_per_eu(2)))
KsMlaDecodeA16w8Gfx942(const kernelserve::gpu::mla::KParams p) {
  kernelserve::gpu::mla::gfx942::DecodeCta(p);
}
