// The gfx942 bf16 forward's two small kernels (attention_fwd_bf16_kernel.h
// says why each exists), as templates on the head dim D;
// attention_aux_bf16_hdim{64,128,256}.hip each instantiate one pair under C
// names. Compiled, never run: no AMD GPU exists here.
//
// V transpose: V (BSHD or BHSD, by strides) -> V^T in the launch's
// workspace, vt[b][hk][d][j] with vt_len (seq_kv rounded up to 64) keys per
// column and zeros past seq_kv. One block = 64 keys of one KV head, through
// 64 padded LDS rows (VtLdsBytes: 9216, 17408, 33792 bytes at D = 64, 128,
// 256); 256 / D threads per column.
//
// Merge: the dense-tail partials of every split item merged in fp32 in
// chunk order (kernels/gpu/attention/dense_tail.h, the function the CPU
// test holds to an fp64 softmax) and rounded once to bf16 in the call's mode. One thread per
// output column, 256 / D rows per block, no LDS.
//
// Occupancy (checked on each code object by
// attention_aux_gfx942_hdim*_hip_test): VGPR + AGPR <= 64 for both (eight
// waves per SIMD), LDS at most the transpose's, no scratch.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_AUX_BF16_KERNEL_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_AUX_BF16_KERNEL_H_

#include <cstdint>

#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"
#include "kernels/gpu/attention/dense_tail.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {

template <int kD>
__device__ __forceinline__ void VTransposeBlock(const Gfx942AttnParams& ap) {
  constexpr FwdShape kS = ShapeOf(kD);
  constexpr int kRowBytes = kS.row_bytes();
  constexpr int kPiecesPerRow = kD / 8;
  constexpr int kPieces = kVtTok * kPiecesPerRow;  // 16-byte pieces of a 64-key V block
  constexpr int kPerColumn = kAuxThreads / kD;      // threads per column of the transpose
  constexpr int kKeysPerThread = kVtTok / kPerColumn;
  static_assert(kS.head_dim == kD, "a served head dim");
  static_assert(kPieces % kAuxThreads == 0, "whole pieces per thread");
  static_assert(kPerColumn * kD == kAuxThreads && kKeysPerThread % 8 == 0, "whole 16-byte runs per thread");
  const FlashFwdParams& p = ap.f;
  __shared__ __attribute__((aligned(16))) uint8_t lds[VtLdsBytes(kS)];
  const int j0 = blockIdx.x * kVtTok, hk = blockIdx.y, b = blockIdx.z;
  const uint16_t* vb = static_cast<const uint16_t*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;
#pragma unroll
  for (int k = 0; k < kPieces / kAuxThreads; ++k) {
    const int piece = threadIdx.x + k * kAuxThreads, tok = piece / kPiecesPerRow, c = piece % kPiecesPerRow;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (j0 + tok < p.seq_kv) v = *reinterpret_cast<const uint4*>(vb + static_cast<int64_t>(j0 + tok) * p.v_row_stride + c * 8);
    *reinterpret_cast<uint4*>(lds + tok * kRowBytes + c * 16) = v;
  }
  __syncthreads();
  // Thread t: column d = t / kPerColumn, keys [kKeysPerThread (t % kPerColumn), +kKeysPerThread).
  const int d = threadIdx.x / kPerColumn, k0 = (threadIdx.x % kPerColumn) * kKeysPerThread;
  uint16_t* dst = ap.vt + (static_cast<int64_t>(b) * p.heads_kv + hk) * ap.vt_head_stride +
                  static_cast<int64_t>(d) * ap.vt_len + j0 + k0;
#pragma unroll
  for (int g = 0; g < kKeysPerThread / 8; ++g) {
    uint32_t w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int tok = k0 + g * 8 + e * 2;
      const uint32_t lo = *reinterpret_cast<const uint16_t*>(lds + tok * kRowBytes + d * 2);
      const uint32_t hi = *reinterpret_cast<const uint16_t*>(lds + (tok + 1) * kRowBytes + d * 2);
      w[e] = lo | hi << 16;
    }
    *reinterpret_cast<uint4*>(dst + g * 8) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <int kD>
__device__ __forceinline__ void MergeBlock(const Gfx942AttnParams& ap) {
  constexpr FwdShape kS = ShapeOf(kD);
  constexpr int kRows = kS.rows();
  static_assert(MergeRowsPerBlock(kS) * kD == kAuxThreads, "one merge thread per output column");
  const FlashFwdParams& p = ap.f;
  const int rr = blockIdx.x * MergeRowsPerBlock(kS) + threadIdx.x / kD, d = threadIdx.x % kD;
  const int t = rr / kRows, r = rr % kRows;
  if (t >= ap.tail_items) return;
  const WorkItem w = WorkItemAt(ap.full_items + t, ap.q_blocks, p.heads_q, p.batch);
  const int orow = w.qb * kRows + r;
  if (orow >= p.seq_q) return;
  const int64_t base = static_cast<int64_t>(t) * ap.splits * kRows + r;
  const float o = MergeChunks(ap.splits, ap.part_ml + base * 2, int64_t{kRows} * 2, ap.part_o + base * kD + d,
                              int64_t{kRows} * kD);
  uint16_t* out = static_cast<uint16_t*>(p.o) + w.batch * p.o_batch_stride + w.head * p.o_head_stride +
                  static_cast<int64_t>(orow) * p.o_row_stride + d;
  *out = static_cast<uint16_t>(FloatToBf16Bits(o, p.rounding));
}

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

// The C names of head dim D's transpose and merge for hipModuleGetFunction
// (attention_gfx942_launch.h's kKernels), with the occupancy stated above:
// the transpose's LDS binds it to 65536 / VtLdsBytes blocks per CU (waves
// per SIMD as many), the merge to its registers (eight waves per SIMD).
#define KS_ATTENTION_AUX_GFX942(TRANSPOSE, MERGE, D, TRANSPOSE_WAVES_PER_EU)                                   \
  extern "C" __global__ void                                                                                   \
      __attribute__((amdgpu_flat_work_group_size(256, 256), amdgpu_waves_per_eu(TRANSPOSE_WAVES_PER_EU)))      \
      TRANSPOSE(const kernelserve::gpu::attention::gfx942::Gfx942AttnParams p) {                               \
    static_assert(kernelserve::gpu::attention::gfx942::kCuLdsBytes /                                           \
                          kernelserve::gpu::attention::gfx942::VtLdsBytes(                                     \
                              kernelserve::gpu::attention::gfx942::ShapeOf(D)) >=                              \
                      TRANSPOSE_WAVES_PER_EU,                                                                  \
                  "as many transpose blocks per CU fit its LDS");                                              \
    kernelserve::gpu::attention::gfx942::VTransposeBlock<D>(p);                                                \
  }                                                                                                            \
  extern "C" __global__ void __attribute__((amdgpu_flat_work_group_size(256, 256), amdgpu_waves_per_eu(8)))    \
  MERGE(const kernelserve::gpu::attention::gfx942::Gfx942AttnParams p) {                                       \
    kernelserve::gpu::attention::gfx942::MergeBlock<D>(p);                                                     \
  }

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_AUX_BF16_KERNEL_H_
