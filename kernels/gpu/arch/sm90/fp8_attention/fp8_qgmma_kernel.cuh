// FP8 (e4m3fn) attention forward on sm_90a wgmma (QGMMA), (d_qk, d_v) =
// (128, 128). Numerics are the mma.sync kernel's (fp8_mma_sync_kernel.cuh,
// DESIGN §4) step for step:
// the same t, the same per-64-key-block R, the same exact / lean / naive P
// codes, the same frame changes by exact powers of two, the same dropped
// blocks, and the row sum of the rounded P accumulated by the tensor cores.
//
// One CTA = 128 query rows of one (batch, head) = 2 warpgroups of 64 rows;
// keys in tiles of 128 = two 64-key P blocks. Q and the K tiles sit in shared
// memory 128-byte swizzled (a row of 128 e4m3 is one 128-byte swizzle row),
// K and V stream in by cp.async (two stages). S = Q K^T is 4 wgmma
// m64n128k32 per warpgroup (both operands from shared memory). fp8 wgmma
// wants B K-major, so V is transposed once per tile into V^T[d_v][key],
// swizzled, its keys permuted within each 32 so that the S accumulator
// layout is directly the register A operand of P V (as the mma.sync kernel
// does it). V^T has
// 8 more rows of ones (1.0 = code 0x38): P V^T over 136 columns puts the sum
// of the rounded P of each row into columns 128..135, with the same rescales
// as O.
//
// Per tile: barrier (K, V landed) -> issue S -> transpose V under it ->
// barrier (V^T ready) -> per 64-key block: R, codes, B = P V^T into a fresh
// accumulator (2 wgmma m64n136k32 from registers), then O = O 2^(R_prev - R)
// + B in fp32 on the CUDA cores (fp8 wgmma accumulation truncates: see the
// comment at the fold). Block 1's codes are computed under block 0's P V. No
// warp specialization: the two warpgroups overlap each other only through the
// warp schedulers.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_QGMMA_KERNEL_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_QGMMA_KERNEL_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/fp8_attention/fp8_wgmma_tile.cuh"
#include "kernels/gpu/arch/sm90/fp8_attention/p_block.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace qgmma {

using namespace ::kernelserve::gpu::sm80;  // NOLINT: the instruction wrappers

constexpr int kThreads = 256;
constexpr int kVStr = kD + 16;  // raw V rows (bytes), padded for the transpose

// Shared memory from a 1024-byte-aligned base (the swizzle atom is 8 rows of
// 128 bytes): Q, 2 K stages (swizzled), 2 raw V stages, V^T (swizzled).
constexpr int kQBytes = kRows * kD;
constexpr int kKBytes = kTile * kD;
constexpr int kVBytes = kTile * kVStr;
constexpr int kOffK = kQBytes;
constexpr int kOffV = kOffK + 2 * kKBytes;
constexpr int kOffVt = kOffV + 2 * kVBytes;
constexpr int kVtBytes = kVtRows * kTile;
constexpr int kSmemBytes = 1024 + kOffVt + kVtBytes;
static_assert(kOffVt % 1024 == 0 && kOffK % 1024 == 0, "swizzled tiles must be 1024-byte aligned");

template <bool kCausal, int kMode>
__global__ void __launch_bounds__(kThreads, 1) Fp8AttnQgmmaKernel(const Fp8KernelParams p) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* sQ = smem;
  uint8_t* sVt = smem + kOffVt;

  const int qb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2;
  const int g = lane >> 2, c = lane & 3;
  const int q0 = qb * kRows;
  const int64_t diag = static_cast<int64_t>(p.seq_kv) - p.seq_q;  // causal: row i sees keys <= i + diag
  int64_t kv_end = p.seq_kv;
  if (kCausal) kv_end = min(kv_end, static_cast<int64_t>(q0) + kRows - 1 + diag + 1);
  const int n_tiles = kv_end > 0 ? static_cast<int>((kv_end + kTile - 1) / kTile) : 0;

  const float q_ds = p.q_ds[p.q_ds_per_head ? b * p.heads_q + h : 0];
  const float k_ds = p.k_ds[p.k_ds_per_head ? b * p.heads_kv + hk : 0];
  const float v_ds = p.v_ds[p.v_ds_per_head ? b * p.heads_kv + hk : 0];
  const float sc = q_ds * k_ds * p.scale_log2;

  const uint8_t* q_head = p.q + RowOff(p.bshd, b, h, 0, p.heads_q, p.seq_q, kD);
  const uint8_t* k_head = p.k + RowOff(p.bshd, b, hk, 0, p.heads_kv, p.seq_kv, kD);
  const uint8_t* v_head = p.v + RowOff(p.bshd, b, hk, 0, p.heads_kv, p.seq_kv, kD);
  const int64_t q_row_str = p.bshd ? static_cast<int64_t>(p.heads_q) * kD : kD;
  const int64_t kv_row_str = p.bshd ? static_cast<int64_t>(p.heads_kv) * kD : kD;

  // Q once (rows past seq_q zero-filled), joined to tile 0's copy group;
  // not at all when no tile is visited (no copy may outlive the CTA).
  for (int ch = tid; n_tiles > 0 && ch < kRows * (kD / 16); ch += kThreads) {
    const int r = ch / (kD / 16), col = ch % (kD / 16);
    const bool ok = q0 + r < p.seq_q;
    CpAsync16(SmemAddr(sQ + Swz(r, col * 16)), ok ? q_head + (q0 + r) * q_row_str + col * 16 : q_head, ok ? 16 : 0);
  }
  auto issue = [&](int it) {
    uint8_t* sk = smem + kOffK + (it & 1) * kKBytes;
    uint8_t* sv = smem + kOffV + (it & 1) * kVBytes;
    const int64_t j0 = static_cast<int64_t>(it) * kTile;
    for (int ch = tid; ch < kTile * (kD / 16); ch += kThreads) {
      const int r = ch / (kD / 16), col = ch % (kD / 16);
      const bool ok = j0 + r < p.seq_kv;
      const int64_t off = (j0 + r) * kv_row_str + col * 16;
      CpAsync16(SmemAddr(sk + Swz(r, col * 16)), ok ? k_head + off : k_head, ok ? 16 : 0);
      CpAsync16(SmemAddr(sv + r * kVStr + col * 16), ok ? v_head + off : v_head, ok ? 16 : 0);
    }
    CpAsyncCommit();
  };
  if (n_tiles > 0) issue(0);
  // The ones rows of V^T: constant, written once (the swizzle permutes equal bytes).
  reinterpret_cast<uint32_t*>(sVt + kD * kTile)[tid] = 0x38383838u;
  static_assert(kThreads * 4 == 8 * kTile, "one word of the ones rows per thread");

  int64_t lim[2];  // last visible key of this thread's two rows
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int64_t i = q0 + warp * 16 + g + hf * 8;
    lim[hf] = kCausal ? min(static_cast<int64_t>(p.seq_kv) - 1, i + diag) : static_cast<int64_t>(p.seq_kv) - 1;
  }

  // o[0..15]: O; o[16]: the rounded-P row sum (columns 128..135 all equal).
  float o[kNt][4];
#pragma unroll
  for (int n = 0; n < kNt; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
  }
  float ob[kNt][4];  // one 64-key block's P V (and P 1), added to O in fp32
#pragma unroll
  for (int n = 0; n < kNt; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) ob[n][e] = 0.f;
  }
  float factor_prev[2] = {1.f, 1.f};  // the frame change of the block whose P V is in ob
  float s[kTile / 8][4];
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
  }
  uint32_t pa[kTile / 32][4];  // P codes, one A fragment per 32 keys
#pragma unroll
  for (int k = 0; k < kTile / 32; ++k) {
#pragma unroll
    for (int e = 0; e < 4; ++e) pa[k][e] = 0u;
  }
  float lsum[2] = {0.f, 0.f};  // naive: sum of unrounded p
  int r_last[2] = {-(1 << 30), -(1 << 30)}, r_max[2] = {-(1 << 30), -(1 << 30)};
  float m_run[2] = {-INFINITY, -INFINITY};

  const uint32_t q_addr = SmemAddr(sQ) + wg * 64 * 128;  // this warpgroup's 64 rows
  const uint32_t vt_addr = SmemAddr(sVt);

  for (int it = 0; it < n_tiles; ++it) {
    CpAsyncWait<0>();
    sm90::FenceProxyAsync();  // cp.async wrote Q / K; wgmma reads them through the async proxy
    __syncthreads();          // tile `it` landed; the previous tile is done with V^T and its stage
    if (it + 1 < n_tiles) issue(it + 1);
    const uint8_t* sV = smem + kOffV + (it & 1) * kVBytes;
    const uint32_t k_addr = SmemAddr(smem + kOffK + (it & 1) * kKBytes);

    // S = Q K^T first, so that the V transpose runs under it.
    sm90::FenceOperand(s);
    sm90::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kD / 32; ++kk) {
      const uint64_t da = sm90::MakeSmemDesc(q_addr + 32u * kk, 16, 1024);
      const uint64_t db = sm90::MakeSmemDesc(k_addr + 32u * kk, 16, 1024);
      sm90::WgmmaSS<128, sm90::E4m3>(s, da, db, kk > 0 ? 1 : 0);
    }
    sm90::WgmmaCommit();

    // V^T under S (fp8_wgmma_tile.cuh).
    TransposeV<kThreads>([sV](int key, int byte) { return sV + key * kVStr + byte; }, sVt, tid);
    sm90::FenceProxyAsync();  // V^T (st.shared) is read by wgmma next
    sm90::WgmmaWait<0>();
    sm90::FenceOperand(s);
    __syncthreads();  // V^T ready

    // Scores in base 2, masked only on tiles that reach past seq_kv or
    // (causal) past the first row's last key: every row's limit is at least
    // that (CTA-uniform, and no wgmma is in flight here).
    ScaleMask<kCausal>(s, p, static_cast<int64_t>(it) * kTile, q0, diag, lim, sc, c);

#pragma unroll
    for (int hb = 0; hb < 2; ++hb) {  // the tile's two 64-key P blocks
      float factor[2];
      BlockCodes<kMode>(s, hb, pa, m_run, r_last, r_max, lsum, factor);
      // Each block's P V goes into a fresh accumulator and is added to O on
      // the CUDA cores (O = O * factor + P V in fp32). Accumulating every
      // block in the wgmma accumulator loses the small blocks: fp8 wgmma adds
      // with a truncated ~14-bit alignment, and after a frame change to a
      // lower block O is large in that block's units (the long-tail test
      // measured 2x the oracle's error that way).
      if (hb == 1) {
        sm90::WgmmaWait<0>();  // block 0's P V retired: ob is free
        sm90::FenceOperand(ob);
        FoldBlock(o, ob, factor_prev);
      }
      factor_prev[0] = factor[0];
      factor_prev[1] = factor[1];
      sm90::FenceOperand(ob);
      sm90::FenceOperand(pa);
      sm90::WgmmaFence();
      IssuePv(ob, pa, vt_addr, hb);
      sm90::WgmmaCommit();
    }
    sm90::WgmmaWait<0>();  // before the next tile overwrites V^T
    sm90::FenceOperand(ob);
    sm90::FenceOperand(pa);
    FoldBlock(o, ob, factor_prev);
  }

  StoreRows<kMode>(p, o, lsum, v_ds, q0 + warp * 16 + g, b, h, c);
}

}  // namespace qgmma
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_QGMMA_KERNEL_CUH_
