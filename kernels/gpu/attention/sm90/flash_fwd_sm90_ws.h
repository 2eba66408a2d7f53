// Hopper (sm_90a) bf16 MHA forward, head dim 128, warp-specialized (v4,
// "Ws"; bench/NOTES.md): FlashAttention-3's structure over v3's numerics.
//
// Three warpgroups per CTA of kBlockM = 128 query rows:
//   warpgroup 0, the producer: setmaxnreg down to 24 registers; one thread
//     loads Q once and K/V tiles of 128 keys through TMA into a kStages ring
//     of shared-memory stages with full/empty mbarriers;
//   warpgroups 1 and 2, the consumers: setmaxnreg up to 240; 64 query rows
//     each, wgmma for S = Q K^T and O += P V, the online softmax between,
//     the shared epilogue at the end.
// No CTA-wide barrier after the role split: consumers wait on the full
// barriers, release stages on the empty ones and alternate their wgmma issue
// on two named barriers (mainloop_sm90_ws.h).
//
// The TMA maps are built on the host per launch (cuTensorMapEncodeTiled from
// the driver, reached through the runtime's entry-point query: no -lcuda) and
// passed as __grid_constant__ kernel parameters. Out-of-bounds rows are
// zero-filled by TMA, as v3's cp.async zero-fills them.
#ifndef KERNELSERVE_KERNELS_CUDA_ATTENTION_SM90_FLASH_FWD_SM90_WS_H_
#define KERNELSERVE_KERNELS_CUDA_ATTENTION_SM90_FLASH_FWD_SM90_WS_H_

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/pipeline.cuh"
#include "kernels/gpu/attention/epilogue.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/sm90/mainloop_sm90_ws.h"
#include "kernels/gpu/attention/softmax.h"
#include "kernels/gpu/attention/tile_scheduler.h"

namespace kernelserve {
namespace gpu {
namespace sm90 {

template <bool kCausal_, int kStages_>
struct Sm90WsTraits {
  static constexpr bool kCausal = kCausal_;
  static constexpr int kHeadDim = 128;
  static constexpr int kConsumers = 2;  // warpgroups of 64 query rows
  static constexpr int kConsumerWarps = 4 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = 128;
  static constexpr int kStages = kStages_;
  // The launch bounds cap every thread at 65536 / 384 -> 168 registers;
  // setmaxnreg moves the producer's share to the consumers:
  // 24 + 2 * 240 = 3 * 168.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(kProducerRegs + kConsumers * kConsumerRegs <=
                    (kConsumers + 1) * (65536 / kThreads / 8 * 8),
                "setmaxnreg asks for more registers than the launch holds");
  static constexpr uint32_t kTurnBarrier = 1;        // named barriers 1, 2: the consumers' turns
  static constexpr int kTileQ = kBlockM * kHeadDim;  // elements
  static constexpr int kTileKV = kBlockN * kHeadDim;
  static constexpr uint32_t kTileQBytes = 2 * kTileQ;
  static constexpr uint32_t kTileKVBytes = 2 * kTileKV;
  static constexpr int kBarriers = 1 + 4 * kStages;
  // Q, kStages x (K, V), the barriers, the consumer warps' scratch, and
  // slack to align the base to 1024 bytes (the 128-byte swizzle pattern
  // repeats every 1024).
  static constexpr int kSmemBytes =
      1024 + kTileQBytes + 2 * kStages * kTileKVBytes + 8 * kBarriers + 8 * kConsumerWarps;
};

struct FlashFwdWsParams {
  FlashFwdParams p;
  CUtensorMap map_q, map_k, map_v;
  // 1: the maps' dimensions are (d, head, seq, batch) (BSHD strides),
  // 0: (d, seq, head, batch) (BHSD). Both keep strides non-decreasing.
  int heads_inner;
};

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    FlashFwdSm90WsKernel(const __grid_constant__ FlashFwdWsParams wp) {
  using Mainloop = MainloopSm90Ws<Traits>;
  constexpr int kD = Traits::kHeadDim;
  const FlashFwdParams& p = wp.p;

  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (sm80::SmemAddr(smem_raw) + 1023u) & ~1023u;
  const WsSmem<Traits> sm = WsSmem<Traits>::At(base);

  const WorkTile tile = SingleTileScheduler<Traits::kBlockM>::Get();
  const int m0 = tile.m_block * Traits::kBlockM;
  const int n_blocks = Mainloop::KvBlocks(p, m0);
  // Roles from a shfl-broadcast warpgroup index, which ptxas knows to be
  // warp-uniform (48 fewer instructions than threadIdx.x / 128 here).
  const int wg = WarpUniform(static_cast<int>(threadIdx.x) / 128);

  if (threadIdx.x == 0) sm.InitBarriers();
  __syncthreads();

  if (wg == 0) {
    SetMaxNRegDec<Traits::kProducerRegs>();
    if (threadIdx.x == 0 && n_blocks > 0) {
      Mainloop::Produce(&wp.map_q, &wp.map_k, &wp.map_v, wp.heads_inner != 0, sm, m0, tile.head,
                        tile.head / p.group, tile.batch, n_blocks);
    }
  } else {
    SetMaxNRegInc<Traits::kConsumerRegs>();
    const int cwg = wg - 1;  // consumer: query rows [64 cwg, 64 cwg + 64) of the tile
    float acc[kD / 8][4];
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    OnlineSoftmax<Traits::kBlockN / 8> softmax;
    softmax.Init();
    if (n_blocks > 0) Mainloop::Consume(p, sm, cwg, m0, n_blocks, acc, softmax);

    // The shared epilogue: rows that saw no key (n_blocks == 0 included) are
    // written as zeros.
    float inv[2];
    softmax.Finalize(inv);
    uint16_t* o = static_cast<uint16_t*>(p.o) + tile.batch * p.o_batch_stride +
                  tile.head * p.o_head_stride + m0 * p.o_row_stride;
    const int rows_valid = min(Traits::kBlockM, p.seq_q - m0);
    const int lane = threadIdx.x & 31;
    const int row0 = 64 * cwg + 16 * ((threadIdx.x >> 5) & 3);
    switch (p.rounding) {
      case kFlashRtna:
        StoreOutputTile<kD, kFlashRtna>(acc, inv, o, p.o_row_stride, row0, rows_valid, lane);
        break;
      case kFlashRtz:
        StoreOutputTile<kD, kFlashRtz>(acc, inv, o, p.o_row_stride, row0, rows_valid, lane);
        break;
      default:
        StoreOutputTile<kD, kFlashRtne>(acc, inv, o, p.o_row_stride, row0, rows_valid, lane);
        break;
    }
  }
}

// ---- Host side. ----

// cuTensorMapEncodeTiled's signature (CUDA 12.0 ABI).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's encoder, looked up once; nullptr if the driver has none.
inline EncodeTiledFn TensorMapEncoder() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<EncodeTiledFn>(nullptr);
    }
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// One bf16 tensor of `seq` rows of 128 per (batch, head), strides in
// elements, as a 4-D map whose box is 64 columns x kRows rows of one (head,
// batch): a [kRows][64] 128-byte-swizzled block of the kernel's tiles.
struct TileMapDesc {
  const void* base;
  int seq, heads, batch;
  int64_t row_stride, head_stride, batch_stride;
};

// TMA's limits: dimensions of at least 1 (ints, so below its 2^32), strides
// multiples of 16 bytes and below 2^40.
inline bool TileMapFits(const TileMapDesc& t) {
  if (t.seq < 1 || t.heads < 1 || t.batch < 1) return false;
  constexpr int64_t kMaxStride = int64_t{1} << 40;
  for (int64_t s : {t.row_stride, t.head_stride, t.batch_stride}) {
    if (s <= 0 || (2 * s) % 16 != 0 || 2 * s >= kMaxStride) return false;
  }
  return true;
}

template <int kRows>
cudaError_t EncodeTileMap(EncodeTiledFn encode, const TileMapDesc& t, bool heads_inner,
                          CUtensorMap* map) {
  const cuuint64_t dims[4] = {128, static_cast<cuuint64_t>(heads_inner ? t.heads : t.seq),
                              static_cast<cuuint64_t>(heads_inner ? t.seq : t.heads),
                              static_cast<cuuint64_t>(t.batch)};
  const cuuint64_t strides[3] = {
      static_cast<cuuint64_t>(2 * (heads_inner ? t.head_stride : t.row_stride)),
      static_cast<cuuint64_t>(2 * (heads_inner ? t.row_stride : t.head_stride)),
      static_cast<cuuint64_t>(2 * t.batch_stride)};
  const cuuint32_t box[4] = {64, heads_inner ? 1u : static_cast<cuuint32_t>(kRows),
                             heads_inner ? static_cast<cuuint32_t>(kRows) : 1u, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(t.base), dims, strides,
             box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// Fallback: tensors TMA cannot describe run the v3 kernel
// (RunFlashFwdSm90Hdim128): an empty K/V (seq_kv = 0: every row is written
// as zeros there), or a stride of 2^40 bytes or more or not a multiple of
// 16 bytes (neither occurs for BHSD/BSHD tensors a device can hold). A driver
// without the tensor-map encoder, or an encoding it rejects, is an error, not
// a silent fallback: tests of this kernel must not pass on v3.
template <bool kCausal, int kStages>
cudaError_t LaunchFlashFwdSm90Ws(const FlashFwdParams& params, cudaStream_t stream) {
  using Traits = Sm90WsTraits<kCausal, kStages>;
  const TileMapDesc q{params.q,
                      params.seq_q,
                      params.heads_q,
                      params.batch,
                      params.q_row_stride,
                      params.q_head_stride,
                      params.q_batch_stride};
  const TileMapDesc k{params.k,
                      params.seq_kv,
                      params.heads_kv,
                      params.batch,
                      params.k_row_stride,
                      params.k_head_stride,
                      params.k_batch_stride};
  const TileMapDesc v{params.v,
                      params.seq_kv,
                      params.heads_kv,
                      params.batch,
                      params.v_row_stride,
                      params.v_head_stride,
                      params.v_batch_stride};
  if (!TileMapFits(q) || !TileMapFits(k) || !TileMapFits(v)) {
    return RunFlashFwdSm90Hdim128<kCausal>(params, stream);
  }
  const EncodeTiledFn encode = TensorMapEncoder();
  if (encode == nullptr) return cudaErrorNotSupported;

  FlashFwdWsParams wp;
  wp.p = params;
  // BSHD (row stride > head stride in any tensor): (d, head, seq, batch),
  // so that every map's strides grow with the dimension.
  const bool heads_inner = params.q_row_stride > params.q_head_stride ||
                           params.k_row_stride > params.k_head_stride ||
                           params.v_row_stride > params.v_head_stride;
  wp.heads_inner = heads_inner ? 1 : 0;
  cudaError_t e = EncodeTileMap<Traits::kBlockM>(encode, q, heads_inner, &wp.map_q);
  if (e == cudaSuccess) e = EncodeTileMap<Traits::kBlockN>(encode, k, heads_inner, &wp.map_k);
  if (e == cudaSuccess) e = EncodeTileMap<Traits::kBlockN>(encode, v, heads_inner, &wp.map_v);
  if (e != cudaSuccess) return e;

  auto kernel = &FlashFwdSm90WsKernel<Traits>;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid = SingleTileScheduler<Traits::kBlockM>::Grid(params);
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(wp);
  return cudaGetLastError();
}

}  // namespace sm90
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_ATTENTION_SM90_FLASH_FWD_SM90_WS_H_
