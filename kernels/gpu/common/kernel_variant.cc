#include "kernels/gpu/common/kernel_variant.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/gpu/common/gpu_status.h"

namespace kernelserve {
namespace gpu {

absl::StatusOr<DeviceCaps> QueryDeviceCaps(int device) {
  DeviceCaps caps;
  int optin = 0;
  KS_RETURN_IF_ERROR(GpuStatus(cudaDeviceGetAttribute(&caps.cc_major, cudaDevAttrComputeCapabilityMajor, device),
                               "cudaDeviceGetAttribute(compute capability)"));
  KS_RETURN_IF_ERROR(GpuStatus(cudaDeviceGetAttribute(&caps.cc_minor, cudaDevAttrComputeCapabilityMinor, device),
                               "cudaDeviceGetAttribute(compute capability)"));
  KS_RETURN_IF_ERROR(GpuStatus(cudaDeviceGetAttribute(&caps.sms, cudaDevAttrMultiProcessorCount, device),
                               "cudaDeviceGetAttribute(multiprocessors)"));
  KS_RETURN_IF_ERROR(GpuStatus(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                               "cudaDeviceGetAttribute(shared memory per block)"));
  caps.smem_per_block_optin = optin;
  return caps;
}

std::string NeedsSm90a(const DeviceCaps& caps) {
  if (caps.cc_major == 9 && caps.cc_minor == 0) return "";
  return absl::StrCat("this build's kernels are for sm_90a; the device is compute capability ", caps.cc_major, ".",
                      caps.cc_minor);
}

absl::StatusOr<const KernelVariant*> SelectVariant(const VariantTable& table, absl::string_view op,
                                                   const DeviceCaps& caps, const OpCall& call) {
  std::vector<std::string> why;
  for (const KernelVariant& v : table) {
    std::string no = v.unsupported(caps, call);
    if (no.empty() && v.declines != nullptr) no = v.declines(caps, call);
    if (no.empty()) return &v;
    why.push_back(absl::StrCat(v.name, ": ", no));
  }
  return absl::UnimplementedError(
      absl::StrCat(op, ": no " KS_GPU_VENDOR " kernel serves this call (", absl::StrJoin(why, "; "), ")"));
}

absl::StatusOr<const KernelVariant*> FindVariant(const VariantTable& table, absl::string_view op,
                                                 absl::string_view name, const DeviceCaps& caps,
                                                 const OpCall& call) {
  std::vector<std::string> names;
  for (const KernelVariant& v : table) {
    if (name != v.name) {
      names.push_back(v.name);
      continue;
    }
    const std::string no = v.unsupported(caps, call);
    if (!no.empty()) return absl::UnimplementedError(absl::StrCat(op, " kernel ", name, ": ", no));
    return &v;
  }
  return absl::NotFoundError(absl::StrCat(op, ": no " KS_GPU_VENDOR " kernel \"", name, "\"; the table has ",
                                          absl::StrJoin(names, ", ")));
}

absl::Status RunSelected(const VariantTable& table, absl::string_view op, const DeviceCaps& caps,
                         const OpCall& call, TensorView& out, cudaStream_t stream) {
  KS_ASSIGN_OR_RETURN(const KernelVariant* v, SelectVariant(table, op, caps, call));
  return v->run(call, out, stream);
}

}  // namespace gpu
}  // namespace kernelserve
