// Backend selection at start-up (DESIGN §1): the one place that knows every
// backend. The server links this and sees only the Backend interface.
#ifndef KERNELSERVE_KERNELS_BACKENDS_H_
#define KERNELSERVE_KERNELS_BACKENDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/api/backend.h"

namespace kernelserve {

struct BackendOptions {
  int cpu_threads = 0;  // 0: all hardware threads
  int cpu_devices = 1;  // devices the cpu backend shows (simulated beyond the first)
};

// Every backend name and whether this binary has it: cpu, cuda, hip (`auto`
// tries the GPU ones in this order and falls back to cpu).
std::vector<BackendBuild> BuiltBackends();

// name: "auto", "cpu", "cuda" or "hip". "auto" takes a GPU backend when one
// is built in and a device answers, and the CPU backend otherwise; `note`
// (if not null) receives a line saying what was chosen and why. A GPU
// backend that this binary lacks is UNIMPLEMENTED with the reason.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view name,
                                                       const BackendOptions& options,
                                                       std::string* note = nullptr);

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_BACKENDS_H_
