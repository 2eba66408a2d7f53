// Child processes for user kernels: the compiler and the kernel worker run
// in processes of their own, with resource limits, a private working
// directory and, where the kernel allows it, no network. Nothing a user
// submits runs in the server process.
#ifndef KERNELSERVE_SERVER_USER_KERNELS_SANDBOX_H_
#define KERNELSERVE_SERVER_USER_KERNELS_SANDBOX_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kernelserve {
namespace user_kernels {

struct SandboxLimits {
  double cpu_s = 60;           // RLIMIT_CPU, per process
  int64_t memory_bytes = 0;    // RLIMIT_AS; 0: none (a CUDA process maps far more than it uses)
  int64_t file_bytes = 64 << 20;  // RLIMIT_FSIZE: the largest file it may write
  bool isolate_network = true;    // unshare(CLONE_NEWUSER | CLONE_NEWNET) when the kernel allows it
  // RLIMIT_NPROC: processes and threads it may have at once (a fork bomb's
  // forks fail). Applied only inside the new user namespace, where the
  // kernel counts the sandbox's own processes; outside it the count would be
  // every process of the server's user. 0: none.
  int64_t max_processes = 0;
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is an absolute path
  std::vector<std::string> env;   // "NAME=value"; nothing else is inherited
  std::string cwd;
  SandboxLimits limits;
  int stdin_fd = -1;   // -1: /dev/null
  int stdout_fd = -1;  // -1: /dev/null
  int stderr_fd = -1;  // -1: /dev/null
};

struct Spawned {
  pid_t pid = -1;  // also its process group
  // "network: isolated (new network namespace)" or why not.
  std::string network;
  // "processes: at most N (RLIMIT_NPROC in its user namespace)" or why not.
  std::string processes;
};

// fork + exec with the limits, in a process group of its own (so a timeout
// kills the compiler's children too); core dumps off. INTERNAL when the
// exec fails (the message says why).
absl::StatusOr<Spawned> Spawn(const SpawnSpec& spec);

struct Exit {
  bool exited = false;  // exit_code valid
  int exit_code = 0;
  int signal = 0;        // killed by this signal
  bool timed_out = false;  // killed by us (SIGKILL) at the deadline
  bool stopped = false;    // killed by us because `stop` said so
  std::string Describe() const;  // "exit code 1", "killed by SIGSEGV (Segmentation fault)"
};

// Waits for `pid`, killing its process group with SIGKILL after `timeout_s`
// or as soon as `stop` returns true (polled every 10 ms).
Exit WaitFor(pid_t pid, double timeout_s, const std::function<bool()>& stop);
// SIGKILL to the group, then reaps it.
Exit KillAndReap(pid_t pid);
// Reaps `pid` if it has exited (blocking up to `timeout_s`), else kills it.
Exit Reap(pid_t pid, double timeout_s);

// "SIGSEGV (Segmentation fault)".
std::string SignalName(int sig);

// A private directory under `parent` (mkdtemp), removed with its contents by
// the destructor.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create(const std::string& parent, const std::string& prefix);
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

absl::StatusOr<std::string> ReadFileBytes(const std::string& path);
absl::Status WriteFile(const std::string& path, const std::string& bytes);
// At most `max` bytes from the end of the file (with a note when cut).
std::string ReadTail(const std::string& path, size_t max);

}  // namespace user_kernels
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_USER_KERNELS_SANDBOX_H_
