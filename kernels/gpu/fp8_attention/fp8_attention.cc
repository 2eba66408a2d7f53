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

absl::Status CheckFormat(const Fp8AttentionParams& p) {
  if (p.format == Fp8Format::kE4M3Fn) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat("fp8_attention: the " KS_GPU_VENDOR " backend serves e4m3fn, not ", Fp8FormatName(p.format)));
}

// What no GPU kernel takes (UNIMPLEMENTED): e4m3fnuz, a head shape other than
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
// amax bits, rotated fp32 rows.
cudaError_t Prepare(const Fp8AttentionParams& a, const Fp8AttentionInputs& in, const Fp8QuantizedOut& keep,
                    cudaStream_t stream, Fp8KernelParams* kp, uint8_t** ws) {
  Fp8KernelParams& p = *kp;
  p = fp8_attention::Fp8CallParams(a);
  *ws = nullptr;
  if (a.fp8_inputs) {
    fp8_attention::SetFp8Inputs(in, p);
    return cudaSuccess;
  }
  const int batch = static_cast<int>(a.batch);
  const int d_qk = static_cast<int>(a.d_qk), d_v = static_cast<int>(a.d_v);
  const int64_t nq = a.batch * a.heads_q * a.seq_q;
  const int64_t nk = a.batch * a.heads_kv * a.seq_kv;
  const int bhq = batch * p.heads_q, bhk = batch * p.heads_kv;
  auto align = [](size_t x) { return (x + 255) & ~size_t{255}; };
  const size_t codes_q = align(nq * d_qk), codes_k = align(nk * d_qk), codes_v = align(nk * d_v);
  const size_t ds = align((bhq + 2 * bhk) * 4), am = align((bhq + 2 * bhk) * 4);
  const size_t rot = a.hadamard ? align(std::max(nq, nk) * d_qk * 4) : 0;
  const size_t total = codes_q + codes_k + codes_v + ds + am + rot;
  cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(ws), total, stream);
  if (e != cudaSuccess) return e;
  uint8_t* w = *ws;
  uint8_t* cq = keep.q_codes ? keep.q_codes : w;
  uint8_t* ck = keep.k_codes ? keep.k_codes : w + codes_q;
  uint8_t* cv = keep.v_codes ? keep.v_codes : w + codes_q + codes_k;
  float* dsp = keep.descales ? keep.descales : reinterpret_cast<float*>(w + codes_q + codes_k + codes_v);
  unsigned int* amax = reinterpret_cast<unsigned int*>(w + codes_q + codes_k + codes_v + ds);
  float* rotated = a.hadamard ? reinterpret_cast<float*>(w + codes_q + codes_k + codes_v + ds + am) : nullptr;
  e = cudaMemsetAsync(amax, 0, (bhq + 2 * bhk) * 4, stream);
  struct Op {
    const void* x;
    int64_t rows;
    int dim, heads, seq;
    bool rot;
    uint8_t* codes;
    float* descale;
    unsigned int* amax;
  } ops[3] = {
      {in.q.data, nq, d_qk, p.heads_q, p.seq_q, a.hadamard, cq, dsp, amax},
      {in.k.data, nk, d_qk, p.heads_kv, p.seq_kv, a.hadamard, ck, dsp + bhq, amax + bhq},
      {in.v.data, nk, d_v, p.heads_kv, p.seq_kv, false, cv, dsp + bhq + bhk, amax + bhq + bhk},
  };
  for (const Op& op : ops) {
    if (e != cudaSuccess) break;
    QuantizeArgs qa;
    qa.x = static_cast<const uint16_t*>(op.x);
    qa.rows = op.rows;
    qa.dim = op.dim;
    qa.hadamard = op.rot;
    qa.per_head = a.descale_mode == DescaleMode::kPerHead;
    qa.bshd = p.bshd != 0;
    qa.heads = op.heads;
    qa.seq = op.seq;
    qa.batch = batch;
    qa.codes = op.codes;
    qa.descale = op.descale;
    qa.rotated = rotated;
    qa.amax = op.amax;
    e = fp8_attention::LaunchQuantize(qa, stream);
  }
  p.q = cq;
  p.k = ck;
  p.v = cv;
  p.q_ds = dsp;
  p.k_ds = dsp + bhq;
  p.v_ds = dsp + bhq + bhk;
  p.q_ds_per_head = p.k_ds_per_head = p.v_ds_per_head = 1;  // expanded
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
