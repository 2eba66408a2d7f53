#include "kernels/gpu/decode_attention/decode_attention.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/gpu/arch/sm90/decode_attention/decode_sm90_kernels.h"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/common/gpu_status.h"
#include "kernels/gpu/decode_attention/decode_merge.h"

namespace kernelserve {
namespace gpu {
namespace {

using decode::DecodeKernel;
using decode::DecodeSplitPlan;
using decode::KParams;

DecodeKernel KernelFor(DType kv, int head_dim, int mt) {
  switch (kv) {
    case DType::kBf16:
      return decode::DecodeKernelBf16(head_dim, mt);
    case DType::kFp8E4M3Fn:
      return decode::DecodeKernelE4m3fn(head_dim, mt);
    case DType::kFp8E4M3Fnuz:
      return decode::DecodeKernelE4m3fnuz(head_dim, mt);
    case DType::kFp8E5M2:
      return decode::DecodeKernelE5m2(head_dim, mt);
    default:
      return DecodeKernel{};
  }
}

int Rows(const DecodeAttentionParams &p) { return static_cast<int>(p.q_len * (p.heads_q / p.heads_kv)); }

// The plan and its kernel on the current device; sets the kernel's shared
// memory limit.
cudaError_t PlanOnDevice(const DecodeAttentionParams &p, DecodeSplitPlan *plan, DecodeKernel *kernel) {
  cudaError_t e;
  int dev = 0, sms = 0;
  if ((e = CurrentDeviceSms(&dev, &sms)) != cudaSuccess) return e;
  // The m-tile count depends only on the shape; occupancy on the kernel it
  // picks.
  *plan = decode::PlanDecodeSplits(static_cast<int>(p.batch), static_cast<int>(p.heads_kv), Rows(p),
                                   static_cast<int>(p.head_dim), p.max_seq, sms, 1);
  *kernel = KernelFor(p.kv_dtype, static_cast<int>(p.head_dim), plan->mt);
  if (kernel->fn == nullptr) return cudaErrorInvalidDeviceFunction;
  const void *fn = reinterpret_cast<const void *>(kernel->fn);
  if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, kernel->smem_bytes)) != cudaSuccess) {
    return e;
  }
  int per_sm = 1;
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kernel->threads, kernel->smem_bytes)) !=
      cudaSuccess) {
    return e;
  }
  *plan = decode::PlanDecodeSplits(static_cast<int>(p.batch), static_cast<int>(p.heads_kv), Rows(p),
                                   static_cast<int>(p.head_dim), p.max_seq, sms, per_sm);
  return cudaSuccess;
}

KParams MakeKParams(const DecodeAttentionParams &p, const DecodeAttentionInputs &in, void *out,
                    const DecodeSplitPlan &plan) {
  KParams k{};
  k.q = in.q.as<const uint16_t>();
  k.pool = in.kv.as<const uint8_t>();
  k.out = static_cast<uint16_t *>(out);
  k.seq_lens = in.seq_lens.as<const int32_t>();
  k.kv_indices = in.kv_indices.as<const int32_t>();
  k.kv_indptr = in.kv_indptr.as<const int32_t>();
  k.q_lens = p.has_q_lens ? in.q_lens.as<const int32_t>() : nullptr;
  k.q_len = static_cast<int>(p.q_len);
  k.heads_q = static_cast<int>(p.heads_q);
  k.heads_kv = static_cast<int>(p.heads_kv);
  k.group = static_cast<int>(p.heads_q / p.heads_kv);
  k.page_size = static_cast<int>(p.page_size);
  k.rounding = static_cast<int>(p.rounding);
  k.rows = Rows(p);
  k.cta_rows = 16 * plan.mt;
  k.row_groups = plan.row_groups;
  k.splits = plan.splits;
  k.chunk = static_cast<int>(plan.chunk);
  k.row_elems = 2 * p.heads_kv * p.head_dim;
  k.sl2 = static_cast<float>(p.scale * p.kv_scale * 1.4426950408889634);
  k.out_scale = static_cast<float>(p.kv_scale);
  return k;
}

size_t WorkspaceBytes(const DecodeAttentionParams &p, const DecodeSplitPlan &plan) {
  if (plan.splits <= 1) return 0;
  return static_cast<size_t>(p.batch * p.heads_kv * plan.row_groups) * plan.splits * 16 * plan.mt * (p.head_dim + 2) *
         sizeof(float);
}

cudaError_t Launch(const DecodeAttentionParams &p, const DecodeAttentionInputs &in, void *out, cudaStream_t stream) {
  DecodeSplitPlan plan;
  DecodeKernel kernel;
  cudaError_t e = PlanOnDevice(p, &plan, &kernel);
  if (e != cudaSuccess) return e;
  KParams kp = MakeKParams(p, in, out, plan);
  void *ws = nullptr;
  if (plan.splits > 1) {
    if ((e = cudaMallocAsync(&ws, WorkspaceBytes(p, plan), stream)) != cudaSuccess) return e;
    kp.part_o = static_cast<float *>(ws);
    kp.part_ml = kp.part_o +
                 static_cast<int64_t>(p.batch * p.heads_kv * plan.row_groups) * plan.splits * 16 * plan.mt * p.head_dim;
  }
  void *args[] = {&kp};
  e = cudaLaunchKernel(
      reinterpret_cast<const void *>(kernel.fn),
      dim3(plan.row_groups, static_cast<unsigned>(p.heads_kv * plan.splits), static_cast<unsigned>(p.batch)),
      dim3(kernel.threads), args, kernel.smem_bytes, stream);
  // As after <<<...>>>: the error is taken, not left pending.
  const cudaError_t pending = cudaGetLastError();
  if (e == cudaSuccess) e = pending;
  if (e == cudaSuccess && plan.splits > 1) {
    e = decode::LaunchDecodeMerge(kp, static_cast<int>(p.batch), static_cast<int>(p.head_dim), stream);
  }
  if (ws != nullptr) {
    const cudaError_t f = cudaFreeAsync(ws, stream);
    if (e == cudaSuccess) e = f;
  }
  return e;
}

}  // namespace

std::string DecodeAttentionUnsupported(int cc_major, int cc_minor, const DecodeAttentionParams &p) {
  if (cc_major != 9 || cc_minor != 0) {
    return absl::StrCat(
        "decode attention (per-head KV pools): this build's "
        "kernels are for sm_90a; device is sm_",
        cc_major, cc_minor);
  }
  if (KernelFor(p.kv_dtype, static_cast<int>(p.head_dim), 1).fn == nullptr) {
    return absl::StrCat("decode attention (per-head KV pools): no kernel for ", DTypeName(p.kv_dtype),
                        " KV at head_dim ", p.head_dim);
  }
  return "";
}

absl::StatusOr<decode::DecodeSplitPlan> DecodeAttentionPlan(const DecodeAttentionParams &p) {
  DecodeSplitPlan plan;
  DecodeKernel kernel;
  KS_RETURN_IF_ERROR(GpuStatus(PlanOnDevice(p, &plan, &kernel), "decode_attention plan"));
  return plan;
}

absl::Status RunDecodeAttention(const DecodeAttentionParams &p, const DecodeAttentionInputs &in, TensorView &out,
                                cudaStream_t stream) {
  const TensorDesc want = p.OutputDesc();
  if (out.desc.dtype != DType::kBf16 || out.desc.num_elements() != want.num_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode_attention: out must be ", want.DebugString(), ", got ", out.desc.DebugString()));
  }
  if (in.seq_lens.empty() || in.kv_indices.empty() || in.kv_indptr.empty() || in.kv.desc.dtype != p.kv_dtype) {
    return absl::InvalidArgumentError(
        "decode_attention: needs the validated pool, seq_lens, kv_indices and "
        "kv_indptr on the device");
  }
  if (p.batch > 65535 || p.heads_kv > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("decode_attention on cuda: batch ", p.batch, " and KV heads ",
                                                   p.heads_kv, " must each be at most 65535 (the grid's extents)"));
  }
  return GpuStatus(Launch(p, in, out.data, stream), "decode_attention launch");
}

}  // namespace gpu
}  // namespace kernelserve
