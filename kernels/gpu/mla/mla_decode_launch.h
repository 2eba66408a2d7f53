// Plain C++ launcher of the MLA decode kernels (no absl, so nvcc compiles it
// alone); mla_decode.cc wraps it into the Backend-facing absl::Status API.
#ifndef KERNELSERVE_KERNELS_CUDA_MLA_MLA_DECODE_LAUNCH_H_
#define KERNELSERVE_KERNELS_CUDA_MLA_MLA_DECODE_LAUNCH_H_

#include <cuda_runtime.h>
#include <cstdint>

namespace kernelserve {
namespace cuda_mla {

// kWgmmaPv: QK^T and PV on wgmma; kWgmma: QK^T on wgmma, PV on mma.sync;
// kMmaSync: everything on mma.sync (the first version); kWgmmaPvSw: kWgmmaPv
// with its wgmma operands in the 128-byte-swizzled layout; kWgmmaPipe:
// kWgmmaPv's numerics (same bits) with a double-buffered bf16 KV tile whose
// unpack runs under the async QK^T (v6); kWgmmaRoles: warpgroups in roles
// (v7, mla_decode_roles.cu); kWgmmaRegA: KV converted in registers as the
// wgmma A operand, f16 tensor cores (v8, mla_decode_rega.cu; e4m3fn only:
// e4m3fnuz runs v7).
enum class MlaVariant { kWgmma, kMmaSync, kWgmmaPv, kWgmmaPvSw, kWgmmaPipe, kWgmmaRoles, kWgmmaRegA };

struct MlaDecodeArgs {
  const void* q_lat = nullptr;  // bf16 [B, q_len, H, 512]
  const void* q_pe = nullptr;   // bf16 [B, q_len, H, 64]
  const void* kv = nullptr;     // fp8 [B, S, 576] or pool [num_slots, 576]
  void* out = nullptr;          // bf16 [B, q_len, H, 512]
  const int32_t* seq_lens = nullptr;    // [B] or null (contiguous: S each)
  const int32_t* kv_indices = nullptr;  // paged only
  const int32_t* kv_indptr = nullptr;   // paged only, [B+1]
  const int32_t* q_lens = nullptr;      // [B] or null (q_len each)
  int batch = 0, q_len = 0, heads = 0;
  int64_t kv_seq = 0;   // contiguous: S (row stride of a request)
  int64_t max_seq = 0;  // longest request (plans the split)
  bool paged = false;
  int page_size = 1;
  bool fnuz = false;
  double scale = 0;     // softmax scale
  double kv_scale = 1;  // per-tensor dequantization scale
  int rounding = 1;     // Rounding enum value
  int num_splits = 0;   // 0: planned from the shape and the SM count
  MlaVariant variant = MlaVariant::kMmaSync;
};

// The split-KV plan, a pure function of the shape and the SM count, so a
// graph captured once replays the same plan.
struct MlaSplitPlan {
  int row_groups = 0;  // ceil(q_len * H / 64)
  int splits = 0;      // KV chunks per (request, row group)
  int64_t chunk = 0;   // tokens per chunk, a multiple of 64
};
MlaSplitPlan PlanMlaSplits(int batch, int q_len, int heads, int64_t max_seq, int num_splits,
                           int num_sms);

cudaError_t LaunchMlaDecode(const MlaDecodeArgs& a, cudaStream_t stream);

}  // namespace cuda_mla
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_MLA_MLA_DECODE_LAUNCH_H_
