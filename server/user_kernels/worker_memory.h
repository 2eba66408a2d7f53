// Where a kernel worker keeps the job's tensors for the user kernel: host
// memory with guard pages (host_memory.cc, the cpu worker) or device memory
// with canaries (cuda_memory.cc and hip_memory.cc, the cuda and hip workers). kernel_worker.cc links
// one of them.
#ifndef KERNELSERVE_SERVER_USER_KERNELS_WORKER_MEMORY_H_
#define KERNELSERVE_SERVER_USER_KERNELS_WORKER_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace user_kernels {

// A prebuilt device kernel (a cubin or PTX, kernels/api/user_kernel_abi.h)
// and the launch the submission gave it.
struct DeviceKernelSpec {
  std::string path;
  bool ptx = false;
  std::string name;       // ks_user_<op>_v1_kernel
  size_t args_bytes = 0;  // sizeof the op's args struct, its one parameter
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t shared_bytes = 0;
};

// A loaded device kernel: launch(args) enqueues it on the memory's stream
// with *args (the op's args struct) as its parameter and returns 0, or an
// error code that describe() explains.
struct DeviceLaunch {
  std::function<int(void* args)> launch;
  std::function<std::string(int)> describe;
};

class WorkerMemory {
 public:
  virtual ~WorkerMemory() = default;
  // A copy of an input the kernel may only read.
  virtual absl::StatusOr<const void*> Input(const std::string& name, const void* bytes, size_t n) = 0;
  // The output (once), bracketed so that a write outside it is found.
  virtual absl::StatusOr<void*> Output(size_t bytes) = 0;
  // Scratch the kernel may use as it likes (the MoE layer's workspace), in
  // the same memory as the tensors.
  virtual absl::StatusOr<void*> Scratch(size_t bytes) = 0;
  virtual absl::Status Poison() = 0;  // NaN (0xFF bytes) in every output element
  // After launches: wait for them (device errors are the kernel's) and check
  // what brackets the output.
  virtual absl::Status Check() = 0;
  virtual absl::StatusOr<std::string> ReadOutput() = 0;
  virtual void* stream() = 0;  // the ABI's stream argument
  // The time of `n` launches in ms (host clock or device events), checked after.
  virtual absl::StatusOr<double> Time(const std::function<int()>& launch, int n) = 0;
  // l2_flush: copies `bytes` (the job's flush size, the cache the server's
  // backend reports) between two buffers of this memory, allocated on first
  // use, and waits for the copy, so that the next launch starts with the
  // cache holding none of the kernel's tensors, as a built-in variant does.
  virtual absl::Status FlushCache(size_t bytes) = 0;
  // Method graph: one launch captured into a device graph, instantiated and
  // replayed `replays` times, timed with device events; ms for all replays.
  // FAILED_PRECONDITION or UNIMPLEMENTED: the launch cannot be captured (the
  // variant is reported untimed, as a built-in one is); any other error is
  // the kernel's.
  virtual absl::StatusOr<double> TimeGraph(const std::function<int()>& launch, int replays) {
    (void)launch;
    (void)replays;
    return absl::UnimplementedError(absl::StrCat(Describe(), ": no graph capture"));
  }
  // Loads a cubin or PTX (cuda) or an AMD code object (hip) into this
  // memory's context: the
  // kernel's checks against the device (its parameter's size, threads per
  // block, shared memory) fail as INVALID_ARGUMENT naming the launch field.
  virtual absl::StatusOr<DeviceLaunch> LoadDeviceKernel(const DeviceKernelSpec& spec) = 0;
  // "host memory, read-only inputs, guard pages", for the server's notes.
  virtual std::string Describe() const = 0;
};

// The canary blocks of a device output read back (`before` and `after` its
// `n` bytes each, filled with `canary`): which one a kernel wrote into.
inline absl::Status CheckCanaryBlocks(const uint8_t* before, const uint8_t* after, size_t n, uint8_t canary) {
  for (size_t i = 0; i < n; ++i) {
    if (after[i] != canary) {
      return absl::AbortedError(
          absl::StrCat("the kernel wrote outside its output: byte ", i, " past its end (canary bytes changed)"));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (before[i] != canary) {
      return absl::AbortedError(absl::StrCat("the kernel wrote outside its output: ", n - i,
                                             " bytes before its start (canary bytes changed)"));
    }
  }
  return absl::OkStatus();
}

// `device`: the job's device (the CUDA or HIP ordinal on cuda, hip).
std::unique_ptr<WorkerMemory> MakeWorkerMemory(int device);

}  // namespace user_kernels
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_USER_KERNELS_WORKER_MEMORY_H_
