// The device health check after a user kernel's worker died abnormally
// (worker_client.h WorkerFault: a signal, a missed deadline, a device error).
// The kernel ran in a process of its own, so the server's context is
// untouched, but the device itself may not be: a fresh process shows whether
// it still takes work. The server marks the device UNHEALTHY when the probe
// fails (server/server.cc) and the scheduler refuses jobs placed on it.
#ifndef KERNELSERVE_SERVER_USER_KERNELS_DEVICE_PROBE_H_
#define KERNELSERVE_SERVER_USER_KERNELS_DEVICE_PROBE_H_

#include <string>

#include "absl/status/status.h"
#include "server/user_kernels/builder.h"

namespace kernelserve {
namespace user_kernels {

// Probes `device` of `backend`: with options.health_probe set, that operator
// command through /bin/sh -c, with KERNELSERVE_DEVICE=<device> and
// KERNELSERVE_BACKEND=<backend> in its environment (and PATH, LANG,
// CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH as the server has them); otherwise
// the backend's worker binary as `kernel_worker --probe --device=N` (a
// context of its own, a tiny allocation, a copy there and back, a
// synchronisation). Exit code 0 within options.health_probe_timeout_s is
// healthy: OK. Otherwise UNAVAILABLE saying what ran and how it ended (exit
// code, signal or timeout) with the end of its output; FAILED_PRECONDITION
// when the worker binary is missing.
absl::Status ProbeDevice(const UserKernelOptions& options, const std::string& backend, int device);

}  // namespace user_kernels
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_USER_KERNELS_DEVICE_PROBE_H_
