// Building users' kernels (kernels/api/user_kernel_abi.h) into shared
// objects (cpu, cuda) or AMD GPU code objects (hip): the node's toolchain
// found at start-up (g++ for cpu, nvcc for cuda, clang for hip), flags from an allow-list, the compiler in a sandboxed child process
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
  // --user_kernel_hipcc; "": clang++-19, else clang++ on PATH, else /opt/rocm/llvm/bin/clang++
  std::string hipcc;
  std::string worker_hip;  // the HIP worker; "": kernel_worker_hip beside the server binary
  // The gfx architecture HIP sources are built for and code objects must
  // target when the backend does not name its devices' (--user_kernel_hip_arch).
  std::string hip_arch = "gfx942";
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
  std::string object_path;  // in the cache: the shared object, cubin, PTX or code object
  std::string format = "so";  // "so", "cubin", "ptx" or "hsaco": how the worker loads it
  pb::CudaLaunch launch;      // device code (not "so"): the submission's launch geometry
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
  // kernel for `op`, PTX's directives and entry; an AMD code object's
  // machine, gfx architecture (`device_arch`, the server's devices'; "":
  // options().hip_arch) and kernel descriptor), device code's launch
  // geometry (a HIP source's too). INVALID_ARGUMENT naming `field`
  // (spec.user_kernels[i]...) and what was expected; FAILED_PRECONDITION for
  // another backend's kernel (a hip kernel on a server without HIP devices).
  absl::Status Check(const pb::UserKernel& kernel, pb::BenchOp op, const std::string& server_backend,
                     const std::string& field, const std::string& device_arch = "") const;

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
// nullptr for an op without an entry point.
const UserAbiEntry* FindUserAbiEntry(pb::BenchOp op);

// A cubin's and a PTX's own checks (Check calls them with field
// spec.user_kernels[i].cubin / .ptx; the launch with ...launch).
absl::Status CheckCubin(const std::string& bytes, const UserAbiEntry& entry, const std::string& field);
absl::Status CheckPtx(const std::string& text, const UserAbiEntry& entry, const std::string& field);
// An AMD GPU code object (UserKernel.code_object) for `device_arch` ("gfx942"):
// a linked (ET_DYN) 64-bit little-endian HSA ELF for EM_AMDGPU whose e_flags
// name that processor, its sections inside the file, exporting the op's
// kernel descriptor ks_user_<op>_v1_kernel.kd.
absl::Status CheckCodeObject(const std::string& bytes, const UserAbiEntry& entry, const std::string& device_arch,
                             const std::string& field);
// The device's limits for `backend` (cuda: sm_90; hip: gfx942).
absl::Status CheckLaunch(const pb::CudaLaunch& launch, const std::string& backend, const std::string& field);

// The gfx architecture of a HIP device as the HIP backend reports it in
// DeviceInfo::driver (the one whose code objects the runtime loaded there,
// "...; code objects gfx942"), or "" when it does not say.
std::string HipArchFromDriver(const std::string& driver);

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
