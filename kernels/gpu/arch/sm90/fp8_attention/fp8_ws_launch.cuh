// Launcher of the warp-specialized FP8 kernel: the TMA maps of the e4m3 Q, K
// and V (built per launch), the grid; each fp8_ws_d*_*.cu instantiates it
// once.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_WS_LAUNCH_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_WS_LAUNCH_CUH_

#include <cuda.h>

#include <cstdint>

#include "kernels/gpu/arch/sm90/fp8_attention/fp8_kernels.h"
#include "kernels/gpu/arch/sm90/fp8_attention/fp8_ws_kernel.cuh"
#include "kernels/gpu/arch/sm90/fp8_attention/p_block.cuh"
#include "kernels/gpu/arch/sm90/tensor_map.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace ws {

// One e4m3 tensor of `seq` rows of `d` bytes per (batch, head) as a 4-D map
// (d, seq, heads, batch), or heads inner (BSHD) (d, heads, seq, batch),
// whose box is a [128 rows][box_bytes] tile of one (head, batch), swizzled
// by box_bytes (128 or, for a 192-byte row's tail, 64); rows past seq are
// zero-filled. TMA wants strides that are multiples of 16 bytes below 2^40
// (BHSD/BSHD rows of 128 or 192 bytes are) and a 16-byte aligned base.
inline cudaError_t EncodeMap(sm90::EncodeTiledFn encode, const uint8_t* base, int d, int box_bytes, int seq,
                             int heads, int batch, bool heads_inner, CUtensorMap* map) {
  if (seq < 1 || heads < 1 || batch < 1 || (reinterpret_cast<uintptr_t>(base) & 15) != 0 ||
      (box_bytes != 128 && box_bytes != 64)) {
    return cudaErrorInvalidValue;
  }
  const cuuint64_t dd = static_cast<cuuint64_t>(d);
  const cuuint64_t head = heads_inner ? dd : static_cast<cuuint64_t>(seq) * dd;
  const cuuint64_t row_str = heads_inner ? static_cast<cuuint64_t>(heads) * dd : dd;
  const cuuint64_t dims[4] = {dd, static_cast<cuuint64_t>(heads_inner ? heads : seq),
                              static_cast<cuuint64_t>(heads_inner ? seq : heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {heads_inner ? head : row_str, heads_inner ? row_str : head,
                                 static_cast<cuuint64_t>(seq) * heads * dd};
  if (strides[2] >= (cuuint64_t{1} << 40)) return cudaErrorInvalidValue;
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_bytes), heads_inner ? 1u : static_cast<cuuint32_t>(kRows),
                             heads_inner ? static_cast<cuuint32_t>(kRows) : 1u, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<uint8_t*>(base), dims, strides, box, elem_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, box_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// One CTA per 128 query rows of one (batch, head), longest first when causal.
// An empty K/V (seq_kv = 0) never reaches here: the host entry writes its zeros.
template <int kDqk, bool kCausal, int kMode, int kStages>
cudaError_t LaunchKernel(const Fp8KernelParams& p, int batch, cudaStream_t stream) {
  static_assert(kRows == kTile, "one box shape for Q, K and V");
  const sm90::EncodeTiledFn encode = sm90::TensorMapEncoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  Fp8WsParams wp;
  wp.p = p;
  wp.heads_inner = p.bshd;
  wp.batch = batch;
  const bool hi = p.bshd != 0;
  cudaError_t e = EncodeMap(encode, p.q, kDqk, 128, p.seq_q, p.heads_q, batch, hi, &wp.map_q);
  if (e == cudaSuccess) e = EncodeMap(encode, p.k, kDqk, 128, p.seq_kv, p.heads_kv, batch, hi, &wp.map_k);
  if (e == cudaSuccess) e = EncodeMap(encode, p.v, kD, 128, p.seq_kv, p.heads_kv, batch, hi, &wp.map_v);
  if (QkRows<kDqk>::kHasTail) {
    if (e == cudaSuccess) e = EncodeMap(encode, p.q, kDqk, 64, p.seq_q, p.heads_q, batch, hi, &wp.map_q_tail);
    if (e == cudaSuccess) e = EncodeMap(encode, p.k, kDqk, 64, p.seq_kv, p.heads_kv, batch, hi, &wp.map_k_tail);
  } else {
    wp.map_q_tail = wp.map_q;  // unread
    wp.map_k_tail = wp.map_k;
  }
  if (e != cudaSuccess) return e;
  const auto kernel = Fp8AttnWsKernel<kDqk, kCausal, kMode, kStages>;
  constexpr int kSmemBytes = Smem<kDqk, kStages>::kSmemBytes;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid((p.seq_q + kRows - 1) / kRows, p.heads_q, batch);
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(wp);
  return cudaGetLastError();
}

}  // namespace ws

template <int kDqk, bool kCausal, int kStages>
cudaError_t LaunchFp8Ws(const Fp8KernelParams& p, int batch, int p_mode, cudaStream_t stream) {
  switch (p_mode) {
    case kLean:
      return ws::LaunchKernel<kDqk, kCausal, kLean, kStages>(p, batch, stream);
    case kNaive:
      return ws::LaunchKernel<kDqk, kCausal, kNaive, kStages>(p, batch, stream);
    default:
      return ws::LaunchKernel<kDqk, kCausal, kExact, kStages>(p, batch, stream);
  }
}

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_WS_LAUNCH_CUH_
