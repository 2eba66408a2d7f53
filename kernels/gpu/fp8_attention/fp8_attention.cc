#include "kernels/gpu/fp8_attention/fp8_attention.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/gpu/common/gpu_status.h"
#include "kernels/gpu/fp8_attention/fp8_call_params.h"
#include "kernels/gpu/fp8_attention/fp8_quantize.h"

namespace kernelserve {
namespace gpu {
namespace {

using fp8_attention::Fp8KernelParams;
using fp8_attention::QuantizeArgs;

// e4m3fnuz is served through e4m3fn: its codes are converted (LaunchFnuzToFn)
// before the kernel, whose P codes are the same bytes in either format.
absl::Status CheckFormat(const Fp8AttentionParams& p) {
  if (p.format == Fp8Format::kE4M3Fn || p.format == Fp8Format::kE4M3Fnuz) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("fp8_attention: the " KS_GPU_VENDOR
                                               " backend serves e4m3fn and e4m3fnuz, not ",
                                               Fp8FormatName(p.format)));
}

// What no GPU kernel takes (UNIMPLEMENTED): another FP8 format, a head shape other than
// (128|192, 128), heads that did not pass Validate.
absl::Status CheckCall(const Fp8AttentionParams& p) {
  KS_RETURN_IF_ERROR(CheckFormat(p));
  if (p.d_v != 128 || (p.d_qk != 128 && p.d_qk != 192)) {
    return absl::UnimplementedError("fp8_attention: " KS_GPU_VENDOR " serves (d_qk, d_v) = (128|192, 128)");
  }
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) {
    return absl::UnimplementedError("fp8_attention: heads_q must be a multiple of heads_kv");
  }
  return absl::OkStatus();
}

bool HasWork(const Fp8AttentionParams& p) { return p.batch > 0 && p.heads_q > 0 && p.seq_q > 0; }

// The kernel params of a call, and for bf16 inputs the quantization into a
// stream-ordered workspace (*ws, freed by the caller after the kernel) or
// into `keep`'s buffers where given: codes (q, k, v), descales (expanded),
// amax bits, rotated fp32 rows. For e4m3fnuz the kernel reads e4m3fn copies
// of the codes, at the workspace's start.
cudaError_t Prepare(const Fp8AttentionParams& a, const Fp8AttentionInputs& in, const Fp8QuantizedOut& keep,
                    cudaStream_t stream, Fp8KernelParams* kp, uint8_t** ws) {
  Fp8KernelParams& p = *kp;
  p = fp8_attention::Fp8CallParams(a);
  const bool fnuz = a.format == Fp8Format::kE4M3Fnuz;
  p.naive_ref_shift = fnuz ? 1.f : 0.f;  // fp8_kernel_params.h
  *ws = nullptr;
  auto align = [](size_t x) { return (x + 255) & ~size_t{255}; };
  const int64_t nq = a.batch * a.heads_q * a.seq_q * a.d_qk, nk = a.batch * a.heads_kv * a.seq_kv * a.d_qk;
  const int64_t nv = a.batch * a.heads_kv * a.seq_kv * a.d_v;
  const size_t fn_bytes = fnuz ? align(nq) + align(nk) + align(nv) : 0;
  auto to_fn = [&] {
    uint8_t* f = *ws;
    cudaError_t e = fp8_attention::LaunchFnuzToFn(p.q, f, nq, stream);
    if (e == cudaSuccess) e = fp8_attention::LaunchFnuzToFn(p.k, f + align(nq), nk, stream);
    if (e == cudaSuccess) e = fp8_attention::LaunchFnuzToFn(p.v, f + align(nq) + align(nk), nv, stream);
    p.q = f;
    p.k = f + align(nq);
    p.v = f + align(nq) + align(nk);
    return e;
  };
  if (a.fp8_inputs) {
    fp8_attention::SetFp8Inputs(in, p);
    if (!fnuz) return cudaSuccess;
    const cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(ws), fn_bytes, stream);
    return e == cudaSuccess ? to_fn() : e;
  }
  cudaError_t e =
      cudaMallocAsync(reinterpret_cast<void**>(ws), fn_bytes + fp8_attention::QuantizeWorkspaceBytes(a), stream);
  if (e != cudaSuccess) return e;
  const fp8_attention::QuantizePlan plan = fp8_attention::PlanQuantize(a, in, keep, *ws + fn_bytes);
  e = cudaMemsetAsync(plan.amax, 0, plan.amax_bytes, stream);
  for (const QuantizeArgs& qa : plan.ops) {
    if (e != cudaSuccess) break;
    e = fp8_attention::LaunchQuantize(qa, stream);
  }
  fp8_attention::SetQuantizedInputs(plan, p);
  if (e == cudaSuccess && fnuz) e = to_fn();
  return e;
}

// Frees the workspace in stream order; the first error wins.
cudaError_t Release(uint8_t* ws, cudaError_t e, cudaStream_t stream) {
  if (ws == nullptr) return e;
  const cudaError_t f = cudaFreeAsync(ws, stream);
  return e == cudaSuccess ? f : e;
}

}  // namespace

absl::Status RunFp8Attention(const Fp8AttentionParams& p, const Fp8AttentionInputs& in, TensorView& out,
                             cudaStream_t stream, const char* kernel_name, fp8_attention::KernelLaunch kernel) {
  KS_RETURN_IF_ERROR(CheckFormat(p));
  const TensorDesc want = p.OutputDesc();
  if (out.desc.dtype != want.dtype || out.desc.shape != want.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8_attention: out must be ", want.DebugString(), ", got ", out.desc.DebugString()));
  }
  KS_RETURN_IF_ERROR(CheckCall(p));
  if (kernel == nullptr) {
    return absl::UnimplementedError(absl::StrCat("fp8_attention: the ", kernel_name, " kernel has no (d_qk, d_v) = (",
                                                 p.d_qk, ", ", p.d_v, ")"));
  }
  if (!HasWork(p)) return absl::OkStatus();
  Fp8KernelParams kp;
  uint8_t* ws = nullptr;
  cudaError_t e = Prepare(p, in, Fp8QuantizedOut{}, stream, &kp, &ws);
  kp.out = static_cast<uint16_t*>(out.data);
  if (e == cudaSuccess) e = kernel(kp, static_cast<int>(p.batch), static_cast<int>(p.p_mode), stream);
  return GpuStatus(Release(ws, e, stream), absl::StrCat("fp8_attention launch (", kernel_name, ")"));
}

absl::Status QuantizeFp8AttentionInputs(const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                                        const Fp8QuantizedOut& out, cudaStream_t stream) {
  KS_RETURN_IF_ERROR(CheckCall(p));
  if (p.fp8_inputs) return absl::InvalidArgumentError("fp8_attention: the inputs are FP8 already");
  if (!HasWork(p)) return absl::OkStatus();
  Fp8KernelParams kp;
  uint8_t* ws = nullptr;
  const cudaError_t e = Prepare(p, in, out, stream, &kp, &ws);
  return GpuStatus(Release(ws, e, stream), "fp8_attention quantization");
}

}  // namespace gpu
}  // namespace kernelserve
