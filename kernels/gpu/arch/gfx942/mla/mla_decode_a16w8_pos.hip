// MLA absorbed decode a16w8 for gfx942 (MI300X), the position CTA: the
// seed's one-position kernel (64-token tiles, four producer and four
// consumer waves), which PlanDecode takes below q_len 4 or where the window
// CTA (mla_decode_a16w8.hip) would fill more than half the CUs by its batch
// alone (ChooseCta). bf16 Q against e4m3fnuz KV, every product on
// v_mfma_f32_16x16x16bf16_1k; one fused 576-wide KV row is K (all 576) and V
// (its first 512), read from memory once, at fp8 width.
//
// One CTA = (KV split, group of 16 query rows, request): the rows are the
// request's flattened (draft position, head) pairs, so at H = 16 a CTA is
// one draft position, as the seed's; at H < 16 it packs the heads of
// consecutive positions (each row keeps its own causal window). Its
// partials go where the window CTA's do (kernels/gpu/mla's 64-row groups),
// so the merge (mla_merge.cu) and the workspace are shared.
//
// Eight waves in two roles, separate branches on a wave-uniform value that
// pass the same barriers in the same order. Waves 4..7 produce: each tile of 64 tokens (36864 bytes) is
// loaded from global memory into their registers (nine 16-byte pieces per
// thread) while the consumers compute on the tile before it in LDS, then
// stored to LDS between two barriers: the producers' registers are the
// second buffer, so one tile of LDS suffices. Waves 0..3 consume: wave c
// takes tokens [16 c, +16) of every tile for all 16 rows and all 512
// output columns, with its own online softmax (the flash-decoding split
// inside the CTA): S^T = K Q^T (36 MFMAs; transposed so the result is the A
// operand of O += P V and P never passes through LDS), then O += P V (32
// MFMAs). Every token's K and V codes are unpacked once, by the one wave
// that owns the token. At the end the four consumers' (m, l, O) are
// combined through LDS, a quarter of the columns per round, each round's
// quarter finished by one wave.
//
// Occupancy (checked on the code object by mla_decode_pos_gfx942_hip_test):
// O is 32 MFMA tiles x 4 fp32 = 128 registers per lane, so Q (72 more in
// registers, and a spill) is staged in LDS once and each consumer reads its
// B operands from there; VGPR + AGPR <= 256 per lane, two waves per SIMD,
// one eight-wave CTA per CU (the window CTA's occupancy, so the split plan
// is the same). LDS: the 64-token tile (rows padded to 592 bytes), the
// consumers' row statistics and the CTA's 16 query rows (padded to 1168
// bytes), 57088 bytes. No scratch.
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
namespace {

constexpr int kProducerThreads = kThreads - kPosConsumers * 64;
constexpr int kPieces = kPosTileTok * kD / 16;                 // 2304 16-byte pieces per tile
constexpr int kPiecesPerProducer = kPieces / kProducerThreads;  // 9
static_assert(kPieces % kProducerThreads == 0, "whole pieces per producer thread");
constexpr int kNTiles = kDL / 16;                               // 32 MFMA column tiles of O per wave
constexpr int kQuarterTiles = kNTiles / kPosConsumers;          // 8: one combine round's columns
static_assert(kPosRows == 16 && kPosTileTok == 16 * kPosConsumers, "a 16-token MFMA step per consumer");
static_assert((kPosConsumers - 1) * kPosRows * (kDL / kPosConsumers) * 4 <= kPosTileBytes,
              "a combine round's partials fit the tile's LDS");

struct TileRegs {
  uint4 v[kPiecesPerProducer];
};

// The CTA's 16 query rows (latent, then rope) into LDS, 16 bytes per piece:
// 72 pieces per row; zeros for rows that are not live.
constexpr int kQPiecesPerRow = kD * 2 / 16;
__device__ __forceinline__ void StoreQ(const KParams& p, const CtaWork& w, uint8_t* q) {
  for (int pc = threadIdx.x; pc < kPosRows * kQPiecesPerRow; pc += kThreads) {
    const int row = pc / kQPiecesPerRow, c = pc % kQPiecesPerRow;
    const int r = w.row0 + row;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row < w.nrows && r / p.heads < w.ql) {
      const int64_t rr = static_cast<int64_t>(w.b) * p.rows + r;
      const uint16_t* src = c < kDL / 8 ? p.q_lat + rr * kDL + c * 8 : p.q_pe + rr * kDR + (c - kDL / 8) * 8;
      v = *reinterpret_cast<const uint4*>(src);
    }
    *reinterpret_cast<uint4*>(q + row * kPosQRowBytes + c * 16) = v;
  }
}

// Producer thread pt's pieces of the tile at j0: piece pt + kProducerThreads i
// is 16 bytes of token piece / 36 (zeros past the split).
__device__ __forceinline__ void LoadTile(const KParams& p, const CtaWork& w, int64_t j0, int pt, TileRegs& r) {
#pragma unroll
  for (int i = 0; i < kPiecesPerProducer; ++i) {
    const int pc = pt + i * kProducerThreads;
    const int64_t slot = SlotOf(p, w, j0 + pc / (kD / 16));
    r.v[i] = slot >= 0 ? *reinterpret_cast<const uint4*>(p.kv + slot * kD + (pc % (kD / 16)) * 16)
                       : make_uint4(0u, 0u, 0u, 0u);
  }
}

__device__ __forceinline__ void StoreTile(uint8_t* tile, int pt, const TileRegs& r) {
#pragma unroll
  for (int i = 0; i < kPiecesPerProducer; ++i) {
    const int pc = pt + i * kProducerThreads;
    *reinterpret_cast<uint4*>(tile + (pc / (kD / 16)) * kRowBytes + (pc % (kD / 16)) * 16) = r.v[i];
  }
}

// The producers (waves 4..7): every tile of the split through their
// registers into LDS, and the barriers of the consumers' combine. The two
// roles are separate branches on a wave-uniform value, each passing the
// same barriers in the same order, so the register allocator sees the
// producers' tile and the consumers' O apart.
constexpr int kCombineRounds = kPosConsumers;
__device__ __forceinline__ void Produce(const KParams& p, const CtaWork& w, uint8_t* lds) {
  const int pt = threadIdx.x - kPosConsumers * 64;
  TileRegs next;
  if (w.n_tiles > 0) {
    LoadTile(p, w, w.tok_begin, pt, next);
    StoreTile(lds, pt, next);
  }
  __syncthreads();
  for (int it = 0; it < w.n_tiles; ++it) {
    const bool more = it + 1 < w.n_tiles;
    if (more) LoadTile(p, w, w.tok_begin + static_cast<int64_t>(it + 1) * kPosTileTok, pt, next);
    __syncthreads();  // the consumers are done with the tile
    if (more) StoreTile(lds, pt, next);
    __syncthreads();  // the next tile is in LDS
  }
  __syncthreads();  // the row statistics
  for (int qt = 0; qt < kCombineRounds; ++qt) {
    __syncthreads();
    __syncthreads();
  }
}

// Consumer `wave` (0..3): tokens [16 wave, +16) of every tile for the CTA's
// 16 rows, then the combine with the other consumers and the output.
__device__ __forceinline__ void Consume(const KParams& p, const CtaWork& w, int wave, uint8_t* lds) {
  const int lane = threadIdx.x & 63, lr = lane & 15, lq = lane >> 4;
  float* stats = reinterpret_cast<float*>(lds + kPosTileBytes);  // [consumer][row] m, then l
  const int r = w.row0 + lr;  // this lane's query row (the B operand of S^T)
  const int t = r / p.heads;
  const bool live = lr < w.nrows && t < w.ql;
  const int64_t lim = live ? w.seq - w.ql + t : -1;  // last token the row sees; -1: masked
  const uint8_t* q_row = lds + kPosTileBytes + kPosStatsBytes + lr * kPosQRowBytes + lq * 8;  // d = 16 ks + 4 lq

  F32x4 acc[kNTiles];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) acc[n] = F32x4{0.f, 0.f, 0.f, 0.f};
  float m = -INFINITY, l = 0.f;
  __syncthreads();
  const uint8_t* rows = lds + wave * 16 * kRowBytes;  // this consumer's 16 tokens of the tile
  for (int it = 0; it < w.n_tiles; ++it) {
    const int64_t j0 = w.tok_begin + static_cast<int64_t>(it) * kPosTileTok + wave * 16;
    F32x4 s = F32x4{0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const uint32_t k = *reinterpret_cast<const uint32_t*>(rows + lr * kRowBytes + ks * 16 + lq * 4);
      s = Mfma(Fp8x4ToBf16x4(k), *reinterpret_cast<const Bf16x4*>(q_row + ks * 32), s);
    }
    float alpha;
    const Bf16x4 pa = SoftmaxStep(s, j0, lq, w.tok_end, lim, p.sl2, m, l, alpha);
    float a_row[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a_row[i] = LaneValue(alpha, lq * 4 + i);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[n][i] *= a_row[i];
      acc[n] = Mfma(pa, VOperand(rows, lq, n * 16 + lr), acc[n]);
    }
    __syncthreads();
    __syncthreads();
  }

  // The consumers' row statistics, then each one's O rescaled to the CTA's max.
  if (lq == 0) {
    stats[wave * kPosRows + lr] = m;
    stats[(kPosConsumers + wave) * kPosRows + lr] = l;
  }
  __syncthreads();
  float m_cta[4], l_cta[4];  // of rows 4 lq + i, this lane's O rows
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = lq * 4 + i;
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < kPosConsumers; ++c) mx = fmaxf(mx, stats[c * kPosRows + row]);
    const float m_use = mx == -INFINITY ? 0.f : mx;
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < kPosConsumers; ++c) {
      sum += Exp2Approx(stats[c * kPosRows + row] - m_use) * stats[(kPosConsumers + c) * kPosRows + row];
    }
    m_cta[i] = mx;
    l_cta[i] = sum;
    const float own = Exp2Approx(stats[wave * kPosRows + row] - m_use);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) acc[n][i] *= own;
  }

  // Round qt: the other consumers leave their quarter qt of O in LDS (over
  // the tile), consumer qt adds them to its own and writes the quarter.
  float* part = reinterpret_cast<float*>(lds);  // [slot][row][128 columns]
#pragma unroll
  for (int qt = 0; qt < kCombineRounds; ++qt) {
    if (wave != qt) {
      const int slot = wave < qt ? wave : wave - 1;
#pragma unroll
      for (int n = 0; n < kQuarterTiles; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          part[(slot * kPosRows + lq * 4 + i) * (kDL / kPosConsumers) + n * 16 + lr] = acc[qt * kQuarterTiles + n][i];
        }
      }
    }
    __syncthreads();
    if (wave == qt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int orow = lq * 4 + i;
        const int rr = w.row0 + orow;
        if (orow >= w.nrows) continue;
        float o[kQuarterTiles];
#pragma unroll
        for (int n = 0; n < kQuarterTiles; ++n) {
          o[n] = acc[qt * kQuarterTiles + n][i];
#pragma unroll
          for (int slot = 0; slot < kPosConsumers - 1; ++slot) {
            o[n] += part[(slot * kPosRows + orow) * (kDL / kPosConsumers) + n * 16 + lr];
          }
        }
        const int col0 = qt * (kDL / kPosConsumers) + lr;
        if (p.splits == 1) {
          uint16_t* out = p.out + (static_cast<int64_t>(w.b) * p.rows + rr) * kDL + col0;
          const bool row_live = rr / p.heads < w.ql;
          const float inv = p.out_scale / l_cta[i];
#pragma unroll
          for (int n = 0; n < kQuarterTiles; ++n) {
            out[n * 16] = row_live ? static_cast<uint16_t>(FloatToBf16Bits(o[n] * inv, p.rounding)) : 0;
          }
        } else {
          // The partial of row rr in the 64-row groups the merge reads.
          const int64_t pi = ((static_cast<int64_t>(w.b) * p.row_groups + rr / kRows) * p.splits + w.split) * kRows +
                             rr % kRows;
          float* out = p.part_o + pi * kDL + col0;
#pragma unroll
          for (int n = 0; n < kQuarterTiles; ++n) out[n * 16] = o[n];
          if (qt == 0 && lr == 0) {
            p.part_ml[pi * 2] = m_cta[i];
            p.part_ml[pi * 2 + 1] = l_cta[i];
          }
        }
      }
    }
    __syncthreads();
  }
}

__device__ __forceinline__ void DecodePosCta(const KParams& p) {
  __shared__ __attribute__((aligned(16))) uint8_t lds[kPosLdsBytes];
  CtaWork w = GetCtaWork(p);
  w.row0 = blockIdx.y * kPosRows;
  w.nrows = min(kPosRows, p.rows - w.row0);
  StoreQ(p, w, lds + kPosTileBytes + kPosStatsBytes);  // read after the first barrier
  // Wave-uniform (a scalar), so each role is a scalar branch.
  const int wave = __builtin_amdgcn_readfirstlane(static_cast<int>(threadIdx.x >> 6));
  if (wave < kPosConsumers) {
    Consume(p, w, wave, lds);
  } else {
    Produce(p, w, lds);
  }
}

}  // namespace
}  // namespace gfx942
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

// A C name: the host finds it in the code object with hipModuleGetFunction.
// Two waves per SIMD is the occupancy the register budget above is built for.
extern "C" __global__ void __attribute__((amdgpu_flat_work_group_size(kernelserve::gpu::mla::gfx942::kThreads,
                                                                      kernelserve::gpu::mla::gfx942::kThreads),
                                          amdgpu_waves_per_eu(2)))
KsMlaDecodeA16w8PosGfx942(const kernelserve::gpu::mla::KParams p) {
  kernelserve::gpu::mla::gfx942::DecodePosCta(p);
}
