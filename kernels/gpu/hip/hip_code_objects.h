// The AMD code objects embedded in this binary: each is a linked gfx code
// object (an ELF that hipModuleLoadData takes), with the names of the kernels
// it holds, written by bazel/hip_embed.sh from ks_hip_device_code's .hsaco
// files when the build found the AMD device compiler.
#ifndef KERNELSERVE_KERNELS_GPU_HIP_HIP_CODE_OBJECTS_H_
#define KERNELSERVE_KERNELS_GPU_HIP_HIP_CODE_OBJECTS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kernelserve {
namespace gpu {
namespace hip {

struct CodeObject {
  const char* name;  // the file it came from, e.g. "mla_decode_a16w8_hip_gfx942"
  const char* arch;  // "gfx942"
  const unsigned char* data;
  size_t size;
  std::vector<std::string> kernels;  // symbol names (C or mangled)
};

// Defined by the generated registry (one per binary).
const std::vector<CodeObject>& EmbeddedCodeObjects();

// The symbol of `kernel` in `object`: the symbol itself when it is a C name,
// else the mangled name whose identifier is `kernel` ("...14MlaMergeKernelE...").
// Empty when the object has none.
std::string FindKernelSymbol(const CodeObject& object, absl::string_view kernel);

}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_HIP_HIP_CODE_OBJECTS_H_
