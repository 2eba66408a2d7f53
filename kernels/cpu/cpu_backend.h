// The fast cpu backend: the embedded default (DESIGN §1). One device, "cpu",
// whose memory is host memory; its ops are multi-threaded fp32 kernels tested
// against the fp64 oracle.
#ifndef KERNELSERVE_KERNELS_CPU_CPU_BACKEND_H_
#define KERNELSERVE_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>

#include "kernels/api/backend.h"

namespace kernelserve {

// num_threads: worker threads for every op; 0 uses all hardware threads.
std::unique_ptr<Backend> CreateCpuBackend(int num_threads);

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_CPU_BACKEND_H_
