// From a job spec to a validated op call with its host inputs: shapes,
// seeded inputs (Gaussian, long-tail, or uploaded buffers), and the FLOPs and
// bytes that the throughput numbers count. What differs per op comes from
// the op's registry entry (op_registry.h, server/bench/ops/); this file is
// the same for every op.
#ifndef KERNELSERVE_SERVER_BENCH_BENCH_INPUTS_H_
#define KERNELSERVE_SERVER_BENCH_BENCH_INPUTS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/api/tensor.h"
#include "kernels/api/variants.h"
#include "kernelserve/v1/bench.pb.h"
#include "server/bench/op_registry.h"

namespace kernelserve {
namespace bench {

namespace pb = ::kernelserve::v1;

// Host copy of a server-resident buffer owned by `tenant` (NOT_FOUND otherwise).
using BufferReader =
    std::function<absl::StatusOr<HostTensor>(const std::string& buffer_id, const std::string& tenant)>;

// The dtype and shape of a server-resident buffer owned by `tenant`, without
// reading it (NOT_FOUND otherwise).
using BufferDescriber =
    std::function<absl::StatusOr<TensorDesc>(const std::string& buffer_id, const std::string& tenant)>;

struct PreparedJob {
  const BenchOpEntry* op = nullptr;  // the spec's op
  OpCall host_call;  // views into `tensors`
  HostTensors tensors;  // by input name ("q", "kv", "w13", ...)
  double flops = 0;  // per launch
  double bytes = 0;  // per launch: inputs read and output written
  std::string shape_desc;

  PreparedJob() = default;
  PreparedJob(const PreparedJob&) = delete;
  PreparedJob& operator=(const PreparedJob&) = delete;
};

// Checks the spec without generating its inputs: a known op with the right
// shape message, positive dims, and the op's shared Validate. Messages name
// the spec field. `flops` (optional) receives the FLOPs of one launch.
// `max_bytes` > 0: RESOURCE_EXHAUSTED when the job's inputs and output take
// more host/device memory than that (checked before anything is allocated).
absl::Status ValidateSpec(const pb::BenchJobSpec& spec, double* flops = nullptr, double max_bytes = 0);

// A check of the bytes of a tenant's buffer (--reject_nonfinite), whose
// error names `field` ("spec.inputs.buffers[\"q\"]") and the element.
using BufferContentCheck = std::function<absl::Status(const std::string& buffer_id, const std::string& tenant,
                                                      const std::string& field)>;

// At submission, for INPUT_BUFFERS: every buffer the spec names exists for
// `tenant` (NOT_FOUND naming the input otherwise) and, where the job would
// generate that input in the buffer's dtype, has the job's shape; then, when
// `check_contents` is set, every buffer passes it. PrepareJob checks the
// first two again when the job starts (a buffer may be freed between; its
// bytes never change).
absl::Status CheckSpecBuffers(const pb::BenchJobSpec& spec, const BufferDescriber& describe,
                              const std::string& tenant, const BufferContentCheck& check_contents = nullptr);

// Generates (or reads) the inputs and validates the call. `reader` may be
// empty when the spec names no buffers.
absl::StatusOr<std::unique_ptr<PreparedJob>> PrepareJob(const pb::BenchJobSpec& spec,
                                                        const BufferReader& reader,
                                                        const std::string& tenant);

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_BENCH_INPUTS_H_
