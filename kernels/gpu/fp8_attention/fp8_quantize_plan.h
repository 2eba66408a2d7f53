// The quantization of a call's bf16 inputs laid out in one device workspace,
// as every vendor's FP8 attention entry does it: codes (q, k, v), descales
// expanded to [B*Hq], [B*Hkv], [B*Hkv], the amax bits the caller zeroes
// before the passes, the rotated fp32 rows of the Hadamard path; and the
// QuantizeArgs of the three tensors. Plain C++.
#ifndef KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_QUANTIZE_PLAN_H_
#define KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_QUANTIZE_PLAN_H_

#include <cstddef>
#include <cstdint>

#include "kernels/api/ops.h"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"
#include "kernels/gpu/fp8_attention/fp8_quantize_args.h"

namespace kernelserve {
namespace gpu {

// Where to keep the codes and the expanded descales instead of the
// workspace (tests of the codes, the error split); nullptr: in the workspace.
struct Fp8QuantizedOut {
  uint8_t* q_codes = nullptr;
  uint8_t* k_codes = nullptr;
  uint8_t* v_codes = nullptr;
  float* descales = nullptr;
};

namespace fp8_attention {

struct QuantizePlan {
  QuantizeArgs ops[3];  // q, k, v
  unsigned int* amax = nullptr;
  size_t amax_bytes = 0;
  uint8_t *q_codes = nullptr, *k_codes = nullptr, *v_codes = nullptr;
  float* descales = nullptr;
};

// Bytes of the workspace of validated bf16-input `a` (256-byte aligned parts).
size_t QuantizeWorkspaceBytes(const Fp8AttentionParams& a);

// The plan over workspace `ws` of QuantizeWorkspaceBytes(a) bytes; codes in
// e4m3fnuz when a.format is.
QuantizePlan PlanQuantize(const Fp8AttentionParams& a, const Fp8AttentionInputs& in, const Fp8QuantizedOut& keep,
                          uint8_t* ws);

// The quantized operands into `p` (descales expanded: per head).
void SetQuantizedInputs(const QuantizePlan& plan, Fp8KernelParams& p);

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_QUANTIZE_PLAN_H_
