// The HIP backend's variant table: its AMD kernels, each with the device
// architectures and shapes it serves, read by its dispatch, its
// KernelVariants() and benchmark jobs ("hip.<name>"). It has the shape of the
// CUDA tables (kernels/gpu/common/kernel_variant.h) but its own entry type:
// those launch through the CUDA runtime's types in host code that nvcc
// compiles, these through the HIP runtime loaded at run time
// (hip_runtime.h), so this compiles with the host compiler alone.
#ifndef KERNELSERVE_KERNELS_GPU_HIP_HIP_VARIANTS_H_
#define KERNELSERVE_KERNELS_GPU_HIP_HIP_VARIANTS_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/api/op_call.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/hip/hip_runtime.h"

namespace kernelserve {
namespace gpu {
namespace hip {

// What a launch may use on its device.
struct LaunchContext {
  const Runtime* rt = nullptr;
  Stream stream = nullptr;
  std::string arch;  // of the code objects loaded on the device
  int compute_units = 0;
  // The kernel `name` of the loaded code objects (hip_code_objects.h's
  // FindKernelSymbol naming), or NOT_FOUND.
  std::function<absl::StatusOr<Function>(absl::string_view name)> kernel;
  // Device scratch of at least `bytes`, valid until the next call on the
  // device's stream (all work on a device runs on its one stream).
  std::function<absl::StatusOr<void*>(size_t bytes)> workspace;
};

struct Variant {
  BenchOp op;
  const char* name;
  const char* description;
  const char* serves;
  // Empty when the kernel runs `call` on a device whose code objects are for
  // `arch`, else why not.
  std::string (*unsupported)(absl::string_view arch, const OpCall& call);
  absl::Status (*run)(const LaunchContext& ctx, const OpCall& call, TensorView& out);
};

// In dispatch order.
const std::vector<Variant>& Variants();

// Whether `v` is an entry of op's table: the MoE entries (op kMoeGateUp)
// serve every MoE stage.
bool InTable(const Variant& v, BenchOp op);

// The first entry of call.op that runs the call, or UNIMPLEMENTED naming the
// op, the architecture and why each entry (if any) declines.
absl::StatusOr<const Variant*> Select(absl::string_view arch, const OpCall& call);

}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_HIP_HIP_VARIANTS_H_
