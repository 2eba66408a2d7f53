// The warp-specialized wgmma gate/up GEMM of the MXFP4 MoE (sm_90a) on a
// persistent grid; included by its instantiation files
// wgmma_gate_up_ws_<tiling>.cu. The tilings, operand layouts and epilogue
// are GateUpWgmmaKernel's (wgmma_gate_up.cuh): the same wgmma over the same
// operands in the same k order, so the same output bits.
//
// Roles, kConsumers + 1 warpgroups, no CTA barrier after the split:
//   warpgroup 0, the producer (setmaxnreg down to kProducerRegs): each of
//     its 128 threads cp.asyncs its share of k-tile g + kLookahead (the
//     gathered A rows into ring stage g % kStages, the raw MXFP4 bytes and
//     E8M0 scales into a private raw ring), then dequantizes the raw bytes
//     of k-tile g that it copied itself into the stage's bf16 B tile. No
//     other thread reads a thread's raw bytes, so its own cp.async.wait_group
//     is all the synchronization they need;
//   warpgroups 1..kConsumers (setmaxnreg up): 64 tile rows each; they wait
//     on the stage's full barrier, issue its 4 wgmma k16 steps, release the
//     previous stage once its wgmma retired, and store the tile as
//     GateUpWgmmaKernel does (StoreTileRows).
//
// Barriers, two per stage:
//   full[s]:  kProducerThreads arrivals per phase: every producer thread
//             once its A copies of the k-tile landed and its dequantized B
//             chunks are written, after fence.proxy.async (generic-proxy
//             writes, then the tensor cores' async-proxy reads);
//   empty[s]: kConsumers * 4 arrivals: lane 0 of each consumer warp once
//             wgmma.wait_group retired the k-tile's wgmma.
// The CTA's k-tiles are numbered g = 0, 1, 2, ... across its work items:
// k-tile g uses stage g % kStages for the n-th time, n = g / kStages. The
// consumers wait on full[s] for parity n & 1; the producer waits on
// empty[s] for parity (n & 1) ^ 1, which a fresh barrier (phase 0) passes
// at once: the first pass over the ring needs no release.
//
// Why it cannot deadlock: the producer fills k-tile g + kLookahead
// (kLookahead <= kStages - 1) only after the release of k-tile
// g + kLookahead - kStages <= g - 1, which the consumers give right after
// they issued k-tile g, whose full barrier the producer arrived on just
// before. A protocol error still cannot hang the process: MbarWait traps
// after kMbarWatchdogNs (pipeline.cuh).
//
// Work: a persistent grid of min(SMs, tiles x column tiles) CTAs; CTA b
// takes work items w = b, b + gridDim.x, ... < num_tiles x col_tiles, row
// tile w / col_tiles, column tile w % col_tiles: the column tiles of one row
// tile run on neighbouring CTAs at the same time, so its gathered A rows
// come from L2 after the first. Tiles in routing order (by expert), no
// largest-first ordering.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_WGMMA_GATE_UP_WS_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_WGMMA_GATE_UP_WS_CUH_

#include <algorithm>
#include <cstdint>

#include "kernels/gpu/arch/sm90/moe/wgmma_gate_up.cuh"
#include "kernels/gpu/arch/sm90/pipeline.cuh"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace wgmma_ws {

using sm80::CpAsync16;
using sm80::CpAsync4;
using sm80::CpAsyncCommit;
using sm80::SmemAddr;
using wgmma::kWgBK;
using wgmma::OperandDesc;
using wgmma::SwizzledOffset;

// cp.async.wait_group with a compiler barrier: sm80::CpAsyncWait has no
// memory clobber, and the producer reads the landed raw bytes with plain
// shared loads that must not move above the wait.
template <int N>
__device__ __forceinline__ void CpAsyncWaitThenRead() {
  sm80::CpAsyncWait<N>();
  asm volatile("" ::: "memory");
}

template <int kConsumers, int kBNw>
struct WsCfg {
  static constexpr int kBM = 64 * kConsumers;
  static constexpr int kProducerThreads = 128;
  static constexpr int kThreads = kProducerThreads + 128 * kConsumers;
  static constexpr int kAcc = kBNw / 2;
  static constexpr int kStages = 4;
  // A stage: A [kBM][64] bf16 then B [kBNw][64] bf16, both swizzled (a
  // multiple of 1024 bytes each, so every tile stays 1024-aligned).
  static constexpr int kStageA = kBM * kWgBK * 2;
  static constexpr int kStageB = kBNw * kWgBK * 2;
  static constexpr int kStageBytes = kStageA + kStageB;
  // A producer thread copies chunk tid % 8 of tile rows tid / 8 + 16 i.
  static constexpr int kARowsPerThread = kBM / 16;
  // Raw units: (weight row u / 2, 32-element half u % 2) of a k-tile: 16
  // raw bytes and the row's 4-byte scale window of the 128-wide K range that
  // holds the k-tile (the unit's scale is byte 2 (k-tile & 1) + half).
  // Thread tid owns units tid + 128 i: a warp copies 16 whole 32-byte rows.
  static constexpr int kUnits = 2 * kBNw;
  static constexpr int kUnitsPerThread = kUnits / kProducerThreads;
  static constexpr int kRawSlotBytes = kUnits * (16 + 4);
  static constexpr int kBarrierBytes = 2 * 8 * kStages;
  static constexpr int SmemBytes(int lookahead) {
    return 1024 + kStages * kStageBytes + (lookahead + 1) * kRawSlotBytes + kBarrierBytes;  // + base alignment
  }
  // k-tiles in flight ahead of the one being dequantized: kStages - 1 where
  // the raw ring fits (192 x 192), else kStages - 2 (128 x 256). The raw
  // ring holds kLookahead + 1 slots: k-tile g + kLookahead is copied (after
  // k-tile g was dequantized) into the slot that k-tile g - 1 left.
  static constexpr int kLookahead = SmemBytes(kStages - 1) <= 227 * 1024 ? kStages - 1 : kStages - 2;
  static constexpr int kRawSlots = kLookahead + 1;
  static constexpr int kSmemBytes = SmemBytes(kLookahead);
  // Registers: the launch bound gives every thread 65536 / kThreads (168 or
  // 128); the producer hands all but kProducerRegs to the consumers (216 or
  // 144). ptxas holds the producer's code to the 64 (56 spilled: 12 A row
  // indices, the raw units' rows and the dequantization's temporaries).
  static constexpr int kEntryRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegs = 64;
  static constexpr int kConsumerRegs = (kEntryRegs * (kConsumers + 1) - kProducerRegs) / kConsumers / 8 * 8;

  static_assert(kStageA % 1024 == 0 && kStageB % 1024 == 0, "swizzled tiles stay 1024-aligned");
  static_assert(kUnits % kProducerThreads == 0, "raw units split evenly");
  static_assert(kBM % 16 == 0, "A rows split evenly");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
  static_assert(kProducerRegs + kConsumers * kConsumerRegs <= (kConsumers + 1) * kEntryRegs, "setmaxnreg budget");
  static_assert(kConsumerRegs >= kAcc + 40, "room for the accumulators");
};

// Shared-memory addresses of the ring, the raw ring and the barriers.
template <class C>
struct WsSmem {
  uint32_t base;  // 1024-aligned
  __device__ uint32_t A(int stage) const { return base + stage * C::kStageBytes; }
  __device__ uint32_t B(int stage) const { return A(stage) + C::kStageA; }
  __device__ uint32_t Raw(int slot) const { return base + C::kStages * C::kStageBytes + slot * C::kRawSlotBytes; }
  __device__ uint32_t Scales(int slot) const { return Raw(slot) + C::kUnits * 16; }
  __device__ uint32_t Full(int stage) const { return Raw(C::kRawSlots) + 8u * stage; }
  __device__ uint32_t Empty(int stage) const { return Full(C::kStages) + 8u * stage; }
};

template <int kConsumers, int kBNw, int kEpi>
__global__ void __launch_bounds__(WsCfg<kConsumers, kBNw>::kThreads, 1)
    GateUpWgmmaWsKernel(const GemmParams p, const int col_tiles) {
  using C = WsCfg<kConsumers, kBNw>;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  const uint32_t raw_base = SmemAddr(smem_raw);
  const WsSmem<C> sm{(raw_base + 1023u) & ~1023u};
  uint8_t* const smem = smem_raw + (sm.base - raw_base);  // generic pointer to sm.base

  const int n_work = *p.num_tiles * col_tiles;
  const int k_tiles = static_cast<int>(p.k / kWgBK);  // even: K % 128 == 0 (MoeUnsupported)
  // Work items of this CTA, and its k-tiles over all of them.
  const int n_items = static_cast<int>(blockIdx.x) < n_work ? (n_work - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int total_g = n_items * k_tiles;
  const int wg = sm90::WarpUniform(static_cast<int>(threadIdx.x) / 128);

  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      sm90::MbarInit(sm.Full(s), C::kProducerThreads);
      sm90::MbarInit(sm.Empty(s), 4 * kConsumers);
    }
    sm90::FenceMbarInit();
  }
  __syncthreads();

  if (wg == 0) {
    // ------------------------------------------------------------ producer
    sm90::SetMaxNRegDec<C::kProducerRegs>();
    const int tid = threadIdx.x;
    // The work item whose k-tiles are being issued: A rows (-1: padding)
    // and weight rows within the expert (-1: past the output) of this
    // thread's copies.
    int a_row[C::kARowsPerThread];
    int w_row[C::kUnitsPerThread];
    const uint8_t* w_e = p.w;
    const uint8_t* s_e = p.ws;
    int iss_g = 0;                     // next k-tile to issue
    int iss_kt = k_tiles;              // its k-tile within its work item (k_tiles: start the next item)
    int iss_w = static_cast<int>(blockIdx.x) - static_cast<int>(gridDim.x);  // its work item

    auto start_item = [&](int w) {
      const int tile = w / col_tiles, col_tile = w - tile * col_tiles;
      const int e = p.tile_expert[tile];
      w_e = p.w + static_cast<int64_t>(e) * p.nw * (p.k / 2);
      s_e = p.ws + static_cast<int64_t>(e) * p.nw * (p.k / 32);
#pragma unroll
      for (int i = 0; i < C::kARowsPerThread; ++i) {
        const int pair = p.sorted[tile * C::kBM + (tid >> 3) + 16 * i];
        a_row[i] = pair < 0 ? -1 : pair / p.a_row_div;
      }
#pragma unroll
      for (int i = 0; i < C::kUnitsPerThread; ++i) {
        const int j = (tid + i * C::kProducerThreads) >> 1;  // weight row of the tile
        int row;
        if (kEpi == kEpiSwiglu) {  // gate rows, then the matching up rows
          const int col = col_tile * (kBNw / 2) + j % (kBNw / 2);
          row = col >= p.inter ? -1 : (j >= kBNw / 2 ? p.inter + col : col);
        } else {
          const int64_t r = static_cast<int64_t>(col_tile) * kBNw + j;
          row = r >= p.nw ? -1 : static_cast<int>(r);
        }
        w_row[i] = row;
      }
    };

    // Copies k-tile iss_g (A into its stage once the consumers released it,
    // raw into its slot) as one cp.async group; past the last k-tile an
    // empty group, so that the wait counts stay uniform.
    auto issue = [&]() {
      if (iss_g < total_g) {
        if (iss_kt == k_tiles) {
          iss_kt = 0;
          iss_w += gridDim.x;
          start_item(iss_w);
        }
        const int stage = iss_g % C::kStages;
        sm90::MbarWaitSleep(sm.Empty(stage), ((iss_g / C::kStages) & 1) ^ 1);
        const int64_t k0 = static_cast<int64_t>(iss_kt) * kWgBK;
        const int cc = tid & 7;
#pragma unroll
        for (int i = 0; i < C::kARowsPerThread; ++i) {
          const int r = (tid >> 3) + 16 * i;
          const int64_t row = a_row[i];
          CpAsync16(sm.A(stage) + SwizzledOffset(r, cc), row >= 0 ? p.a + row * p.k + k0 + cc * 8 : p.a,
                    row >= 0 ? 16 : 0);
        }
        const int slot = iss_g % C::kRawSlots;
#pragma unroll
        for (int i = 0; i < C::kUnitsPerThread; ++i) {
          const int u = tid + i * C::kProducerThreads;
          const int64_t row = w_row[i];
          CpAsync16(sm.Raw(slot) + u * 16, row >= 0 ? w_e + row * (p.k / 2) + k0 / 2 + (u & 1) * 16 : w_e,
                    row >= 0 ? 16 : 0);
          CpAsync4(sm.Scales(slot) + u * 4, row >= 0 ? s_e + row * (p.k / 32) + (k0 / 128) * 4 : s_e,
                   row >= 0 ? 4 : 0);
        }
        ++iss_kt;
      }
      ++iss_g;
      CpAsyncCommit();
    };

    // k-tile g's raw units of this thread -> bf16 chunks of its stage's B
    // tile (exact; mma_sync_gemm.cuh): unit (row j, half h) is chunks 4h..4h+3
    // of row j, raw word q -> chunk 4h + q.
    auto dequant = [&](int g) {
      const int slot = g % C::kRawSlots;
      uint8_t* const b = smem + (sm.B(g % C::kStages) - sm.base);
      const uint8_t* const raw = smem + (sm.Raw(slot) - sm.base);
      const uint8_t* const scales = smem + (sm.Scales(slot) - sm.base);
#pragma unroll
      for (int i = 0; i < C::kUnitsPerThread; ++i) {
        const int u = tid + i * C::kProducerThreads;
        const int j = u >> 1, h = u & 1;
        const uint4 w = *reinterpret_cast<const uint4*>(raw + u * 16);
        // g & 1 is the k-tile's parity within its item: k_tiles is even.
        const uint32_t sc = scales[u * 4 + (g & 1) * 2 + h];
        const BlockScale bs = MakeBlockScale(sc);
        const uint32_t wq[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint32_t o[4];
#pragma unroll
          for (int bb = 0; bb < 4; ++bb) {
            uint32_t v = MulBf16x2(Fp4PairBits(wq[q] >> (8 * bb)), bs.f1);
            if (!bs.one) v = MulBf16x2(v, bs.f2);
            o[bb] = v;
          }
          *reinterpret_cast<uint4*>(b + SwizzledOffset(j, 4 * h + q)) = make_uint4(o[0], o[1], o[2], o[3]);
        }
      }
    };

#pragma unroll 1
    for (int i = 0; i < C::kLookahead; ++i) issue();
#pragma unroll 1
    for (int g = 0; g < total_g; ++g) {
      // Groups committed so far: k-tiles 0 .. g + kLookahead - 1, one each.
      CpAsyncWaitThenRead<C::kLookahead - 1>();  // k-tile g's landed
      dequant(g);
      sm90::FenceProxyAsync();
      sm90::MbarArrive(sm.Full(g % C::kStages));
      issue();  // k-tile g + kLookahead
    }
  } else {
    // ----------------------------------------------------------- consumers
    sm90::SetMaxNRegInc<C::kConsumerRegs>();
    const int cwg = wg - 1;  // tile rows [64 cwg, 64 cwg + 64)
    const bool release = (threadIdx.x & 31) == 0;
    const uint64_t da0 = OperandDesc(sm.A(0) + cwg * 64 * 128);
    const uint64_t db0 = OperandDesc(sm.B(0));
    constexpr uint64_t kStep = 32 >> 4;  // a k-step of 16 is 32 bytes along the swizzled row
    float acc[C::kAcc];
    int g = 0;
#pragma unroll 1
    for (int w = blockIdx.x; w < n_work; w += gridDim.x) {
      const int tile = w / col_tiles, col_tile = w - tile * col_tiles;
#pragma unroll
      for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.f;
#pragma unroll 1
      for (int kt = 0; kt < k_tiles; ++kt, ++g) {
        const int stage = g % C::kStages;
        sm90::MbarWait(sm.Full(stage), (g / C::kStages) & 1);
        // Issued by every consumer, also over padding rows (their A rows are
        // zeros; they are not stored).
        const uint64_t da = sm90::DescPlus(da0, stage * C::kStageBytes);
        const uint64_t db = sm90::DescPlus(db0, stage * C::kStageBytes);
        sm90::FenceOperand(acc);
        sm90::WgmmaFence();
#pragma unroll
        for (int ks = 0; ks < kWgBK / 16; ++ks) wgmma::WgmmaK16Bf16(acc, da + ks * kStep, db + ks * kStep);
        sm90::WgmmaCommit();
        sm90::FenceOperand(acc);
        sm90::WgmmaWait<1>();  // k-tile g - 1's wgmma retired: its stage is free
        sm90::MbarArriveIf(sm.Empty((g + C::kStages - 1) % C::kStages), release && kt > 0);
      }
      sm90::WgmmaWait<0>();
      sm90::FenceOperand(acc);
      sm90::MbarArriveIf(sm.Empty((g + C::kStages - 1) % C::kStages), release);  // the item's last k-tile
      if (cwg * 64 < p.tile_rows[tile]) {
        wgmma::StoreTileRows<C::kBM, kBNw, kEpi>(acc, p, tile, col_tile, cwg * 64, threadIdx.x);
      }
    }
  }
}

}  // namespace wgmma_ws

template <int kRows, int kEpi>
cudaError_t LaunchWgmmaWsGateUp(const GemmParams& p, int64_t max_tiles, cudaStream_t stream) {
  constexpr int kConsumers = wgmma::Tiling<kRows>::kWgs, kBNw = wgmma::Tiling<kRows>::kBNw;
  using C = wgmma_ws::WsCfg<kConsumers, kBNw>;
  const int64_t col_tiles = kEpi == kEpiSwiglu ? (p.inter + kBNw / 2 - 1) / (kBNw / 2) : (p.nw + kBNw - 1) / kBNw;
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  const int64_t grid = std::min<int64_t>(sms, max_tiles * col_tiles);
  if (grid <= 0) return cudaSuccess;
  auto* kernel = wgmma_ws::GateUpWgmmaWsKernel<kConsumers, kBNw, kEpi>;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  if (e != cudaSuccess) return e;
  kernel<<<static_cast<unsigned>(grid), C::kThreads, C::kSmemBytes, stream>>>(p, static_cast<int>(col_tiles));
  return cudaGetLastError();
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_WGMMA_GATE_UP_WS_CUH_
