#include "server/bench/bench_inputs.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/input_checks.h"

namespace kernelserve {
namespace bench {
namespace {

// Elements of a shape in double: a hostile shape must neither overflow int64
// nor be allocated (std::bad_alloc would end the server).
double Elements(const Shape& shape) {
  double n = 1;
  for (int64_t x : shape) n *= static_cast<double>(x);
  return n;
}

double BytesPerElement(DType dtype) { return static_cast<double>(NumBytes(dtype, 1024)) / 1024.0; }

absl::Status CheckBufferNames(const pb::BenchJobSpec& spec, const BenchOpEntry& op, const InputDescs& descs) {
  const std::vector<std::string> optional = op.OptionalInputs();
  for (const auto& [name, id] : spec.inputs().buffers()) {
    if (descs.count(name) || std::find(optional.begin(), optional.end(), name) != optional.end()) continue;
    std::vector<std::string> names;
    for (const auto& [n, d] : descs) names.push_back(n);
    return absl::InvalidArgumentError(absl::StrCat("spec.inputs.buffers: no input ", QuoteClientText(name), " for ",
                                                   op.name(), "; inputs are ", absl::StrJoin(names, ", ")));
  }
  return absl::OkStatus();
}

// A buffer whose dtype is the generated input's must have its shape too.
absl::Status CheckBufferShape(const InputDescs& descs, const std::string& name, const std::string& id,
                              const TensorDesc& got) {
  auto it = descs.find(name);
  if (it == descs.end() || got.dtype != it->second.dtype || got.shape == it->second.shape) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("spec.inputs.buffers[\"", name, "\"]: buffer ", QuoteClientText(id),
                                                 " is ", got.DebugString(), " but the job's shape needs ",
                                                 it->second.DebugString()));
}

}  // namespace

absl::Status ValidateSpec(const pb::BenchJobSpec& spec, double* flops, double max_bytes) {
  KS_ASSIGN_OR_RETURN(const BenchOpEntry* op, BenchOpOf(spec));
  KS_ASSIGN_OR_RETURN(InputDescs descs, op->Inputs(spec));
  auto too_big = [&](double bytes, const char* what) -> absl::Status {
    if (max_bytes <= 0 || bytes <= max_bytes) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "spec: the job's %s take %.4g bytes; this server allows %.4g per job (--bench_max_job_mb)", what, bytes,
        max_bytes));
  };
  double in_bytes = 0;
  for (const auto& [name, d] : descs) in_bytes += Elements(d.shape) * BytesPerElement(d.dtype);
  KS_RETURN_IF_ERROR(too_big(in_bytes, "inputs"));
  if (spec.inputs().kind() == pb::INPUT_LONG_TAIL && !op->HasLongTailInputs()) {
    return absl::InvalidArgumentError("spec.inputs.kind: long-tail inputs exist for attention ops only");
  }
  KS_RETURN_IF_ERROR(CheckBufferNames(spec, *op, descs));
  // The op's Validate on stand-ins: only the small index tensors hold data.
  HostTensors placeholders;
  OpCall call;
  KS_RETURN_IF_ERROR(op->Placeholders(spec, descs, &placeholders, &call));
  KS_RETURN_IF_ERROR(op->BuildCall(spec, placeholders, &call));
  // The output on the device and the host, and the fp64 oracle reference (8 bytes per element).
  const TensorDesc out = call.OutputDesc();
  KS_RETURN_IF_ERROR(too_big(in_bytes + Elements(out.shape) * (2.0 * BytesPerElement(out.dtype) + 8.0),
                             "inputs, output and oracle reference"));
  if (flops != nullptr) *flops = op->Flops(call);
  return absl::OkStatus();
}

absl::Status CheckSpecBuffers(const pb::BenchJobSpec& spec, const BufferDescriber& describe,
                              const std::string& tenant, const BufferContentCheck& check_contents) {
  if (spec.inputs().buffers().empty()) return absl::OkStatus();
  if (!describe) return absl::FailedPreconditionError("this server cannot read buffers for jobs");
  KS_ASSIGN_OR_RETURN(const BenchOpEntry* op, BenchOpOf(spec));
  KS_ASSIGN_OR_RETURN(InputDescs descs, op->Inputs(spec));
  const std::map<std::string, std::string> buffers(spec.inputs().buffers().begin(), spec.inputs().buffers().end());
  for (const auto& [name, id] : buffers) {
    absl::StatusOr<TensorDesc> d = describe(id, tenant);
    if (!d.ok()) {
      return absl::Status(d.status().code(),
                          absl::StrCat("spec.inputs.buffers[\"", name, "\"]: ", d.status().message()));
    }
    KS_RETURN_IF_ERROR(CheckBufferShape(descs, name, id, *d));
  }
  // The contents last: reading them is the costly part.
  if (check_contents) {
    for (const auto& [name, id] : buffers) {
      KS_RETURN_IF_ERROR(check_contents(id, tenant, absl::StrCat("spec.inputs.buffers[\"", name, "\"]")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PreparedJob>> PrepareJob(const pb::BenchJobSpec& spec,
                                                        const BufferReader& reader,
                                                        const std::string& tenant) {
  KS_RETURN_IF_ERROR(ValidateSpec(spec));
  auto job = std::make_unique<PreparedJob>();
  KS_ASSIGN_OR_RETURN(job->op, BenchOpOf(spec));
  KS_ASSIGN_OR_RETURN(InputDescs descs, job->op->Inputs(spec));
  const uint64_t seed = spec.inputs().seed() ? spec.inputs().seed() : 1;
  KS_RETURN_IF_ERROR(job->op->Generate(spec, descs, seed, &job->tensors, &job->host_call));

  // Uploaded buffers replace generated inputs; Validate checks that they fit.
  // Sorted by name so that errors are reproducible.
  const std::map<std::string, std::string> buffers(spec.inputs().buffers().begin(), spec.inputs().buffers().end());
  for (const auto& [name, id] : buffers) {
    if (!reader) return absl::FailedPreconditionError("this server cannot read buffers for jobs");
    absl::StatusOr<HostTensor> b = reader(id, tenant);
    if (!b.ok()) {
      return absl::Status(b.status().code(),
                          absl::StrCat("spec.inputs.buffers[\"", name, "\"]: ", b.status().message()));
    }
    KS_RETURN_IF_ERROR(CheckBufferShape(descs, name, id, b->desc()));
    job->tensors[name] = std::move(*b);
  }
  KS_RETURN_IF_ERROR(job->op->BuildCall(spec, job->tensors, &job->host_call));
  job->flops = job->op->Flops(job->host_call);
  job->bytes = job->op->Bytes(job->host_call, job->tensors);
  job->shape_desc = job->op->ShapeDesc(spec);
  return job;
}

}  // namespace bench
}  // namespace kernelserve
