// The fp64 oracle: slow, exact definitions of every op (DESIGN §4). Every
// other implementation, the fast CPU backend included, is tested against it.
// Inputs are host tensors; params must have passed Validate. Each function
// returns the unrounded fp64 output in the op's output layout; round with
// numerics::DoubleToBf16 to get the bf16 result.
#ifndef KERNELSERVE_KERNELS_CPU_ORACLE_H_
#define KERNELSERVE_KERNELS_CPU_ORACLE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace oracle {

absl::StatusOr<std::vector<double>> Attention(const AttentionParams& p, const HostTensor& q,
                                              const HostTensor& k, const HostTensor& v);

// FP8 inputs after quantization: codes plus per-head fp32 descales expanded to
// [B*H] (per-tensor descales repeated).
struct QuantizedAttentionInputs {
  HostTensor q, k, v;  // FP8 codes, same shapes and layout as the originals
  std::vector<float> q_descale, k_descale, v_descale;  // [B*Hq], [B*Hkv], [B*Hkv]
};

// Quantizes bf16 q, k, v as the server does (optional Hadamard of Q and K in
// fp64 rounded to fp32, then per-tensor or per-head QuantizeFp8), or, for FP8
// inputs, copies the codes and expands the given descales.
absl::StatusOr<QuantizedAttentionInputs> QuantizeAttentionInputs(const Fp8AttentionParams& p,
                                                                 const Fp8AttentionInputs& host_in);

enum class PQuant { kNone, kAsParams };
// fp64 attention over the dequantized FP8 inputs. With PQuant::kNone it is
// plain softmax attention (the reference for the error report); with kAsParams
// P is quantized per 64-key block exactly as p.p_mode says (exact/lean/naive).
absl::StatusOr<std::vector<double>> Fp8Attention(const Fp8AttentionParams& p,
                                                 const QuantizedAttentionInputs& in, PQuant pq);

// fp64 attention on the unquantized bf16 inputs of an FP8 call (the start of
// the error split: input quantization).
absl::StatusOr<std::vector<double>> Fp8AttentionUnquantized(const Fp8AttentionParams& p,
                                                            const HostTensor& q,
                                                            const HostTensor& k,
                                                            const HostTensor& v);

// MLA decode over host tensors (kv is the contiguous tensor or the pool rows).
// Rows past a request's q_len window are 0.
absl::StatusOr<std::vector<double>> MlaDecode(const MlaDecodeParams& p, const MlaDecodeInputs& host_in);

// Decode attention over host tensors (kv is the pool's rows, read through the
// page tables as ops.h says). Every pool element is decoded exactly (bf16 or
// the pool's fp8) and multiplied by kv_scale in fp64. Rows past a request's
// q_lens window are 0.
absl::StatusOr<std::vector<double>> DecodeAttention(const DecodeAttentionParams& p,
                                                    const DecodeAttentionInputs& host_in);

// MoE stage over host tensors, dequantizing MXFP4 exactly. For kLayer the
// gate/up output is rounded to bf16 (RTNE) before the down projection, as a
// backend would store it.
absl::StatusOr<std::vector<double>> Moe(const MoeParams& p, const MoeInputs& host_in);

}  // namespace oracle
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_ORACLE_H_
