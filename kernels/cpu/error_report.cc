// Error of a backend's output against the fp64 oracle (kernels/api/error_report.h).
#include "kernels/api/error_report.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

absl::StatusOr<std::vector<double>> OutputValues(const HostTensor& out, const TensorDesc& want) {
  if (out.shape() != want.shape) {
    return absl::InvalidArgumentError(absl::StrCat("output: expected shape ", ShapeString(want.shape),
                                                   ", got ", out.desc().DebugString()));
  }
  switch (out.dtype()) {
    case DType::kBf16:
    case DType::kFp16:
    case DType::kFp32:
    case DType::kFp64:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("output: expected a bf16, fp16, fp32 or fp64 tensor, got ", out.desc().DebugString()));
  }
  if (out.num_bytes() != out.desc().num_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("output: ", out.num_bytes(), " bytes for ",
                                                   out.desc().DebugString()));
  }
  return numerics::ToDoubles(out.view());
}

double RelRms(const std::vector<double>& out, const std::vector<double>& ref) {
  return numerics::CompareToReference(out.data(), ref.data(), static_cast<int64_t>(ref.size())).rel_rms;
}

ErrorReport Report(const std::vector<double>& out, const std::vector<double>& ref) {
  const numerics::ErrorMetrics m =
      numerics::CompareToReference(out.data(), ref.data(), static_cast<int64_t>(ref.size()));
  ErrorReport r;
  r.rel_rms = m.rel_rms;
  r.max_abs = m.max_abs;
  r.nonfinite = m.nonfinite;
  return r;
}

HostTensor Copy(const TensorView& t) {
  const uint8_t* b = t.as<const uint8_t>();
  const int64_t n = t.desc.num_bytes();
  return HostTensor(t.desc, b == nullptr || n <= 0 ? std::vector<uint8_t>() : std::vector<uint8_t>(b, b + n));
}

}  // namespace

absl::StatusOr<ErrorReport> AttentionError(const AttentionParams& p, const HostTensor& q,
                                           const HostTensor& k, const HostTensor& v,
                                           const HostTensor& out) {
  KS_ASSIGN_OR_RETURN(std::vector<double> o, OutputValues(out, p.OutputDesc()));
  KS_ASSIGN_OR_RETURN(std::vector<double> ref, oracle::Attention(p, q, k, v));
  return Report(o, ref);
}

absl::StatusOr<ErrorReport> Fp8AttentionError(const Fp8AttentionParams& p,
                                              const Fp8AttentionInputs& host_in,
                                              const HostTensor& out, bool split) {
  KS_ASSIGN_OR_RETURN(std::vector<double> o, OutputValues(out, p.OutputDesc()));
  KS_ASSIGN_OR_RETURN(oracle::QuantizedAttentionInputs qin, oracle::QuantizeAttentionInputs(p, host_in));
  // Reference: fp64 attention on the same quantized inputs, P unquantized.
  KS_ASSIGN_OR_RETURN(std::vector<double> ref, oracle::Fp8Attention(p, qin, oracle::PQuant::kNone));
  ErrorReport r = Report(o, ref);
  if (!split) return r;
  r.has_split = true;
  KS_ASSIGN_OR_RETURN(std::vector<double> with_p, oracle::Fp8Attention(p, qin, oracle::PQuant::kAsParams));
  r.p_quant = RelRms(with_p, ref);
  r.rest = RelRms(o, with_p);
  if (!p.fp8_inputs) {
    // Only bf16 inputs have an unquantized original to compare with.
    KS_ASSIGN_OR_RETURN(std::vector<double> unq, oracle::Fp8AttentionUnquantized(p, Copy(host_in.q),
                                                                                 Copy(host_in.k),
                                                                                 Copy(host_in.v)));
    r.input_quant = RelRms(ref, unq);
  }
  return r;
}

absl::StatusOr<ErrorReport> MlaDecodeError(const MlaDecodeParams& p, const MlaDecodeInputs& host_in,
                                           const HostTensor& out) {
  KS_ASSIGN_OR_RETURN(std::vector<double> o, OutputValues(out, p.OutputDesc()));
  KS_ASSIGN_OR_RETURN(std::vector<double> ref, oracle::MlaDecode(p, host_in));
  return Report(o, ref);
}

absl::StatusOr<ErrorReport> DecodeAttentionError(const DecodeAttentionParams& p,
                                                 const DecodeAttentionInputs& host_in, const HostTensor& out) {
  KS_ASSIGN_OR_RETURN(std::vector<double> o, OutputValues(out, p.OutputDesc()));
  KS_ASSIGN_OR_RETURN(std::vector<double> ref, oracle::DecodeAttention(p, host_in));
  return Report(o, ref);
}

absl::StatusOr<ErrorReport> MoeError(const MoeParams& p, const MoeInputs& host_in, const HostTensor& out) {
  KS_ASSIGN_OR_RETURN(std::vector<double> o, OutputValues(out, p.OutputDesc()));
  KS_ASSIGN_OR_RETURN(std::vector<double> ref, oracle::Moe(p, host_in));
  return Report(o, ref);
}

}  // namespace kernelserve
