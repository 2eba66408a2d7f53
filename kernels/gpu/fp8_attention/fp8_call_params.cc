#include "kernels/gpu/fp8_attention/fp8_call_params.h"

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

Fp8KernelParams Fp8CallParams(const Fp8AttentionParams& a) {
  Fp8KernelParams p{};
  p.heads_q = static_cast<int>(a.heads_q);
  p.heads_kv = static_cast<int>(a.heads_kv);
  p.seq_q = static_cast<int>(a.seq_q);
  p.seq_kv = static_cast<int>(a.seq_kv);
  p.bshd = a.layout == Layout::kBshd ? 1 : 0;
  p.rounding = static_cast<int>(a.rounding);
  p.scale_log2 = static_cast<float>(a.scale * 1.4426950408889634);
  return p;
}

void SetFp8Inputs(const Fp8AttentionInputs& in, Fp8KernelParams& p) {
  p.q = static_cast<const uint8_t*>(in.q.data);
  p.k = static_cast<const uint8_t*>(in.k.data);
  p.v = static_cast<const uint8_t*>(in.v.data);
  p.q_ds = in.q_descale.as<const float>();
  p.k_ds = in.k_descale.as<const float>();
  p.v_ds = in.v_descale.as<const float>();
  p.q_ds_per_head = in.q_descale.desc.num_elements() > 1;
  p.k_ds_per_head = in.k_descale.desc.num_elements() > 1;
  p.v_ds_per_head = in.v_descale.desc.num_elements() > 1;
}

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
