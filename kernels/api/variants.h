// Named implementations ("variants") of each op, for benchmark jobs (DESIGN
// §6). Every backend's implementations get stable names that a job can list
// side by side:
//
//   "<backend>"            the backend's kernel with the job's options ("cpu", "cuda")
//   "<backend>.<kernel>"   one entry of the backend's variant table for the op
//                          (Backend::KernelVariants), e.g. "cuda.wgmma_ws"
//   "<backend>.exact"      FP8 attention with exact / lean / naive P
//   "<backend>.lean"
//   "<backend>.naive"
//   "oracle"               the fp64 oracle rounded to bf16 (host, slow)
//   "test.wrong"           test only: the backend's kernel, output scaled by 1.5
//   "test.nan"             test only: the backend's kernel, one output set to NaN
//
// The test variants exist so that the correctness gate can be shown to catch
// a wrong kernel; a server registers them only with --enable_test_variants.
#ifndef KERNELSERVE_KERNELS_API_VARIANTS_H_
#define KERNELSERVE_KERNELS_API_VARIANTS_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/api/backend.h"
#include "kernels/api/op_call.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {

// Runs the op through the backend's own entry point (params as given).
absl::Status RunOnBackend(Backend& backend, int device, const OpCall& call, TensorView& out);

struct Variant {
  BenchOp op = BenchOp::kAttention;
  std::string name;         // stable, e.g. "cpu.lean"
  std::string backend;      // whose devices it runs on; "host" for the oracle
  std::string description;  // one line
  bool on_host = false;     // gets host views and a host `out` (the oracle)
  bool test_only = false;
  bool is_default = false;  // run when a job names no variants
  // One launch. `out` has call.OutputDesc(). Must not keep the views.
  std::function<absl::Status(Backend& backend, int device, const OpCall& call, TensorView& out)>
      run;
};

class VariantRegistry {
 public:
  // ALREADY_EXISTS when (op, name) is taken; INVALID_ARGUMENT without a name or run.
  absl::Status Register(Variant variant);
  // NOT_FOUND naming the op and listing its variants.
  absl::StatusOr<const Variant*> Find(BenchOp op, absl::string_view name) const;
  std::vector<const Variant*> List(BenchOp op) const;  // sorted by name
  std::vector<const Variant*> ListAll() const;         // by op, then name
  const Variant* Default(BenchOp op) const;            // nullptr when none

 private:
  std::map<std::pair<int, std::string>, Variant> variants_;
};

struct VariantOptions {
  bool test_variants = false;  // register "test.wrong" and "test.nan"
};

// Registers "<backend.Name()>" for every op (the default), the FP8 P modes,
// and with options.test_variants the test-only variants. The oracle is
// registered separately (RegisterOracleVariants) because its code lives in
// kernels/cpu.
absl::Status RegisterBackendVariants(const Backend& backend, const VariantOptions& options,
                                     VariantRegistry* registry);

// ----------------------------------------------------------------- oracle
// Declared here so the server (which sees only kernels/api) can reach the
// fp64 oracle; implemented in kernels/cpu (target //kernels/cpu:oracle_variant).
// `host_call` views must point to host memory.

// The reference of the correctness gate, in the op's output layout,
// unrounded: the same reference as error_report.h (FP8 attention: fp64
// attention on the same quantized inputs with unquantized P).
absl::StatusOr<std::vector<double>> OracleReference(const OpCall& host_call);

// The oracle as an implementation: the op's exact definition (FP8 attention:
// P quantized as the params say), unrounded.
absl::StatusOr<std::vector<double>> OracleOutput(const OpCall& host_call);

// The gate's reference on part of the output, for problems whose full fp64
// reference would take too long: attention ops take the last query rows of a
// few (batch, head) pairs (with the bottom-right causal alignment these rows
// form an exact smaller problem; FP8 inputs are quantized whole first), MLA
// decode a few heads of the first requests, MoE the first tokens. Sized so
// that the oracle does about `max_flops`. Each sampled value is exactly what
// OracleReference gives at that position.
struct OracleSample {
  std::vector<int64_t> index;     // row-major positions in the op's full output
  std::vector<double> reference;  // the reference at those positions
  std::string desc;               // what was sampled, for messages
};
absl::StatusOr<OracleSample> OracleReferenceSample(const OpCall& host_call, double max_flops);

// Registers "oracle" for every op: OracleOutput rounded to bf16 with the
// call's rounding mode.
absl::Status RegisterOracleVariants(VariantRegistry* registry);

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_API_VARIANTS_H_
