// Building users' kernels (kernels/api/user_kernel_abi.h) into shared
// objects: the node's toolchain found at start-up (g++ for cpu, nvcc for
// cuda), flags from an allow-list, the compiler in a sandboxed child process
// (sandbox.h: CPU time, memory and file-size limits, a wall-clock timeout, a
// private temp dir, no network where the kernel allows it), the compile log
// kept for the user, and a content-addressed cache of builds keyed by
// sha256(backend, toolchain identity, ABI version, flags, source).
#ifndef KERNELSERVE_SERVER_USER_KERNELS_BUILDER_H_
#define KERNELSERVE_SERVER_USER_KERNELS_BUILDER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernelserve/v1/bench.pb.h"

namespace kernelserve {
namespace user_kernels {

namespace pb = ::kernelserve::v1;

struct UserKernelOptions {
  bool enabled = true;
  std::string cxx;     // --user_kernel_cxx; "": the first of g++, c++, clang++ on PATH
  std::string nvcc;    // --user_kernel_nvcc; "": nvcc on PATH, else /usr/local/cuda/bin/nvcc
  std::string worker;  // --user_kernel_worker; "": kernel_worker beside the server binary
  std::string worker_cuda;  // the CUDA worker; "": kernel_worker_cuda beside the server binary
  std::string cache_dir;    // "": <data_dir>/user_kernels, or a temp dir without one
  std::string work_dir = "/tmp";  // private build and run dirs are made here
  int64_t max_source_bytes = 1 << 20;
  int64_t max_object_bytes = 64 << 20;
  double compile_timeout_s = 60;
  int64_t compile_memory_bytes = int64_t{2} << 30;
  size_t max_log_bytes = 64 << 10;
  double launch_deadline_s = 10;  // the gate's launch; timing gets this plus 10x its launches
  int64_t worker_memory_bytes = int64_t{4} << 30;  // RLIMIT_AS of a cpu worker
  // RLIMIT_NPROC (processes and threads at once) in the sandbox's own user
  // namespace: nvcc runs its stages one after another, a CUDA context starts
  // a few threads; a fork bomb stops here.
  int64_t compile_max_processes = 256;
  int64_t worker_max_processes = 128;
  bool isolate_network = true;
  // After a worker's abnormal death (a signal, a missed deadline, a device
  // error) the device is probed (device_probe.h): this operator command
  // (--user_kernel_health_probe, run by /bin/sh -c; exit 0 = healthy), or
  // "" for a fresh worker process (`kernel_worker --probe`).
  std::string health_probe;
  double health_probe_timeout_s = 30;
  // Every this many seconds a device that failed its probe is probed again
  // and returns to service when it passes (--user_kernel_reprobe_interval_s;
  // 0: off, only DeviceService.Probe brings it back).
  double reprobe_interval_s = 300;
};

struct Toolchain {
  std::string path;      // "" when none was found
  std::string identity;  // path and the first line of `--version`
  std::string why_missing;
};

struct BuiltKernel {
  std::string object_path;  // in the cache: the shared object, cubin or PTX
  std::string format = "so";  // "so", "cubin" or "ptx": how the worker loads it
  pb::CudaLaunch launch;      // cubin and ptx: the submission's launch geometry
  std::string source_sha256;  // of the source or the submitted object
  std::string build_key;      // the cache key
  std::string log;            // compiler output (and the network note)
  bool cached = false;
};

class KernelBuilder {
 public:
  // Finds the toolchains (logged by the caller through Describe()).
  static std::unique_ptr<KernelBuilder> Create(UserKernelOptions options, const std::string& data_dir);

  const UserKernelOptions& options() const { return options_; }
  const Toolchain& toolchain(const std::string& backend) const;
  std::string Describe() const;  // "cpu: /usr/bin/g++ (g++ (Debian 12.2.0-14) 12.2.0); cuda: none (...)"

  // At Submit, nothing compiled yet: the name, the backend, the code's size,
  // every flag, a prebuilt object's header (a cubin's machine, arch and entry
  // kernel for `op`, PTX's directives and entry), a cubin's or PTX's launch
  // geometry. INVALID_ARGUMENT naming `field` (spec.user_kernels[i]...) and
  // what was expected; FAILED_PRECONDITION for another backend's kernel.
  absl::Status Check(const pb::UserKernel& kernel, pb::BenchOp op, const std::string& server_backend,
                     const std::string& field) const;

  // The kernel's shared object, from the cache or compiled now. A source
  // that does not compile is INVALID_ARGUMENT with the compiler's log; no
  // toolchain is FAILED_PRECONDITION; a compile past its time limit
  // DEADLINE_EXCEEDED. `stop` returning true kills the compiler (CANCELLED).
  absl::StatusOr<BuiltKernel> Build(const pb::UserKernel& kernel, const std::string& backend,
                                    const std::function<bool()>& stop) const;

  // The flags a kernel of `backend` may pass, for messages and docs.
  static std::string AllowedFlags(const std::string& backend);

 private:
  KernelBuilder(UserKernelOptions options, std::string cache_dir);
  absl::StatusOr<BuiltKernel> Compile(const pb::UserKernel& kernel, const std::string& backend,
                                      const std::string& key, const std::function<bool()>& stop) const;

  const UserKernelOptions options_;
  const std::string cache_dir_;
  std::map<std::string, Toolchain> toolchains_;  // by backend
};

// What the ABI (kernels/api/user_kernel_abi.h) names for an op.
struct UserAbiEntry {
  pb::BenchOp op;
  const char* entry;          // the shared object's: ks_user_attention_v1
  const char* device_kernel;  // a cubin's / PTX's: ks_user_attention_v1_kernel
  const char* args;           // ks_attention_args_v1
  size_t args_bytes;          // sizeof it: the device kernel's one parameter
};
// nullptr for an op without an entry point (moe_layer).
const UserAbiEntry* FindUserAbiEntry(pb::BenchOp op);

// A cubin's and a PTX's own checks (Check calls them with field
// spec.user_kernels[i].cubin / .ptx; the launch with ...launch).
absl::Status CheckCubin(const std::string& bytes, const UserAbiEntry& entry, const std::string& field);
absl::Status CheckPtx(const std::string& text, const UserAbiEntry& entry, const std::string& field);
absl::Status CheckLaunch(const pb::CudaLaunch& launch, const std::string& field);

// The variant name of a user kernel: "user:<name>".
std::string UserVariantName(const pb::UserKernel& kernel);
// Whether a variant name is a user kernel's.
bool IsUserVariantName(const std::string& name);

// The headers a submitted source may include, by include path
// ("kernels/api/user_kernel_abi.h"); generated from the real headers.
const std::map<std::string, std::string>& AbiHeaders();

}  // namespace user_kernels
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_USER_KERNELS_BUILDER_H_
