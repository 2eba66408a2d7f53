// Error of a backend's output against the fp64 oracle on the same inputs.
// Declared here so the server (which sees only kernels/api) can report it;
// implemented with the oracle in kernels/cpu (target //kernels/cpu:error_report).
#ifndef KERNELSERVE_KERNELS_API_ERROR_REPORT_H_
#define KERNELSERVE_KERNELS_API_ERROR_REPORT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {

struct ErrorReport {
  double rel_rms = 0;     // ||O - O_ref|| / ||O_ref||, O_ref the fp64 oracle (unrounded)
  double max_abs = 0;
  int64_t nonfinite = 0;  // NaN/Inf outputs where the oracle is finite
  // FP8 attention split (ZYFA Figure 9), when requested.
  bool has_split = false;
  double input_quant = 0;  // fp64 attention on quantized vs unquantized inputs
  double p_quant = 0;      // oracle with P quantized as the params say vs unquantized P
  double rest = 0;         // backend vs oracle with the same P quantization
};

// All inputs and the backend's output are host tensors. For FP8 attention the
// reference is fp64 attention on the same quantized inputs (unquantized P).
absl::StatusOr<ErrorReport> AttentionError(const AttentionParams& p, const HostTensor& q,
                                           const HostTensor& k, const HostTensor& v,
                                           const HostTensor& out);
absl::StatusOr<ErrorReport> Fp8AttentionError(const Fp8AttentionParams& p,
                                              const Fp8AttentionInputs& host_in,
                                              const HostTensor& out, bool split);
absl::StatusOr<ErrorReport> MlaDecodeError(const MlaDecodeParams& p, const MlaDecodeInputs& host_in,
                                           const HostTensor& out);
absl::StatusOr<ErrorReport> DecodeAttentionError(const DecodeAttentionParams& p,
                                                 const DecodeAttentionInputs& host_in, const HostTensor& out);
absl::StatusOr<ErrorReport> MoeError(const MoeParams& p, const MoeInputs& host_in,
                                     const HostTensor& out);

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_API_ERROR_REPORT_H_
