// One variant table per op (DESIGN §1): the kernels of an op that the
// dispatcher may pick, each with the devices and shapes it serves. The
// dispatcher, the kernel tests, the benchmarks and benchmark jobs
// (Backend::KernelVariants) all read the same table, so a kernel that no
// shape selects has no entry and no place in the tree.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_KERNEL_VARIANT_H_
#define KERNELSERVE_KERNELS_GPU_COMMON_KERNEL_VARIANT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/api/op_call.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {

// What a variant's predicate may ask of the device.
struct DeviceCaps {
  int cc_major = 0;  // compute capability (CUDA); the gfx target (HIP) when that backend exists
  int cc_minor = 0;
  int sms = 0;
  int64_t smem_per_block_optin = 0;
};

absl::StatusOr<DeviceCaps> QueryDeviceCaps(int device);

// This build compiles its kernels for sm_90a only: empty on a compute
// capability 9.0 device, else why not.
std::string NeedsSm90a(const DeviceCaps& caps);

struct KernelVariant {
  const char* name;         // stable within the op: tests, benchmarks and jobs name it
  const char* description;  // one line
  const char* serves;       // the devices and shapes, in words (the predicate says it exactly)
  // Empty when the kernel can run `call` on a device with `caps`, else why not.
  std::string (*unsupported)(const DeviceCaps& caps, const OpCall& call);
  // Empty when the dispatcher takes this entry for a call it can run, else
  // why it leaves the call to a later entry (a heuristic, a pure function
  // with its own tests). nullptr: it always takes it.
  std::string (*declines)(const DeviceCaps& caps, const OpCall& call);
  // Launches on `stream`; `call`'s views and `out` are device memory.
  absl::Status (*run)(const OpCall& call, TensorView& out, cudaStream_t stream);
};

// In dispatch order: the first entry that can run a call and does not
// decline it runs it.
using VariantTable = std::vector<KernelVariant>;

// The entry the dispatcher picks, or UNIMPLEMENTED listing why each declines.
absl::StatusOr<const KernelVariant*> SelectVariant(const VariantTable& table, absl::string_view op,
                                                   const DeviceCaps& caps, const OpCall& call);

// The entry named `name`: NOT_FOUND listing the table, or UNIMPLEMENTED when
// it does not serve `call`.
absl::StatusOr<const KernelVariant*> FindVariant(const VariantTable& table, absl::string_view op,
                                                 absl::string_view name, const DeviceCaps& caps, const OpCall& call);

// Dispatch: SelectVariant, then run.
absl::Status RunSelected(const VariantTable& table, absl::string_view op, const DeviceCaps& caps,
                         const OpCall& call, TensorView& out, cudaStream_t stream);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_KERNEL_VARIANT_H_
