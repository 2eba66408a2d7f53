// The fp64 oracle behind kernels/api/variants.h, so that the server (which
// sees only kernels/api) can gate and time against it.
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "kernels/api/status_macros.h"
#include "kernels/api/variants.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

HostTensor Copy(const TensorView& v) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  return HostTensor(v.desc, std::vector<uint8_t>(p, p + v.desc.num_bytes()));
}

absl::StatusOr<std::vector<double>> Compute(const OpCall& c, bool reference) {
  switch (c.op) {
    case BenchOp::kAttention:
      return oracle::Attention(c.attention, Copy(c.q), Copy(c.k), Copy(c.v));
    case BenchOp::kFp8Attention: {
      KS_ASSIGN_OR_RETURN(oracle::QuantizedAttentionInputs qin,
                          oracle::QuantizeAttentionInputs(c.fp8, c.fp8_in));
      return oracle::Fp8Attention(c.fp8, qin,
                                  reference ? oracle::PQuant::kNone : oracle::PQuant::kAsParams);
    }
    case BenchOp::kMlaDecode:
      return oracle::MlaDecode(c.mla, c.mla_in);
    case BenchOp::kMoeGateUp:
    case BenchOp::kMoeDown:
    case BenchOp::kMoeLayer:
      return oracle::Moe(c.moe, c.moe_in);
  }
  return absl::InvalidArgumentError("unknown op");
}

Rounding CallRounding(const OpCall& c) {
  switch (c.op) {
    case BenchOp::kAttention:
      return c.attention.rounding;
    case BenchOp::kFp8Attention:
      return c.fp8.rounding;
    case BenchOp::kMlaDecode:
      return c.mla.rounding;
    default:
      return c.moe.rounding;
  }
}

}  // namespace

absl::StatusOr<std::vector<double>> OracleReference(const OpCall& host_call) {
  return Compute(host_call, /*reference=*/true);
}

absl::StatusOr<std::vector<double>> OracleOutput(const OpCall& host_call) {
  return Compute(host_call, /*reference=*/false);
}

absl::Status RegisterOracleVariants(VariantRegistry* registry) {
  for (BenchOp op : kAllBenchOps) {
    Variant v;
    v.op = op;
    v.name = "oracle";
    v.backend = "host";
    v.on_host = true;
    v.description = "fp64 oracle (kernels/cpu), rounded once to bf16; slow";
    v.run = [](Backend&, int, const OpCall& call, TensorView& out) -> absl::Status {
      KS_ASSIGN_OR_RETURN(std::vector<double> o, OracleOutput(call));
      if (static_cast<int64_t>(o.size()) != out.desc.num_elements()) {
        return absl::InternalError("oracle output size does not match the op's output");
      }
      numerics::StoreDoubles(o.data(), static_cast<int64_t>(o.size()), out.desc.dtype,
                             CallRounding(call), out.data);
      return absl::OkStatus();
    };
    KS_RETURN_IF_ERROR(registry->Register(std::move(v)));
  }
  return absl::OkStatus();
}

}  // namespace kernelserve
