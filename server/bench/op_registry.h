// The op registry of benchmark jobs: one entry per BenchOp, each in its own
// file under server/bench/ops/, so that everything a job needs to know about
// an op lives in one place and the rest of server/bench is the same for
// every op. An entry registers itself when its file is linked (the way
// tensorstore registers its drivers):
//
//   namespace {
//   class AttentionOp : public BenchOpEntry { ... };
//   const OpRegistration<AttentionOp> kRegistration;
//   }  // namespace
//
// The library holding the entries is `alwayslink`, so that no binary drops
// a file that nothing references by name; op_registry_test checks that
// every BenchOp has exactly one entry.
#ifndef KERNELSERVE_SERVER_BENCH_OP_REGISTRY_H_
#define KERNELSERVE_SERVER_BENCH_OP_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/api/op_call.h"
#include "kernels/api/tensor.h"
#include "kernels/api/variants.h"
#include "kernelserve/v1/bench.pb.h"

namespace kernelserve {
namespace bench {

namespace pb = ::kernelserve::v1;

// A job's inputs by name ("q", "kv", "w13", ...): their descriptors, or the
// tensors themselves.
using InputDescs = std::map<std::string, TensorDesc>;
using HostTensors = std::map<std::string, HostTensor>;

// Everything server/bench knows about one op. Entries hold no state: every
// method is const and may run on any thread.
class BenchOpEntry {
 public:
  explicit BenchOpEntry(BenchOp op) : op_(op) {}
  virtual ~BenchOpEntry() = default;
  BenchOpEntry(const BenchOpEntry&) = delete;
  BenchOpEntry& operator=(const BenchOpEntry&) = delete;

  BenchOp op() const { return op_; }
  std::string name() const { return BenchOpName(op_); }

  // ---- the spec's shape message and the inputs it implies

  // Checks the op's shape message (present, positive dims, the op's limits)
  // and returns the inputs the job generates, by name. Messages name the
  // spec field ("spec.attention.seq_q: expected > 0, got 0").
  virtual absl::StatusOr<InputDescs> Inputs(const pb::BenchJobSpec& spec) const = 0;
  // Inputs a job may supply as buffers although none is generated (FP8
  // attention's descales, which come with FP8 q, k and v).
  virtual std::vector<std::string> OptionalInputs() const { return {}; }
  // Whether INPUT_LONG_TAIL exists for this op.
  virtual bool HasLongTailInputs() const { return false; }
  // Fills `tensors` with every input in `descs`, seeded (Gaussian, or
  // long-tail where the spec asks), and `call` with the params that follow
  // from the generated data (MLA decode's kv_scale).
  virtual absl::Status Generate(const pb::BenchJobSpec& spec, const InputDescs& descs, uint64_t seed,
                                HostTensors* tensors, OpCall* call) const = 0;
  // Stand-ins that let BuildCall validate a spec without its data:
  // descriptor-only tensors, except the small index tensors whose values
  // Validate reads (MoE routing, an MLA page table).
  virtual absl::Status Placeholders(const pb::BenchJobSpec& spec, const InputDescs& descs, HostTensors* tensors,
                                    OpCall* call) const;
  // Sets call->op and the params from the shape message, checks them with
  // the op's shared Validate against `tensors`, and points the call's views
  // into `tensors`. Params already in `call` that the data implies stay
  // unless the spec overrides them.
  virtual absl::Status BuildCall(const pb::BenchJobSpec& spec, const HostTensors& tensors, OpCall* call) const = 0;
  // The inverse of BuildCall: sets spec->op and the shape message whose
  // BuildCall gives `call`'s params (defaults written out).
  virtual void ToSpec(const OpCall& call, pb::BenchJobSpec* spec) const = 0;

  // ---- what a result counts and how it is checked

  // FLOPs of one launch (causal attention counts only the unmasked pairs).
  virtual double Flops(const OpCall& call) const = 0;
  // Bytes one launch reads and writes; by default every input and the output.
  virtual double Bytes(const OpCall& call, const HostTensors& tensors) const;
  // Rel RMS tolerance of the correctness gate when the spec gives none.
  virtual double DefaultTolerance() const = 0;
  // "B=1 Hq=8 Hkv=8 Sq=512 Skv=512 D=128 causal".
  virtual std::string ShapeDesc(const pb::BenchJobSpec& spec) const = 0;
  // Whether a result's "% GEMM" compares with the FP8 GEMM ceiling (when known).
  virtual bool ComparesWithFp8Gemm() const { return false; }
  // The gate's fp64 reference, whole or on an exact sample of the output
  // (kernels/api/variants.h).
  virtual absl::StatusOr<std::vector<double>> Reference(const OpCall& host_call) const;
  virtual absl::StatusOr<OracleSample> ReferenceSample(const OpCall& host_call, double max_flops) const;

 private:
  const BenchOp op_;
};

// Adds `entry` to the registry; the first entry for an op is the one found.
// Call it through OpRegistration.
void RegisterBenchOp(std::unique_ptr<const BenchOpEntry> entry);

template <typename Entry>
class OpRegistration {
 public:
  template <typename... Args>
  explicit OpRegistration(Args&&... args) {
    RegisterBenchOp(std::make_unique<Entry>(std::forward<Args>(args)...));
  }
};

// The entry of `op`, or nullptr.
const BenchOpEntry* FindBenchOp(BenchOp op);
// The entry of spec.op; INVALID_ARGUMENT naming the ops otherwise.
absl::StatusOr<const BenchOpEntry*> BenchOpOf(const pb::BenchJobSpec& spec);
// Every entry, by op value.
std::vector<const BenchOpEntry*> AllBenchOps();
// How many entries were registered for `op` (1 unless an op is missing or doubled).
int BenchOpRegistrations(BenchOp op);
// The registered ops' names joined by `sep`, the last one by `last_sep`
// ("attention, fp8_attention, ... or moe_layer").
std::string BenchOpNames(const std::string& sep, const std::string& last_sep);

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_OP_REGISTRY_H_
