#include "kernels/gpu/arch/gfx942/fp8_attention/fp8_attention_gfx942_launch.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/gpu/fp8_attention/fp8_call_params.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace gfx942 {

std::string Unsupported(const Fp8AttentionParams& p) {
  if (p.format != Fp8Format::kE4M3Fnuz) {
    // gfx942's MFMA fp8 operands are e4m3fnuz; OCP e4m3fn is gfx950's.
    return absl::StrCat("format ", Fp8FormatName(p.format), " (serves ", Fp8FormatName(Fp8Format::kE4M3Fnuz), ")");
  }
  if (p.d_v != kDv || (p.d_qk != 128 && p.d_qk != 192)) {
    return absl::StrCat("(d_qk, d_v) = (", p.d_qk, ", ", p.d_v, ") (serves (128, 128) and (192, 128))");
  }
  const int mode = static_cast<int>(p.p_mode);
  if (mode < kExact || mode > kNaive) return absl::StrCat("p_mode ", mode, " (serves exact, lean and naive)");
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) {
    return absl::StrCat("heads_q ", p.heads_q, " is not a multiple of heads_kv ", p.heads_kv);
  }
  return "";
}

const char* KernelName(const Fp8AttentionParams& p) {
  const int mode = static_cast<int>(p.p_mode);
  return kKernels[p.d_qk == 192 ? 1 : 0][p.causal ? 1 : 0][mode - kExact];
}

Grid GridOf(const Fp8AttentionParams& p) {
  Grid g;
  g.x = static_cast<unsigned>((p.seq_q + kRows - 1) / kRows);
  g.y = static_cast<unsigned>(p.heads_q);
  g.z = static_cast<unsigned>(p.batch);
  return g;
}

absl::StatusOr<Fp8KernelParams> MakeParams(const Fp8AttentionParams& a, const Fp8AttentionInputs& in,
                                           const QuantizePlan* quantized, const TensorView& out) {
  const TensorDesc want = a.OutputDesc();
  if (out.desc.dtype != want.dtype || out.desc.shape != want.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8_attention: out must be ", want.DebugString(), ", got ", out.desc.DebugString()));
  }
  if (!a.fp8_inputs && quantized == nullptr) {
    return absl::InvalidArgumentError("fp8_attention: bf16 inputs need their quantization plan");
  }
  Fp8KernelParams p = Fp8CallParams(a);
  if (a.fp8_inputs) {
    SetFp8Inputs(in, p);
  } else {
    SetQuantizedInputs(*quantized, p);
  }
  p.out = static_cast<uint16_t*>(out.data);
  return p;
}

}  // namespace gfx942
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
