#include "kernels/gpu/fp8_attention/fp8_attention.h"

#include "absl/strings/str_cat.h"
#include "kernels/gpu/common/gpu_status.h"
#include "kernels/gpu/fp8_attention/fp8_attention_launch.h"

namespace kernelserve {
namespace gpu {

absl::Status RunFp8Attention(const Fp8AttentionParams& p, const Fp8AttentionInputs& in, TensorView& out,
                             cudaStream_t stream, Fp8AttentionKernel kernel) {
  return RunFp8AttentionKeepQuantized(p, in, out, Fp8QuantizedOut{}, stream, kernel);
}

absl::Status RunFp8AttentionKeepQuantized(const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                                          TensorView& out, const Fp8QuantizedOut& keep, cudaStream_t stream,
                                          Fp8AttentionKernel kernel) {
  if (p.format != Fp8Format::kE4M3Fn) {
    return absl::UnimplementedError(absl::StrCat("fp8_attention: the cuda backend serves e4m3fn, not ",
                                                 Fp8FormatName(p.format)));
  }
  const TensorDesc want = p.OutputDesc();
  if (out.desc.dtype != want.dtype || out.desc.shape != want.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8_attention: out must be ", want.DebugString(), ", got ", out.desc.DebugString()));
  }
  cuda_fp8::Fp8AttentionArgs a;
  a.q = in.q.data;
  a.k = in.k.data;
  a.v = in.v.data;
  a.fp8_inputs = p.fp8_inputs;
  if (p.fp8_inputs) {
    a.q_descale = in.q_descale.as<const float>();
    a.k_descale = in.k_descale.as<const float>();
    a.v_descale = in.v_descale.as<const float>();
    a.q_descale_per_head = in.q_descale.desc.num_elements() > 1;
    a.k_descale_per_head = in.k_descale.desc.num_elements() > 1;
    a.v_descale_per_head = in.v_descale.desc.num_elements() > 1;
  }
  a.hadamard = p.hadamard;
  a.per_head = p.descale_mode == DescaleMode::kPerHead;
  a.bshd = p.layout == Layout::kBshd;
  a.causal = p.causal;
  a.p_mode = static_cast<int>(p.p_mode);
  a.rounding = static_cast<int>(p.rounding);
  a.batch = static_cast<int>(p.batch);
  a.heads_q = static_cast<int>(p.heads_q);
  a.heads_kv = static_cast<int>(p.heads_kv);
  a.seq_q = static_cast<int>(p.seq_q);
  a.seq_kv = static_cast<int>(p.seq_kv);
  a.d_qk = static_cast<int>(p.d_qk);
  a.d_v = static_cast<int>(p.d_v);
  a.scale = p.scale;
  // kAuto: the QGMMA kernel passed every GPU test on the H200 (2026-12-02)
  // and ran 2.1-2.3x mma.sync's speed at (128, 128) (bench/RESULTS.md).
  a.kernel = kernel == Fp8AttentionKernel::kMmaSync ? cuda_fp8::kKernelMmaSync : cuda_fp8::kKernelQgmma;
  a.out = out.data;
  a.q_codes_out = keep.q_codes;
  a.k_codes_out = keep.k_codes;
  a.v_codes_out = keep.v_codes;
  a.descales_out = keep.descales;
  if (const char* why = cuda_fp8::Fp8AttentionUnsupported(a)) return absl::UnimplementedError(why);
  if (p.batch == 0 || p.heads_q == 0 || p.seq_q == 0) return absl::OkStatus();
  return GpuStatus(cuda_fp8::LaunchFp8Attention(a, stream), "fp8_attention launch");
}

}  // namespace gpu
}  // namespace kernelserve
