#include "kernels/gpu/hip/hip_code_objects.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace gpu {
namespace hip {

std::string FindKernelSymbol(const CodeObject& object, absl::string_view kernel) {
  // Itanium mangling writes an identifier as <length><name>; the E, I or N
  // after it ends the name, so "MlaMergeKernel" does not match
  // "MlaMergeKernelHalf".
  const std::string id = absl::StrCat(kernel.size(), kernel);
  for (const std::string& s : object.kernels) {
    if (s == kernel) return s;
    for (size_t at = s.find(id); at != std::string::npos; at = s.find(id, at + 1)) {
      // (The digit before may be the end of the previous component, as in
      // "_GLOBAL__N_114MlaMergeKernel".)
      const size_t end = at + id.size();
      if (end < s.size() && (s[end] == 'E' || s[end] == 'I')) return s;
    }
  }
  return "";
}

}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
