// The fast cpu backend: the embedded default (DESIGN §1). One device, "cpu"
// (or several simulated ones, for placement tests),
// whose memory is host memory; its ops are multi-threaded fp32 kernels tested
// against the fp64 oracle.
#ifndef KERNELSERVE_KERNELS_CPU_CPU_BACKEND_H_
#define KERNELSERVE_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>

#include "kernels/api/backend.h"

namespace kernelserve {

// num_threads: worker threads for every op; 0 uses all hardware threads.
// num_devices: how many devices it shows (--cpu_devices); those beyond the
// first are simulated, sharing the host's memory and threads.
std::unique_ptr<Backend> CreateCpuBackend(int num_threads, int num_devices = 1);

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_CPU_BACKEND_H_
