// The RegA kernel: the KV tile never exists in shared memory as bf16. The
// fp8 rows land in shared memory by bulk copy (one bulk copy per row from a
// producer warpgroup, so any page size works), and each consumer thread
// converts exactly the bytes its wgmma A fragments need, in registers:
//   S^T = K Q^T   (M = 64 keys, N = kN query rows, K = 576: K from
//                  registers, Q from shared memory)
//   O^T = V^T P^T (M = 512 latent columns, 256 per warpgroup, N = kN query
//                  rows, K = keys: V from registers, P^T from shared memory)
// so the unpack writes nothing to shared memory and the tensor cores read one
// 2 KB operand per m64nNk16 instead of two. kN is 64, 32 for requests of at
// most 32 rows or 16 for at most 16 (RegACtaRows): the work per KV byte that
// does not depend on the rows (the loads and conversions of K and V) is the
// same, the rest is kN / 64 of it.
//
// Numerics (tests compare with the fp64 oracle): the products run on f16
// tensor cores. e4m3fn -> f16 is exact. Q is scaled by a power of two per CTA
// into f16's range (exact for every element within 2^31 of the CTA's largest
// |q|; smaller ones are rounded to f16's subnormal grid, below 2^-25 of the
// largest |q|); the factor is folded back into the score scale. V enters PV
// through an integer conversion that gives v * 2^-8 exactly for every finite
// code (2^8 is folded into the output scale); a NaN in a KV row already made
// that row's score NaN through the exact QK^T conversion, so the output is
// NaN as in the oracle. P is rounded to f16 (finer than bf16); the row sum
// counts the unrounded probabilities. The running maximum moves only when a
// block's maximum exceeds it by more than 2^8 (P <= 256, far inside f16), so
// most blocks rescale nothing. With several splits the partials are f16
// O / l (MlaPartials::kF16).
//
// CTA: 384 threads. Warpgroup 0 is the producer (bulk copies into a ring
// of kSlots 64-row slots); warpgroups 1 and 2 are consumers that own alternate 64-key
// blocks: the owner of block k computes S^T(k), the block's maxima and P(k);
// both consumers then run their half of PV(k). The owner of k+1 computes its
// S^T(k+1) on the tensor cores while the owner of k runs its softmax.
// Once per CTA: block 0's rows are in flight while the consumers load and
// convert Q; the epilogue is kept short (it runs from a cold instruction
// cache, so its instruction count is its time).
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/gpu/arch/sm90/mla/mla_rega_columns.cuh"
#include "kernels/gpu/arch/sm90/mla/mla_rega_convert.cuh"
#include "kernels/gpu/arch/sm90/mla/mla_sm90_common.cuh"
#include "kernels/gpu/arch/sm90/mla/mla_sm90_kernels.h"
#include "kernels/gpu/arch/sm90/pipeline.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/mla/mla_decode_params.h"
#include "kernels/gpu/mla/mla_tile_scheduler.cuh"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace {

using sm90::BulkCopyG2S;
using sm90::FenceMbarInit;
using sm90::MbarArrive;
using sm90::MbarArriveExpectTx;
using sm90::MbarInit;
using sm90::MbarWait;
using sm90::SetMaxNRegDec;
using sm90::SetMaxNRegInc;

// Named barriers: 1..2 the P hand-over by block parity, 3..4 each consumer
// warpgroup's maximum exchange, 5 all consumers, 6 Q loaded (all threads).
constexpr int kBarPReady0 = 1, kBarMax0 = 3, kBarConsumers = 5, kBarQLoaded = 6;
constexpr float kLazyMax = 8.f;  // base-2 headroom before the running max moves

constexpr int kRegAThreads = 384;
constexpr int kRowStr = 608;  // fp8 row stride in a slot: conflict-free A-fragment loads
constexpr int kSlotBytes = kTok * kRowStr;

// The shared-memory plan of a CTA of kN query rows (the wgmma N) with a ring
// of kSlots 64-row KV slots. Per-column tables hold kN columns.
template <int kN, int kSlots>
struct RegALayout {
  static constexpr int kPBytes = kTok * kN * 2;  // P^T of one block, f16, MN-major core matrices
  static constexpr int kOffKV = kN * kD * 2;      // Q (f16), core-tiled
  static constexpr int kOffP = kOffKV + kSlots * kSlotBytes;
  static constexpr int kOffMaxPart = kOffP + kSlots * kPBytes;  // [2][4 warps][kN]
  static constexpr int kOffM = kOffMaxPart + 2 * 4 * kN * 4;    // [kSlots][kN]
  static constexpr int kOffAlpha = kOffM + kSlots * kN * 4;     // [kSlots][kN]
  static constexpr int kOffLim = kOffAlpha + kSlots * kN * 4;   // [kN] int
  static constexpr int kOffRed = kOffLim + kN * 4;              // [8 warps][kN]
  static constexpr int kOffAlphaW = kOffRed + 8 * kN * 4;       // [8 warps][kN]: a warp's own alpha(k)
  static constexpr int kOffMoved = kOffAlphaW + 8 * kN * 4;     // [kSlots] int: block k moved the frame
  static constexpr int kOffBar = kOffMoved + (kSlots * 4 + 15) / 16 * 16;  // full[kSlots], empty[kSlots]
  static constexpr int kSmem = kOffBar + 2 * kSlots * 8;
  static_assert(kSmem <= 227 * 1024, "the RegA kernel must fit the sm_90 per-block limit");
  static_assert(kN * 4 >= 8 * 4, "sRed holds the 8 consumer warps' |q| maxima");
};

// kN = 64: the general CTA (three slots: Q's 72 KB leave no room for more).
// kN = 32 (16 < q_len * H <= 32): four slots in the 36 KB the smaller Q
// frees (a fifth does not fit): one or two blocks in flight.
// kN = 16 (q_len * H <= 16, one CTA per request and split): the same
// schedule with a quarter of the tensor work, the softmax and the
// accumulators, and five slots in the 54 KB that the smaller Q frees: the
// consumers hold two or three slots (blocks k-1, k, k+1), so two or three
// blocks (74-110 KB) stay in flight per SM, where a bytes-bound CTA needs
// ~17 B/clk x ~2000-3000 clk of loaded DRAM latency (three slots leave
// zero or one).
template <int kN, int kSlots>
__global__ void __launch_bounds__(kRegAThreads, 1) MlaDecodeRegAKernel(const KParams p) {
  using L = RegALayout<kN, kSlots>;
  constexpr int kPBytes = L::kPBytes, kOffKV = L::kOffKV, kOffP = L::kOffP, kOffMaxPart = L::kOffMaxPart;
  constexpr int kOffM = L::kOffM, kOffAlpha = L::kOffAlpha, kOffLim = L::kOffLim, kOffRed = L::kOffRed;
  constexpr int kOffAlphaW = L::kOffAlphaW, kOffMoved = L::kOffMoved, kOffBar = L::kOffBar;
  constexpr int kC = kN / 4;  // columns (query rows) per thread of an m64nN accumulator
  // Registers per thread (setmaxnreg): 128 x producer + 256 x consumer <=
  // 64 K. The 16- and 32-row consumers hold a quarter or a half of the
  // accumulators, so the producer's ring bookkeeping gets room without
  // spilling.
  constexpr int kProducerRegs = kN == kRows ? 24 : 40, kConsumerRegs = kN == kRows ? 240 : 232;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 65536, "setmaxnreg budget");
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* sQ = smem;
  uint8_t* sKV = smem + kOffKV;
  uint8_t* sP = smem + kOffP;
  float* sMaxPart = reinterpret_cast<float*>(smem + kOffMaxPart);
  float* sM = reinterpret_cast<float*>(smem + kOffM);
  float* sAlpha = reinterpret_cast<float*>(smem + kOffAlpha);
  int* sLim = reinterpret_cast<int*>(smem + kOffLim);
  float* sRed = reinterpret_cast<float*>(smem + kOffRed);
  float* sAlphaW = reinterpret_cast<float*>(smem + kOffAlphaW);
  int* sMoved = reinterpret_cast<int*>(smem + kOffMoved);
  const uint32_t bar_full = SmemAddr(smem + kOffBar);
  const uint32_t bar_empty = bar_full + kSlots * 8;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = WarpUniform(warp >> 2);
  const CtaWork w = GetCtaWork(p);
  const int nb = w.n_tiles;  // 64-key blocks of this split

  if (tid == 0) {
    for (int i = 0; i < kSlots; ++i) {
      MbarInit(bar_full + 8 * i, 4);  // one arrival per producer warp
      MbarInit(bar_empty + 8 * i, 8);  // one arrival per consumer warp
    }
    FenceMbarInit();
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------------------------------------------------- producer
    // One 576-byte bulk copy per row, issued by lane i < 16 of producer warp
    // w for row 16 w + i (a bulk copy is a warp-uniform instruction: the
    // lanes of a warp issue one after another, so the rows are spread over
    // four warps). Each warp's arrival on the slot's full barrier expects
    // its own rows' bytes. The next block's slot rows are loaded before the
    // wait, which hides their latency.
    SetMaxNRegDec<kProducerRegs>();
    const int i = warp * 16 + lane;
    auto row_of = [&](int k) -> int64_t {
      const int64_t j = w.tok_begin + static_cast<int64_t>(k) * kTok + i;
      return lane < 16 && k < nb && j < w.tok_end ? SlotOf(p, w, j) : -1;
    };
    const uint32_t dst0 = SmemAddr(sKV) + i * kRowStr;
    int64_t r = row_of(0);
    // Block 0, then Q: the rest of the stream waits until Q's loads have
    // landed (issued at the same time as every CTA's KV stream, they queue
    // behind it for microseconds); block 0's rows are in flight meanwhile.
    for (int k = 0; k < nb; ++k) {
      if (k == 1) NamedBarrierSync(kBarQLoaded, kRegAThreads);
      const int slot = k % kSlots;
      const int64_t rn = row_of(k + 1);
      MbarWait(bar_empty + 8 * slot, ((k / kSlots) & 1) ^ 1);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      const int nv = __popc(__ballot_sync(0xffffffffu, r >= 0));
      if (lane == 0) MbarArriveExpectTx(bar_full + 8 * slot, nv * kD);
      __syncwarp();
      if (r >= 0) BulkCopyG2S<kD>(dst0 + slot * kSlotBytes, p.kv + r * kD, bar_full + 8 * slot);
      r = rn;
    }
    if (nb <= 1) NamedBarrierSync(kBarQLoaded, kRegAThreads);
    return;
  }

  // ------------------------------------------------------------ consumers
  SetMaxNRegInc<kConsumerRegs>();
  const int cw = wg - 1;       // consumer warpgroup 0 or 1
  const int ctid = tid - 128;  // 0..255
  const int wq = warp & 3;     // warp in the warpgroup
  const int g = lane >> 2, c = lane & 3;

  // Q: one power-of-two scale per CTA into f16, stored permuted so that a
  // thread's 16-byte fp8 load covers its A fragments of four k-steps: logical
  // column 8 pp + 2 c + e of k-step ks = 4 G + t holds d = 64 G + 16 c + 4 t +
  // 2 pp + e.
  float sl2, inv_sl2;
  {
    const uint16_t* qlat = p.q_lat + (static_cast<int64_t>(w.b) * p.rows + w.row0) * kDL;
    const uint16_t* qpe = p.q_pe + (static_cast<int64_t>(w.b) * p.rows + w.row0) * kDR;
    uint4 raw[9][2];
    float amax = 0.f;
#pragma unroll
    for (int u = 0; u < 9; ++u) {
      // Unit (G = u, q, cc): a warp's stores cover 8 rows x 16 bytes of one
      // core matrix (no bank conflicts).
      const int q = ctid >> 2, G = u, cc = ctid & 3;
      const int d0 = 64 * G + 16 * cc;
      uint4 v0 = make_uint4(0, 0, 0, 0), v1 = v0;
      if (q < w.nrows && (kN == kRows || q < kN)) {
        const uint16_t* src = d0 < kDL ? qlat + static_cast<int64_t>(q) * kDL + d0
                                       : qpe + static_cast<int64_t>(q) * kDR + (d0 - kDL);
        v0 = reinterpret_cast<const uint4*>(src)[0];
        v1 = reinterpret_cast<const uint4*>(src)[1];
      }
      raw[u][0] = v0;
      raw[u][1] = v1;
      const uint32_t x[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        amax = fmaxf(amax, fabsf(Bf16LoToFloat(x[i])));
        amax = fmaxf(amax, fabsf(Bf16HiToFloat(x[i])));
      }
    }
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0) sRed[warp - 4] = amax;
    NamedBarrierArrive(kBarQLoaded, kRegAThreads);  // Q is in: the producer may start
    // The causal limit of each query row, relative to the split's first token.
    if (ctid < kN) {
      const int q = ctid;
      const int t = (w.row0 + q) / p.heads;
      const int64_t lim = (q < w.nrows && t < w.ql) ? w.seq - w.ql + t - w.tok_begin : -1;
      sLim[ColIndex<kN>(q)] = lim < 0 ? -1 : lim > (1 << 30) ? (1 << 30) : static_cast<int>(lim);
    }
    NamedBarrierSync(kBarConsumers, 256);
    amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, sRed[i]);
    // The largest |q| into [2^14, 2^15) (0, Inf or NaN: no scaling); the
    // factor stays a normal float.
    int qs = (amax > 0.f && amax <= 3.0e38f) ? 14 - (static_cast<int>((__float_as_uint(amax) >> 23) & 0xFF) - 127)
                                             : 0;
    qs = qs > 127 ? 127 : qs;
    const float qf = __int_as_float((qs + 127) << 23);
    // Threads of rows past the CTA's kN store nothing.
    if (kN == kRows || (ctid >> 2) < kN) {
#pragma unroll
      for (int u = 0; u < 9; ++u) {
        const int q = ctid >> 2, G = u, cc = ctid & 3;
        const uint32_t x[8] = {raw[u][0].x, raw[u][0].y, raw[u][0].z, raw[u][0].w,
                               raw[u][1].x, raw[u][1].y, raw[u][1].z, raw[u][1].w};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
#pragma unroll
          for (int pp = 0; pp < 2; ++pp) {
            const uint32_t v = x[2 * t + pp];
            const __half2 h = __floats2half2_rn(Bf16LoToFloat(v) * qf, Bf16HiToFloat(v) * qf);
            *reinterpret_cast<__half2*>(sQ + CoreTiled(q, 16 * (4 * G + t) + 8 * pp + 2 * cc)) = h;
          }
        }
      }
    }
    FenceProxyAsync();
    sl2 = ldexpf(p.sl2, -qs);
    inv_sl2 = 1.f / sl2;
    NamedBarrierSync(kBarConsumers, 256);  // sQ and sLim complete; sRed read
  }

  // Blocks from kt on need masks (past the chunk, or the causal window of
  // some query row); n_rel: the split's tokens.
  const int n_rel = static_cast<int>(w.tok_end - w.tok_begin);
  int kt = n_rel / kTok;
  {
    const int64_t x = w.seq - w.ql - w.tok_begin - (kTok - 1);
    const int64_t k2 = x < 0 ? 0 : x / kTok + 1;
    if (k2 < kt) kt = static_cast<int>(k2);
  }
  const int ql = w.ql;
  const uint64_t q_desc = MakeSmemDescInterleave(SmemAddr(sQ), 128, (kD / 8) * 128);
  const uint32_t p_addr = SmemAddr(sP);
  // Owner geometry: accumulator rows g and g + 8 of warp wq are the keys
  // 16 wq + 8 h + sigma(g) (sigma swaps bits 0 and 1, which spreads a quarter
  // warp's 16-byte loads over all banks), stored in P^T at its PV column.
  const int sg = (g & 4) | ((g & 1) << 1) | ((g >> 1) & 1);
  int key_r[2], pcol[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    key_r[h] = 16 * wq + 8 * h + sg;
    pcol[h] = (key_r[h] & ~7) | ((key_r[h] & 3) << 1) | ((key_r[h] >> 2) & 1);
  }
  // PV geometry: A row (g + 8 h) of M-tile j is latent column d0 + 2 j + h;
  // A column 2 c + e + 8 pp of k-step s is key 16 s + 8 pp + 4 e + c.
  const int d0 = 256 * cw + 64 * wq + 8 * g;

  float acc[4][kN / 2];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[j][i] = 0.f;
  }
  // Row sums: this warp's share (its 16 keys of every owned block), reduced
  // over the warp each block, so a lane keeps the two of columns 8 gl + 2 c + e.
  float l2[2] = {0.f, 0.f};
  const int gl = LaneColGroup<kN>(lane);
  // v[gl * 2 + e] without local memory.
  auto pick = [&](const float (&v)[kC], int e) {
    float r = v[e];
#pragma unroll
    for (int jj = 1; jj < kN / 8; ++jj) r = gl == jj ? v[jj * 2 + e] : r;
    return r;
  };

  auto fence_acc = [&]() {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) FenceOperand(acc[j][i]);
    }
  };
  // O and l into a new frame; warp-uniform (a warp's four column lanes cover
  // all 64 columns), hence warpgroup-uniform.
  // The wait is unconditional on the multiplying path, or ptxas serializes
  // every wgmma (C7514).
  auto rescale = [&](const float (&al)[kC]) {
    bool need = false;
#pragma unroll
    for (int i = 0; i < kC; ++i) need |= al[i] != 1.f;
    if (__any_sync(0xffffffffu, need)) {
      WgmmaWait<0>();
      fence_acc();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) acc[j][i] *= al[(i >> 2) * 2 + (i & 1)];
      }
    }
  };

  auto qk = [&](int k, float (&d)[kN / 2]) {
    const uint8_t* r0 = sKV + (k % kSlots) * kSlotBytes + key_r[0] * kRowStr + 16 * c;
    const uint8_t* r1 = sKV + (k % kSlots) * kSlotBytes + key_r[1] * kRowStr + 16 * c;
    // One 16-byte load per row covers four k-steps; they are converted and
    // issued two k-steps at a time, two such groups in flight.
    uint32_t a[3][8];
    auto convert = [&](const uint4 x0, const uint4 x1, int half, uint32_t (&f)[8]) {
      const uint32_t w0[4] = {x0.x, x0.y, x0.z, x0.w}, w1[4] = {x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        f[4 * t + 0] = E4m3x2ToF16x2(w0[2 * half + t]);
        f[4 * t + 1] = E4m3x2ToF16x2(w1[2 * half + t]);
        f[4 * t + 2] = E4m3x2HiToF16x2(w0[2 * half + t]);
        f[4 * t + 3] = E4m3x2HiToF16x2(w1[2 * half + t]);
      }
    };
    uint4 x0 = *reinterpret_cast<const uint4*>(r0), x1 = *reinterpret_cast<const uint4*>(r1);
    convert(x0, x1, 0, a[0]);
#pragma unroll
    for (int gi = 0; gi < 18; ++gi) {  // group gi: k-steps 2 gi, 2 gi + 1
      uint4 n0 = x0, n1 = x1;
      if ((gi & 1) == 1 && gi < 17) {
        n0 = *reinterpret_cast<const uint4*>(r0 + 64 * ((gi + 1) >> 1));
        n1 = *reinterpret_cast<const uint4*>(r1 + 64 * ((gi + 1) >> 1));
      }
      WgmmaFence();
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const uint32_t f[4] = {a[gi % 3][4 * t], a[gi % 3][4 * t + 1], a[gi % 3][4 * t + 2], a[gi % 3][4 * t + 3]};
        WgmmaRS<kN, F16, false>(d, f, q_desc + (((2 * gi + t) * 256) >> 4), (gi | t) != 0);
      }
      WgmmaCommit();
      if (gi < 17) {
        WgmmaWait<2>();
        if ((gi & 1) == 1) {
          x0 = n0;
          x1 = n1;
        }
        convert(x0, x1, (gi + 1) & 1, a[(gi + 1) % 3]);
      }
    }
  };

  // deep: three commit groups in flight instead of two (not while S^T's
  // accumulators are live: the registers run out). pf: k-step s+1's loads
  // are issued before k-step s's conversions, 8 registers more (our own
  // PV(k) only, where S^T is dead; under the peer's PV ptxas spills).
  auto pv = [&](int k, auto deep, auto pf) {
    const uint8_t* base = sKV + (k % kSlots) * kSlotBytes + d0;
    // P^T: 8-key core-matrix groups 16 kN bytes apart (K), 8-row groups 128 apart (N).
    const uint64_t pd = MakeSmemDescInterleave(p_addr + (k % kSlots) * kPBytes, 16 * kN, 128);
    struct KeyCols {
      uint2 v[2][2];  // [pp][e]: 8 latent columns of one key
    };
    auto load = [&](int s) {
      KeyCols x;
#pragma unroll
      for (int pp = 0; pp < 2; ++pp) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          x.v[pp][e] = *reinterpret_cast<const uint2*>(base + (16 * s + 8 * pp + 4 * e + c) * kRowStr);
        }
      }
      return x;
    };
    KeyCols cur = load(0);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      KeyCols next;
      if (decltype(pf)::value && s < 3) next = load(s + 1);
      if (!decltype(pf)::value && s > 0) cur = load(s);
      const auto& v = cur.v;
      // Two M-tiles per commit group, at most two or three groups (16 or 24
      // A registers) in flight.
#pragma unroll
      for (int jh = 0; jh < 2; ++jh) {
        WgmmaWait<decltype(deep)::value ? 2 : 1>();
        uint32_t a[2][4];
#pragma unroll
        for (int pp = 0; pp < 2; ++pp) {
          const uint32_t x0 = jh == 0 ? v[pp][0].x : v[pp][0].y, x1 = jh == 0 ? v[pp][1].x : v[pp][1].y;
          a[0][2 * pp + 0] = E4m3PairToF16x2Scaled<0>(x0, x1);
          a[0][2 * pp + 1] = E4m3PairToF16x2Scaled<1>(x0, x1);
          a[1][2 * pp + 0] = E4m3PairToF16x2Scaled<2>(x0, x1);
          a[1][2 * pp + 1] = E4m3PairToF16x2Scaled<3>(x0, x1);
        }
        WgmmaFence();
#pragma unroll
        for (int jl = 0; jl < 2; ++jl) {
          // Fragment order (row g, k lo), (row g+8, k lo), (row g, k hi), (row g+8, k hi).
          const uint32_t f[4] = {a[jl][0], a[jl][1], a[jl][2], a[jl][3]};
          WgmmaRS<kN, F16, true>(acc[2 * jh + jl], f, pd + ((s * 2 * 16 * kN) >> 4), 1);
        }
        WgmmaCommit();
      }
      if (decltype(pf)::value && s < 3) cur = next;
    }
    __syncwarp();
    if (lane == 0) MbarArrive(bar_empty + 8 * (k % kSlots));  // this warp's reads of the slot are done
  };

  // The owner's softmax of block k: masks, the block's column maxima (over
  // the warpgroup), the lazily moved running maxima and P(k). Publishes
  // P(k), m(k) and alpha(k), returns whether the frame moved, and leaves this
  // thread's share of the row sums in `sum` (the caller reduces it over the
  // warp under PV(k): off the chain to the next block).
  // S^T stays unscaled: the comparisons use thresholds divided by the
  // scale and P = 2^(s * sl2 - m) is one FMA.
  // moved_prev and m_prev: block k-1's frame flag and maxima, read by the
  // caller right after the P(k-1) barrier (k >= 1; -Inf for k = 0), so that
  // their shared-memory latency (long under the other warpgroup's wgmma
  // traffic) is off the block-to-block chain.
  auto softmax = [&](int k, float (&d)[kN / 2], bool moved_prev, const float (&m_prev)[kC],
                     float (&sum)[kC]) -> bool {
    if (k >= kt) {
      float lim[kC];
      LoadCols<kN>(reinterpret_cast<const float*>(sLim), c, lim);
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) {
        const int key = kTok * k + key_r[(i >> 1) & 1];
        const int li = __float_as_int(lim[(i >> 2) * 2 + (i & 1)]);
        if (key >= n_rel || key > li) d[i] = -INFINITY;
      }
    }
    // The frame m(k-1) stays unless a score exceeds it by more than
    // kLazyMax: one barrier with an OR decides that for the warpgroup, and
    // only then are the block's column maxima exchanged.
    float m[kC];
#pragma unroll
    for (int i = 0; i < kC; ++i) m[i] = m_prev[i];
    bool exceed = false;
    {
      float thr[kC];
#pragma unroll
      for (int i = 0; i < kC; ++i) thr[i] = (m[i] + kLazyMax) * inv_sl2;
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) exceed |= d[i] > thr[(i >> 2) * 2 + (i & 1)];
    }
    const bool moved = BarRedOr(kBarMax0 + cw, 128, exceed);
    if (moved) {
      float cm[kC];
#pragma unroll
      for (int jj = 0; jj < kN / 8; ++jj) {
#pragma unroll
        for (int e = 0; e < 2; ++e) cm[jj * 2 + e] = fmaxf(d[4 * jj + e], d[4 * jj + 2 + e]) * sl2;
      }
      float wm[2];
      ReduceColumns<true, kN>(cm, lane, wm);
      float* mp = sMaxPart + ((k >> 1) & 1) * 4 * kN;
      if ((g & (64 / kN - 1)) == 0) {
        *reinterpret_cast<float2*>(mp + wq * kN + c * kC + gl * 2) = make_float2(wm[0], wm[1]);
      }
      NamedBarrierSync(kBarMax0 + cw, 128);
      float bm[kC];
      LoadCols<kN>(mp, c, bm);
#pragma unroll
      for (int wv = 1; wv < 4; ++wv) {
        float t[kC];
        LoadCols<kN>(mp + wv * kN, c, t);
#pragma unroll
        for (int i = 0; i < kC; ++i) bm[i] = fmaxf(bm[i], t[i]);
      }
      // m(k) in place of m(k-1), alpha(k) in place of the block maxima.
#pragma unroll
      for (int i = 0; i < kC; ++i) {
        const float mprev = m[i];
        const float mn = bm[i] > mprev + kLazyMax ? bm[i] : mprev;
        bm[i] = mn == mprev ? 1.f : Exp2Approx(mprev - (mn == -INFINITY ? 0.f : mn));
        m[i] = mn;
      }
      if (wq == 0 && g == 0) StoreCols<kN>(sAlpha + (k % kSlots) * kN, c, bm);
      if (wq == 0 && lane == 0) sMoved[k % kSlots] = 1;
      if (g == 0) StoreCols<kN>(sAlphaW + (warp - 4) * kN, c, bm);  // read back by this warp only
#pragma unroll
      for (int e = 0; e < 2; ++e) l2[e] *= pick(bm, e);
    } else if (wq == 0 && lane == 0) {
      sMoved[k % kSlots] = 0;  // alpha(k) = 1: sAlpha(k) is not read
    }
    if (wq == 0 && g == 0) StoreCols<kN>(sM + (k % kSlots) * kN, c, m);
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      if (m[i] == -INFINITY) m[i] = 0.f;
    }
    if (moved_prev) {  // alpha(k-1), not yet applied to our row sums
      float al[kC];
      LoadCols<kN>(sAlpha + ((k - 1) % kSlots) * kN, c, al);
#pragma unroll
      for (int e = 0; e < 2; ++e) l2[e] *= pick(al, e);
    }
    uint8_t* pbuf = sP + (k % kSlots) * kPBytes;
#pragma unroll
    for (int jj = 0; jj < kN / 8; ++jj) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float p0 = Exp2Approx(fmaf(d[4 * jj + 2 * h], sl2, -m[jj * 2]));
        const float p1 = Exp2Approx(fmaf(d[4 * jj + 2 * h + 1], sl2, -m[jj * 2 + 1]));
        sum[jj * 2] = h == 0 ? p0 : sum[jj * 2] + p0;
        sum[jj * 2 + 1] = h == 0 ? p1 : sum[jj * 2 + 1] + p1;
        const int col = pcol[h];
        *reinterpret_cast<__half2*>(pbuf + (col >> 3) * (16 * kN) + jj * 128 + (col & 7) * 16 + c * 4) =
            __floats2half2_rn(p0, p1);
      }
    }
    FenceProxyAsync();
    NamedBarrierArrive(kBarPReady0 + (k & 1), 256);
    return moved;
  };

  for (int k = cw; k < nb; k += 2) {
    float d[kN / 2];
    MbarWait(bar_full + 8 * (k % kSlots), (k / kSlots) & 1);
    qk(k, d);
    bool moved_prev = false;
    float m_prev[kC];
#pragma unroll
    for (int i = 0; i < kC; ++i) m_prev[i] = -INFINITY;
    if (k >= 1) {
      // The other warpgroup's block k-1, our half of its PV, before our
      // softmax(k), so that its slot is released as early as possible.
      NamedBarrierSync(kBarPReady0 + ((k - 1) & 1), 256);  // P(k-1), m(k-1), alpha(k-1)
      moved_prev = sMoved[(k - 1) % kSlots] != 0;
      LoadCols<kN>(sM + ((k - 1) % kSlots) * kN, c, m_prev);
      if (moved_prev) {
        float al[kC];
        LoadCols<kN>(sAlpha + ((k - 1) % kSlots) * kN, c, al);
        rescale(al);
      }
      pv(k - 1, std::false_type{}, std::false_type{});
    }
    // S^T(k) and our PV(k-1) retired: a wait<8> that lets PV(k-1) run on
    // under the softmax makes ptxas serialize every wgmma (C7512); a wait<2>
    // (S^T is done by then) still does (C7515).
    WgmmaWait<0>();
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) FenceOperand(d[i]);
    float sum[kC];  // this thread's row sums of block k, reduced under PV(k)
    if (softmax(k, d, moved_prev, m_prev, sum)) {
      __syncwarp();
      float al[kC];
      LoadCols<kN>(sAlphaW + (warp - 4) * kN, c, al);
      rescale(al);
    }
    pv(k, std::false_type{}, std::true_type{});
    {
      float s2[2];
      ReduceColumns<false, kN>(sum, lane, s2);
      l2[0] += s2[0];
      l2[1] += s2[1];
    }
    // Nothing in flight across the back edge: ptxas serializes every wgmma
    // of the loop otherwise (C7514).
    WgmmaWait<0>();
    fence_acc();
  }
  if (nb > 0 && ((nb - 1) & 1) != cw) {  // the last block is the other warpgroup's
    const int k = nb - 1;
    NamedBarrierSync(kBarPReady0 + (k & 1), 256);
    if (sMoved[k % kSlots]) {
      float al[kC];
      LoadCols<kN>(sAlpha + (k % kSlots) * kN, c, al);
#pragma unroll
      for (int e = 0; e < 2; ++e) l2[e] *= pick(al, e);
      rescale(al);
    }
    pv(k, std::false_type{}, std::false_type{});
  }
  WgmmaWait<0>();
  fence_acc();

  // Row sums over all consumer threads; the final frame is m(nb-1).
  if ((g & (64 / kN - 1)) == 0) {
    *reinterpret_cast<float2*>(sRed + (cw * 4 + wq) * kN + c * kC + gl * 2) = make_float2(l2[0], l2[1]);
  }
  NamedBarrierSync(kBarConsumers, 256);
  // Each of 64 threads sums one column (query row) over the 8 warps and turns
  // it into the row's output factor; with splits it also stores the row's
  // (m, l). (The epilogue runs once per CTA from a cold instruction cache:
  // its length is its time.) The CTA's coordinates again from the grid:
  // fewer registers live through the loop.
  const int b = blockIdx.z, group = blockIdx.y, split = blockIdx.x;
  const int row0 = group * kRows, nrows = min(kRows, p.rows - row0);
  const int64_t pi0 = ((static_cast<int64_t>(b) * p.row_groups + group) * p.splits + split) * kRows;
  if (ctid < kN) {
    float t = sRed[ctid];
#pragma unroll
    for (int wv = 1; wv < 8; ++wv) t += sRed[wv * kN + ctid];
    const int q = ColOfIndex<kN>(ctid);
    float f;
    if (p.splits == 1) {
      f = p.out_scale * 256.f / t;
    } else {
      // O / l in f16 (|O / l| <= 448, 11 bits: finer than the bf16
      // output), half the bytes of fp32 partials; zeros for an empty split.
      f = t > 0.f ? 256.f / t : 0.f;
      const float m = nb > 0 ? sM[((nb - 1) % kSlots) * kN + ctid] : -INFINITY;  // the final frame
      if (q < nrows) *reinterpret_cast<float2*>(p.part_ml + (pi0 + q) * 2) = make_float2(m, t);
    }
    sAlphaW[ctid] = f;
  }
  NamedBarrierSync(kBarConsumers, 256);
  float f[kC];
  LoadCols<kN>(sAlphaW, c, f);

  // Output: a thread holds 8 consecutive latent columns (d0 .. d0 + 7) of its
  // kN / 4 query rows.
  auto out_cols = [&](int jj, int e, uint32_t (&h)[4], bool bf16) {
    const float inv = f[jj * 2 + e];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float x0 = acc[j][4 * jj + e] * inv, x1 = acc[j][4 * jj + 2 + e] * inv;
      h[j] = bf16 ? PackBf16x2(x0, x1, p.rounding) : PackHalf2(x0, x1);
    }
  };
  auto for_rows = [&](auto&& row) {
#pragma unroll
    for (int jj = 0; jj < kN / 8; ++jj) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int q = 8 * jj + 2 * c + e;
        if (q < nrows) row(jj, e, q);
      }
    }
  };
  // The two stores apart, not one branch per row: the executed code is
  // what the cold instruction cache fetches.
  if (p.splits == 1) {
    uint16_t* out = p.out + (static_cast<int64_t>(b) * p.rows + row0) * kDL + d0;
    for_rows([&](int jj, int e, int q) {
      uint32_t h[4] = {0u, 0u, 0u, 0u};
      if ((row0 + q) / p.heads < ql) out_cols(jj, e, h, true);
      *reinterpret_cast<uint4*>(out + static_cast<int64_t>(q) * kDL) = make_uint4(h[0], h[1], h[2], h[3]);
    });
  } else {
    __half* po = reinterpret_cast<__half*>(p.part_o) + pi0 * kDL + d0;
    for_rows([&](int jj, int e, int q) {
      uint32_t h[4];
      out_cols(jj, e, h, false);
      *reinterpret_cast<uint4*>(po + q * kDL) = make_uint4(h[0], h[1], h[2], h[3]);
    });
  }
}

}  // namespace

DecodeKernel WgmmaRegAKernel(int cta_rows) {
  if (cta_rows == 16) {
    return {MlaDecodeRegAKernel<16, 5>, kRegAThreads, RegALayout<16, 5>::kSmem, MlaPartials::kF16, 16};
  }
  if (cta_rows == 32) {
    return {MlaDecodeRegAKernel<32, 4>, kRegAThreads, RegALayout<32, 4>::kSmem, MlaPartials::kF16, 32};
  }
  return {MlaDecodeRegAKernel<64, 3>, kRegAThreads, RegALayout<64, 3>::kSmem, MlaPartials::kF16, kRows};
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
