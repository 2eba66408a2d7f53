#include "kernels/gpu/mla/mla_decode.h"

#include "absl/strings/str_cat.h"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/common/gpu_status.h"
#include "kernels/gpu/mla/mla_decode_args.h"
#include "kernels/gpu/mla/mla_merge.h"
#include "kernels/gpu/mla/mla_split_plan.h"

namespace kernelserve {
namespace gpu {
namespace {

cudaError_t Launch(const mla::DecodeKernel& kernel, const MlaDecodeParams& p, const MlaDecodeInputs& in, void* out,
                   cudaStream_t stream) {
  cudaError_t e;
  int dev = 0, sms = 0;
  if ((e = CurrentDeviceSms(&dev, &sms)) != cudaSuccess) return e;
  const void* fn = reinterpret_cast<const void*>(kernel.fn);
  if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, kernel.smem_bytes)) !=
      cudaSuccess) {
    return e;
  }
  const mla::MlaSplitPlan plan = mla::PlanMlaSplits(static_cast<int>(p.batch), static_cast<int>(p.q_len),
                                                    static_cast<int>(p.heads), p.max_seq,
                                                    static_cast<int>(p.num_splits), sms, kernel.cta_rows);
  mla::KParams kp = mla::MakeKParams(p, in, out, plan);
  void* ws = nullptr;
  if (plan.splits > 1) {
    if ((e = cudaMallocAsync(&ws, mla::WorkspaceBytes(p.batch, plan), stream)) != cudaSuccess) return e;
    kp.part_o = static_cast<float*>(ws);
    kp.part_ml = kp.part_o + mla::PartialRows(p.batch, plan) * mla::kDL;
  }
  void* args[] = {&kp};
  e = cudaLaunchKernel(fn, dim3(plan.splits, plan.row_groups, static_cast<unsigned>(p.batch)), dim3(kernel.threads),
                       args, kernel.smem_bytes, stream);
  // As after <<<...>>>: the error is taken, not left pending.
  const cudaError_t pending = cudaGetLastError();
  if (e == cudaSuccess) e = pending;
  if (e == cudaSuccess && plan.splits > 1) {
    e = mla::LaunchMlaMerge(kernel.partials, kp, static_cast<int>(p.batch), stream);
  }
  if (ws != nullptr) {
    const cudaError_t f = cudaFreeAsync(ws, stream);
    if (e == cudaSuccess) e = f;
  }
  return e;
}

}  // namespace

absl::Status RunMlaDecode(const mla::DecodeKernel& kernel, const MlaDecodeParams& p, const MlaDecodeInputs& in,
                          TensorView& out, cudaStream_t stream) {
  if (out.desc.dtype != DType::kBf16 || out.desc.num_elements() != p.batch * p.q_len * p.heads * kMlaLatentDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("mla_decode: out must be bf16[", p.batch, ",", p.q_len, ",", p.heads, ",512], got ",
                     out.desc.DebugString()));
  }
  return GpuStatus(Launch(kernel, p, in, out.data, stream), "mla_decode launch");
}

}  // namespace gpu
}  // namespace kernelserve
