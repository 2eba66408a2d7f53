// Host side of the warp-specialized kernel: the TMA maps of Q, K and V,
// built per launch (sm90/tensor_map.h's encoder), and the launcher that
// flash_fwd_ws_hdim{64,128,256}_*.cu instantiate: the plan (ws_plan.h: tile
// order, dense-tail split), the split's workspace from the stream-ordered
// pool (cudaMallocAsync / cudaFreeAsync, as the MLA, decode and MoE
// launchers get theirs), the forward and, when the split is on, the merge.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_WS_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_WS_LAUNCH_H_

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "kernels/gpu/arch/sm90/attention/flash_fwd.h"
#include "kernels/gpu/arch/sm90/attention/flash_fwd_ws_kernel.h"
#include "kernels/gpu/arch/sm90/attention/ws_plan.h"
#include "kernels/gpu/arch/sm90/tensor_map.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/tile_scheduler.h"
#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// One bf16 tensor of `seq` rows of kD per (batch, head), strides in
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

template <int kD, int kRows>
cudaError_t EncodeTileMap(sm90::EncodeTiledFn encode, const TileMapDesc& t, bool heads_inner,
                          CUtensorMap* map) {
  const cuuint64_t dims[4] = {kD, static_cast<cuuint64_t>(heads_inner ? t.heads : t.seq),
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

// Tensors TMA cannot describe are an error (cudaErrorInvalidValue): an empty
// K/V (the host entry writes the zeros of seq_kv = 0 itself), or a stride of
// 2^40 bytes or more or not a multiple of 16 bytes (neither occurs for
// BHSD/BSHD tensors a device can hold). So are a driver without the
// tensor-map encoder and an encoding it rejects.
// CTAs of the kernel one SM holds at once (1 for every instantiation: the
// launch bounds' 168 registers x 384 threads fill the register file), asked
// of the runtime once per instantiation, after its shared-memory attribute
// is set; 1 if the runtime cannot say.
template <typename Traits>
int CtasPerSm() {
  static const int n = [] {
    int k = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&k, FlashFwdWsKernel<Traits>, Traits::kThreads,
                                                      Traits::kSmemBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return 1;
    }
    return k < 1 ? 1 : k;
  }();
  return n;
}

// The stream-ordered pool gives its free memory back to the OS at every
// synchronize while its release threshold is 0 (the default), so that each
// call's cudaMallocAsync would map the workspace anew, on the host, between
// the previous work and the forward on the stream. The first split launch on
// a device raises the threshold of the device's pool to kWsPoolKeepBytes,
// more than the model ever asks for (tail x splits <= the SMs: 132 chunks x
// 128 rows x 256 fp32 = 17 MiB at d256). Every cudaMallocAsync user of the
// pool keeps up to that much; failures leave the pool as it was.
constexpr uint64_t kWsPoolKeepBytes = uint64_t{64} << 20;
inline void KeepPoolWorkspace(int dev) {
  static std::atomic<bool> kept[64];
  if (dev < 0 || dev >= 64 || kept[dev].load(std::memory_order_relaxed)) return;
  cudaMemPool_t pool;
  uint64_t threshold = 0, keep = kWsPoolKeepBytes;
  cudaError_t e = cudaDeviceGetMemPool(&pool, dev);
  if (e == cudaSuccess) e = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (e == cudaSuccess && threshold < keep) e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (e != cudaSuccess) (void)cudaGetLastError();  // not the launch's error: the call goes on without it
  kept[dev].store(true, std::memory_order_relaxed);
}

template <int kD, bool kCausal, int kStages>
cudaError_t LaunchFlashFwdWs(const FlashFwdParams& params, const WsLaunchOptions& options, cudaStream_t stream) {
  using Traits = WsTraits<kD, kCausal, kStages>;
  static_assert(Traits::kBlockM == kWsBlockM && Traits::kBlockN == WsBlockN(kD, kCausal), "ws_plan.h plans other tiles");
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
  if (!TileMapFits(q) || !TileMapFits(k) || !TileMapFits(v)) return cudaErrorInvalidValue;
  const sm90::EncodeTiledFn encode = sm90::TensorMapEncoder();
  if (encode == nullptr) return cudaErrorNotSupported;

  FlashFwdWsParams wp;
  wp.p = params;
  // BSHD (row stride > head stride in any tensor): (d, head, seq, batch),
  // so that every map's strides grow with the dimension.
  const bool heads_inner = params.q_row_stride > params.q_head_stride ||
                           params.k_row_stride > params.k_head_stride ||
                           params.v_row_stride > params.v_head_stride;
  wp.heads_inner = heads_inner ? 1 : 0;
  cudaError_t e = EncodeTileMap<kD, Traits::kBlockM>(encode, q, heads_inner, &wp.map_q);
  if (e == cudaSuccess) e = EncodeTileMap<kD, Traits::kBlockN>(encode, k, heads_inner, &wp.map_k);
  if (e == cudaSuccess) e = EncodeTileMap<kD, Traits::kBlockN>(encode, v, heads_inner, &wp.map_v);
  if (e != cudaSuccess) return e;

  auto kernel = &FlashFwdWsKernel<Traits>;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
  if (e != cudaSuccess) return e;
  int dev = 0, sms = 0;
  if ((e = CurrentDeviceSms(&dev, &sms)) != cudaSuccess) return e;
  const WsLaunchPlan plan = PlanWsLaunch(params, kD, kCausal, sms * CtasPerSm<Traits>(), options);
  wp.order = plan.order;
  wp.full_items = plan.tail.full_items;
  wp.splits = plan.tail.splits;
  wp.part_o = nullptr;
  wp.part_ml = nullptr;
  void* ws = nullptr;
  if (plan.tail.on) {
    KeepPoolWorkspace(dev);
    if ((e = cudaMallocAsync(&ws, plan.workspace_bytes, stream)) != cudaSuccess) return e;
    wp.part_o = reinterpret_cast<float*>(static_cast<uint8_t*>(ws) + plan.part_o);
    wp.part_ml = reinterpret_cast<float*>(static_cast<uint8_t*>(ws) + plan.part_ml);
  }
  kernel<<<plan.tail.ctas, Traits::kThreads, Traits::kSmemBytes, stream>>>(wp);
  e = cudaGetLastError();
  if (e == cudaSuccess && plan.tail.on) {
    FlashFwdWsMergeKernel<kD, Traits::kBlockM>
        <<<dim3(plan.merge_grid_x, plan.merge_grid_y), kWsMergeThreads, 0, stream>>>(wp);
    e = cudaGetLastError();
  }
  if (ws != nullptr) {
    const cudaError_t f = cudaFreeAsync(ws, stream);
    if (e == cudaSuccess) e = f;
  }
  return e;
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_WS_LAUNCH_H_
