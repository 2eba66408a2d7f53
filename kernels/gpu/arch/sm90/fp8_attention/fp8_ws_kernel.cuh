// FP8 (e4m3fn) attention forward on sm_90a, (d_qk, d_v) = (128 | 192, 128),
// warp-specialized in FlashAttention-3's structure (the bf16 kernel's,
// kernels/gpu/arch/sm90/attention/flash_fwd_ws_kernel.h). Numerics (DESIGN
// §4) are those of the lockstep wgmma e4m3 kernel it replaced (git:
// fp8_qgmma_kernel.cuh; its output equalled this one's byte for byte on the
// H200, bench/NOTES.md): V^T with keys permuted within each 32 so that the S
// accumulators are the A operand of P V, 8 rows of ones whose columns
// 128..135 sum the rounded P, the per-64-key block frame (p_block.cuh), each
// block's P V in a fresh accumulator folded into O in fp32 in block order
// (fp8_wgmma_tile.cuh).
//
// Three warpgroups per CTA of kRows = 128 query rows:
//   warpgroup 0, the producer (setmaxnreg down): one thread loads Q once and
//     the K and raw V tiles of 128 keys by TMA (128-byte swizzle, one e4m3
//     row of 128 = one swizzle row; at d_qk = 192 Q and K rows carry a
//     64-byte tail in a 64-byte-swizzled part of their own) into two-stage
//     rings on mbarriers; all 128
//     threads transpose each raw V tile into a V^T stage (fp8 wgmma takes B
//     K-major only; VTransposer, addresses fixed per thread), fence.proxy.async,
//     and arrive on the stage's full barrier; its waits suspend the warp
//     (MbarWaitSleep) rather than spin in the consumers' issue slots;
//   warpgroups 1 and 2, the consumers (setmaxnreg up): 64 query rows each.
//
// Consumer loop over key tiles n (each tile = two 64-key P blocks):
//   turn (named barrier): issue S(n) = Q K(n)^T, then P1 V(n-1) into ob
//     (block 1 of the previous tile); pass the turn, so that the other
//     warpgroup's softmax and folds run under these wgmmas (ping-pong);
//   wait S(n): release K(n); mask; both blocks' frames (one dependency
//     chain per tile), block 0's codes, all under P1 V(n-1);
//   wait P1 V(n-1): fold O = O 2^(R_prev - R) + ob, release V^T(n-1);
//   P0 V(n) into ob; block 1's codes under it; wait, fold.
// The folds run in block order: P0 V(n), then P1 V(n).
//
// CTAs are numbered longest first: with causal masking blockIdx.x = 0 is
// the last query block (the most keys), so the hardware's in-order CTA
// launch starts the long tiles first and the short ones fill the tail.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_WS_KERNEL_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_WS_KERNEL_CUH_

#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/fp8_attention/fp8_wgmma_tile.cuh"
#include "kernels/gpu/arch/sm90/fp8_attention/p_block.cuh"
#include "kernels/gpu/arch/sm90/pipeline.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace ws {

using namespace wgmma_tile;  // NOLINT: the shared tile pieces (fp8_wgmma_tile.cuh)
using sm80::SmemAddr;

constexpr int kThreads = 384;
constexpr int kConsumerWarps = 8;
// The launch bounds cap every thread at 65536 / 384 -> 168 registers;
// setmaxnreg moves the producer's share to the consumers: 40 + 2 * 232 =
// 3 * 168 (the transposing producer needs more than the bf16 kernel's 24).
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
constexpr uint32_t kTurnBarrier = 1;      // named barriers 1, 2: the consumers' turns
constexpr uint32_t kProducerBarrier = 3;  // the producer warpgroup's own
constexpr uint32_t kFixQBarrier = 4;      // 4, 5: each consumer warpgroup's own

constexpr uint32_t kVBytes = kTile * kD;
constexpr uint32_t kVtBytes = kVtRows * kTile;

// Q and K rows of d_qk e4m3 bytes: the first 128 in a 128-byte-swizzled
// part, for d_qk = 192 the 64-byte tail in a 64-byte-swizzled part after
// it (one swizzle row holds at most 128 bytes). S = Q K^T is 4 k32 steps
// over the first part and 2 over the tail; the registers do not change.
template <int kDqk>
struct QkRows {
  static_assert(kDqk == 128 || kDqk == 192, "d_qk is 128 or 192");
  static constexpr bool kHasTail = kDqk > 128;
  static constexpr uint32_t kQBytes = kRows * kDqk;
  static constexpr uint32_t kKBytes = kTile * kDqk;
  static constexpr uint32_t kQTail = kRows * 128;  // offset of the tail part
  static constexpr uint32_t kKTail = kTile * 128;
};

struct Fp8WsParams {
  Fp8KernelParams p;
  CUtensorMap map_q, map_k, map_v;
  CUtensorMap map_q_tail, map_k_tail;  // d_qk = 192: bytes 128..191 of each row
  // 1: the maps' dimensions are (d, head, seq, batch) (BSHD), 0: (d, seq,
  // head, batch) (BHSD).
  int heads_inner;
  int batch;
};

// Shared memory from a 1024-byte-aligned base: Q, kStages K, kStages raw V
// (all TMA-written, swizzled), kStages V^T (transposed, swizzled), barriers.
template <int kDqk, int kStages_>
struct Smem {
  using Qk = QkRows<kDqk>;
  static constexpr int kStages = kStages_;
  static constexpr uint32_t kOffK = Qk::kQBytes;
  static constexpr uint32_t kOffV = kOffK + kStages * Qk::kKBytes;
  static constexpr uint32_t kOffVt = kOffV + kStages * kVBytes;
  static constexpr uint32_t kOffBars = kOffVt + kStages * kVtBytes;
  static_assert(kVtBytes % 1024 == 0 && kOffVt % 1024 == 0 && Qk::kKBytes % 1024 == 0 && Qk::kQTail % 1024 == 0,
                "swizzled tiles must be 1024-byte aligned");
  static constexpr int kBarriers = 1 + 5 * kStages;
  static constexpr int kSmemBytes = 1024 + kOffBars + 8 * kBarriers;
  uint32_t base;
  __device__ uint32_t Q() const { return base; }
  __device__ uint32_t K(int s) const { return base + kOffK + s * Qk::kKBytes; }
  __device__ uint32_t V(int s) const { return base + kOffV + s * kVBytes; }
  __device__ uint32_t Vt(int s) const { return base + kOffVt + s * kVtBytes; }
  __device__ uint32_t Bar(int i) const { return base + kOffBars + 8u * i; }
  // q_full: 1 arrival + Q's bytes; k_full / v_full (raw V): 1 + the tile's
  // bytes; vt_full: the 128 producer threads after their transpose;
  // k_empty / vt_empty: one arrival per consumer warp.
  __device__ uint32_t QFull() const { return Bar(0); }
  __device__ uint32_t KFull(int s) const { return Bar(1 + s); }
  __device__ uint32_t KEmpty(int s) const { return Bar(1 + kStages + s); }
  __device__ uint32_t VFull(int s) const { return Bar(1 + 2 * kStages + s); }
  __device__ uint32_t VtFull(int s) const { return Bar(1 + 3 * kStages + s); }
  __device__ uint32_t VtEmpty(int s) const { return Bar(1 + 4 * kStages + s); }
  __device__ void InitBarriers() const {
    sm90::MbarInit(QFull(), 1);
    for (int s = 0; s < kStages; ++s) {
      sm90::MbarInit(KFull(s), 1);
      sm90::MbarInit(KEmpty(s), kConsumerWarps);
      sm90::MbarInit(VFull(s), 1);
      sm90::MbarInit(VtFull(s), 128);
      sm90::MbarInit(VtEmpty(s), kConsumerWarps);
    }
    sm90::FenceMbarInit();
  }
};

// A [128 rows][box bytes] tile from byte `col` of the rows at `row` of
// (head, batch); coordinates are (column, row, head, batch) or, heads inner,
// (column, head, row, batch).
__device__ __forceinline__ void LoadTile(const void* map, uint32_t dst, uint32_t bar, int col, int row, int head,
                                         int batch, bool heads_inner) {
  sm90::TmaLoad4d(dst, map, bar, col, heads_inner ? head : row, heads_inner ? row : head, batch);
}

// Q's or a K tile's rows: the 128-byte part and, at d_qk = 192, the tail.
template <class Qk>
__device__ __forceinline__ void LoadQkTile(const CUtensorMap* map, const CUtensorMap* map_tail, uint32_t dst,
                                           uint32_t tail_off, uint32_t bar, int row, int head, int batch,
                                           bool heads_inner) {
  LoadTile(map, dst, bar, 0, row, head, batch, heads_inner);
  if constexpr (Qk::kHasTail) LoadTile(map_tail, dst + tail_off, bar, 128, row, head, batch, heads_inner);
}

// The producer warpgroup (ptid 0..127) over n_tiles > 0 key tiles.
template <class Sm>
__device__ __forceinline__ void Produce(const Fp8WsParams& wp, const Sm& sm, uint8_t* smem, int ptid, int q0,
                                        int h, int hk, int b, int n_tiles) {
  const bool hi = wp.heads_inner != 0;
  if (ptid == 0) {
    sm90::PrefetchTensorMap(&wp.map_q);
    sm90::PrefetchTensorMap(&wp.map_k);
    sm90::PrefetchTensorMap(&wp.map_v);
    using Qk = typename Sm::Qk;
    if constexpr (Qk::kHasTail) {
      sm90::PrefetchTensorMap(&wp.map_q_tail);
      sm90::PrefetchTensorMap(&wp.map_k_tail);
    }
    sm90::MbarArriveExpectTx(sm.QFull(), Qk::kQBytes);
    LoadQkTile<Qk>(&wp.map_q, &wp.map_q_tail, sm.Q(), Qk::kQTail, sm.QFull(), q0, h, b, hi);
    sm90::MbarArriveExpectTx(sm.VFull(0), kVBytes);
    LoadTile(&wp.map_v, sm.V(0), sm.VFull(0), 0, 0, hk, b, hi);
  }
  const VTransposer transposer(ptid);
  for (int n = 0; n < n_tiles; ++n) {
    const int s = n % Sm::kStages;
    const uint32_t ph = (n / Sm::kStages) & 1;
    if (ptid == 0) {
      sm90::MbarWaitSleep(sm.KEmpty(s), ph ^ 1);
      sm90::MbarArriveExpectTx(sm.KFull(s), Sm::Qk::kKBytes);
      LoadQkTile<typename Sm::Qk>(&wp.map_k, &wp.map_k_tail, sm.K(s), Sm::Qk::kKTail, sm.KFull(s), n * kTile, hk, b,
                                  hi);
      if (n + 1 < n_tiles) {  // raw V stage (n+1)%2 was last read by tile n-1's transpose
        const int s1 = (n + 1) % Sm::kStages;
        sm90::MbarArriveExpectTx(sm.VFull(s1), kVBytes);
        LoadTile(&wp.map_v, sm.V(s1), sm.VFull(s1), 0, (n + 1) * kTile, hk, b, hi);
      }
    }
    sm90::MbarWaitSleep(sm.VFull(s), ph);
    sm90::MbarWaitSleep(sm.VtEmpty(s), ph ^ 1);
    transposer.Run(sm.V(s), sm.Vt(s));
    sm90::FenceProxyAsync();  // V^T (st.shared) is read by wgmma next
    sm90::MbarArrive(sm.VtFull(s));
    sm90::NamedBarrierSync(kProducerBarrier, 128);  // every read of raw V stage s done before its refill
  }
}

// The codes take the score scale as a positive factor (fp8_wgmma_tile.cuh).
// Descales that make it negative or zero are a caller's (the quantizer
// never makes them): for sc < 0 this warpgroup's Q codes are negated in
// shared memory (e4m3 is sign-magnitude: one XOR per byte, exact), so S
// changes sign and -sc is used; for sc = 0 they are zeroed, NaN codes kept,
// so every score is 0 (or NaN) as sc * s would be, with sc = 1. Q is read
// only by wgmma after this, hence the proxy fence before the warpgroup's
// barrier.
template <class Qk>
__device__ __forceinline__ void FixQForScale(uint8_t* smem, int cwg, bool zero, int wtid) {
  uint32_t* main = reinterpret_cast<uint32_t*>(smem + cwg * 64 * 128);
  uint32_t* tail = reinterpret_cast<uint32_t*>(smem + Qk::kQTail + cwg * 64 * 64);
  auto fix = [zero](uint32_t w) {
    if (!zero) return w ^ 0x80808080u;
    // Bytes whose low 7 bits are all ones (NaN) carry into bit 7; no byte carries further.
    const uint32_t nan = (((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) >> 7;
    return w & (nan * 0xFFu);
  };
  for (int i = wtid; i < 64 * 128 / 4; i += 128) main[i] = fix(main[i]);
  if constexpr (Qk::kHasTail) {
    for (int i = wtid; i < 64 * 64 / 4; i += 128) tail[i] = fix(tail[i]);
  }
  sm90::FenceProxyAsync();
  sm90::NamedBarrierSync(kFixQBarrier + cwg, 128);
}

// A consumer warpgroup (cwg 0, 1: query rows [64 cwg, 64 cwg + 64) of the
// CTA's 128) over the CTA's n_tiles key tiles, then its epilogue.
template <bool kCausal, int kMode, class Sm>
__device__ __forceinline__ void Consume(const Fp8KernelParams& p, const Sm& sm, uint8_t* smem, int cwg, int h,
                                        int hk, int b, int q0, int64_t diag, int n_tiles) {
  const int tid = threadIdx.x - 128, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, c = lane & 3;
  const bool release = lane == 0;

  const float q_ds = p.q_ds[p.q_ds_per_head ? b * p.heads_q + h : 0];
  const float k_ds = p.k_ds[p.k_ds_per_head ? b * p.heads_kv + hk : 0];
  const float sc_in = q_ds * k_ds * p.scale_log2;
  // A NaN or infinite scale (a caller's descale) makes every row NaN.
  const bool finite = fabsf(sc_in) <= 3.4028235e38f;
  const float sc = sc_in > 0.f && finite ? sc_in : (sc_in < 0.f && finite ? -sc_in : 1.f);
  const float v_ds = finite ? p.v_ds[p.v_ds_per_head ? b * p.heads_kv + hk : 0] : NAN;
  const float naive_shift = kMode == kNaive ? p.naive_ref_shift : 0.f;

  int64_t lim[2];  // last visible key of this thread's two rows
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int64_t i = q0 + warp * 16 + g + hf * 8;
    lim[hf] = kCausal ? min(static_cast<int64_t>(p.seq_kv) - 1, i + diag) : static_cast<int64_t>(p.seq_kv) - 1;
  }

  float o[kNt][4];  // o[0..15]: O; o[16]: the rounded-P row sum
  float ob[kNt][4];
  float s[kTile / 8][4];
  uint32_t pa[kTile / 32][4];
#pragma unroll
  for (int n = 0; n < kNt; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = ob[n][e] = 0.f;
  }
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
  }
#pragma unroll
  for (int k = 0; k < kTile / 32; ++k) {
#pragma unroll
    for (int e = 0; e < 4; ++e) pa[k][e] = 0u;
  }
  float factor_prev[2] = {1.f, 1.f};  // the frame change of the block whose P V is in ob
  float lsum[2] = {0.f, 0.f};
  int r_last[2] = {-(1 << 30), -(1 << 30)}, r_max[2] = {-(1 << 30), -(1 << 30)};
  float m_run[2] = {-INFINITY, -INFINITY};

  using Qk = typename Sm::Qk;
  const uint32_t q_addr = sm.Q() + cwg * 64 * 128, q_tail = sm.Q() + Qk::kQTail + cwg * 64 * 64;
  const uint64_t q_desc = sm90::MakeSmemDesc(q_addr, 16, 1024), k_desc = sm90::MakeSmemDesc(sm.K(0), 16, 1024);
  const uint64_t q_tail_desc = sm90::MakeSmemDesc64B(q_tail, 16, 512);
  const uint64_t k_tail_desc = sm90::MakeSmemDesc64B(sm.K(0) + Qk::kKTail, 16, 512);
  const uint64_t vt_desc = sm90::MakeSmemDesc(sm.Vt(0), 16, 1024);
  const uint32_t my_turn = kTurnBarrier + cwg, other_turn = kTurnBarrier + (cwg ^ 1);
  constexpr uint32_t kTurnThreads = 256;

  if (n_tiles > 0) {
    // Consumer 1 hands consumer 0 the first turn; each takes n_tiles + 1
    // turns, and consumer 1's last passes nothing, so every arrive meets a sync.
    sm90::NamedBarrierArriveIf(kTurnBarrier, kTurnThreads, cwg == 1);
    sm90::MbarWait(sm.QFull(), 0);
    if (finite && !(sc_in > 0.f)) FixQForScale<Qk>(smem, cwg, sc_in == 0.f, tid - 128 * cwg);
    // One key tile; the first has no P1 V(n-1). Two instantiations rather
    // than a run-time test: ptxas's wgmma pipeline analysis does not follow
    // a branch on n and serializes every wgmma (C7513).
    auto tile = [&](int n, auto first) {
      constexpr bool kFirst = decltype(first)::value;
      const int st = n % Sm::kStages, prev = (n + Sm::kStages - 1) % Sm::kStages;
      const uint32_t ph = (n / Sm::kStages) & 1;
      sm90::MbarWait(sm.KFull(st), ph);
      sm90::NamedBarrierSync(my_turn, kTurnThreads);
      sm90::FenceOperand(s);
      sm90::FenceOperand(ob);
      sm90::FenceOperand(pa);
      sm90::WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t da = sm90::DescPlus(q_desc, 32u * kk);
        const uint64_t db = sm90::DescPlus(k_desc, st * Qk::kKBytes + 32u * kk);
        sm90::WgmmaSS<128, sm90::E4m3>(s, da, db, kk > 0 ? 1 : 0);
      }
      if constexpr (Qk::kHasTail) {
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const uint64_t da = sm90::DescPlus(q_tail_desc, 32u * kk);
          const uint64_t db = sm90::DescPlus(k_tail_desc, st * Qk::kKBytes + 32u * kk);
          sm90::WgmmaSS<128, sm90::E4m3>(s, da, db, 1);
        }
      }
      sm90::WgmmaCommit();
      if constexpr (!kFirst) {
        IssuePv(ob, pa, sm90::DescPlus(vt_desc, prev * kVtBytes), 1);
        sm90::WgmmaCommit();
      }
      sm90::NamedBarrierArrive(other_turn, kTurnThreads);
      if constexpr (kFirst) {
        sm90::WgmmaWait<0>();
      } else {
        sm90::WgmmaWait<1>();  // S(n) retired; P1 V(n-1) may still run
      }
      sm90::FenceOperand(s);
      sm90::MbarArriveIf(sm.KEmpty(st), release);
      Mask<kCausal>(s, p, static_cast<int64_t>(n) * kTile, q0, diag, lim, c);

      // Both blocks' frames, then block 0's codes (pa[0], pa[1]) under
      // P1 V(n-1), which reads pa[2], pa[3].
      float factor[2][2], ref[2][2];
      TileFrames<kMode>(s, sc, naive_shift, m_run, r_last, r_max, factor, ref);
      BlockCodes<kMode>(s, 0, pa, ref[0], factor[0], lsum, sc);
      if constexpr (!kFirst) {
        sm90::WgmmaWait<0>();
        sm90::FenceOperand(ob);
        sm90::FenceOperand(pa);
        sm90::MbarArriveIf(sm.VtEmpty(prev), release);
        FoldBlock(o, ob, factor_prev);
      }
      sm90::MbarWait(sm.VtFull(st), ph);
      sm90::FenceOperand(ob);
      sm90::FenceOperand(pa);
      sm90::WgmmaFence();
      IssuePv(ob, pa, sm90::DescPlus(vt_desc, st * kVtBytes), 0);
      sm90::WgmmaCommit();
      BlockCodes<kMode>(s, 1, pa, ref[1], factor[1], lsum, sc);  // under P0 V(n)
      sm90::WgmmaWait<0>();
      sm90::FenceOperand(ob);
      sm90::FenceOperand(pa);
      FoldBlock(o, ob, factor[0]);
      factor_prev[0] = factor[1][0];
      factor_prev[1] = factor[1][1];
    };
    tile(0, std::true_type{});
    for (int n = 1; n < n_tiles; ++n) tile(n, std::false_type{});
    // The last tile's P1 V.
    const int last = (n_tiles - 1) % Sm::kStages;
    sm90::NamedBarrierSync(my_turn, kTurnThreads);
    sm90::FenceOperand(ob);
    sm90::FenceOperand(pa);
    sm90::WgmmaFence();
    IssuePv(ob, pa, sm90::DescPlus(vt_desc, last * kVtBytes), 1);
    sm90::WgmmaCommit();
    sm90::NamedBarrierArriveIf(other_turn, kTurnThreads, cwg == 0);
    sm90::WgmmaWait<0>();
    sm90::FenceOperand(ob);
    FoldBlock(o, ob, factor_prev);
  }

  StoreRows<kMode>(p, o, lsum, v_ds, q0 + warp * 16 + g, b, h, c);
}


template <int kDqk, bool kCausal, int kMode, int kStages>
__global__ void __launch_bounds__(kThreads, 1) Fp8AttnWsKernel(const __grid_constant__ Fp8WsParams wp) {
  using Sm = Smem<kDqk, kStages>;
  const Fp8KernelParams& p = wp.p;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const Sm sm{SmemAddr(smem)};

  const int n_qb = (p.seq_q + kRows - 1) / kRows;
  const int qb = kCausal ? n_qb - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int q0 = qb * kRows;
  const int64_t diag = static_cast<int64_t>(p.seq_kv) - p.seq_q;  // causal: row i sees keys <= i + diag
  int64_t kv_end = p.seq_kv;
  if (kCausal) kv_end = min(kv_end, static_cast<int64_t>(q0) + kRows - 1 + diag + 1);
  const int n_tiles = kv_end > 0 ? static_cast<int>((kv_end + kTile - 1) / kTile) : 0;
  const int wg = sm90::WarpUniform(static_cast<int>(threadIdx.x) / 128);

  if (threadIdx.x == 0) sm.InitBarriers();
  // The ones rows of both V^T stages: constant, written once (the swizzle
  // permutes equal bytes), published to the async proxy before the barrier.
  for (int i = threadIdx.x; i < kStages * 8 * kTile / 4; i += kThreads) {
    const int st = i / (8 * kTile / 4), w = i % (8 * kTile / 4);
    reinterpret_cast<uint32_t*>(smem + Sm::kOffVt + st * kVtBytes + kD * kTile)[w] = 0x38383838u;
  }
  sm90::FenceProxyAsync();
  __syncthreads();

  if (wg == 0) {
    sm90::SetMaxNRegDec<kProducerRegs>();
    if (n_tiles > 0) Produce(wp, sm, smem, threadIdx.x, q0, h, hk, b, n_tiles);
  } else {
    sm90::SetMaxNRegInc<kConsumerRegs>();
    Consume<kCausal, kMode>(p, sm, smem, wg - 1, h, hk, b, q0, diag, n_tiles);
  }
}

}  // namespace ws
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_WS_KERNEL_CUH_
