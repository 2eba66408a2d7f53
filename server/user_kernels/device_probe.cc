#include "server/user_kernels/device_probe.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "server/user_kernels/sandbox.h"
#include "server/user_kernels/worker_client.h"

namespace kernelserve {
namespace user_kernels {

absl::Status ProbeDevice(const UserKernelOptions& options, const std::string& backend, int device) {
  KS_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create(options.work_dir, "ks-uk-probe-"));
  SpawnSpec s;
  std::string what;
  s.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C", absl::StrCat("HOME=", dir.path()),
           absl::StrCat("TMPDIR=", dir.path())};
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"}) {
    if (const char* v = getenv(name)) s.env.push_back(absl::StrCat(name, "=", v));
  }
  if (!options.health_probe.empty()) {
    // The operator's own command: trusted, so it keeps the node's network
    // and has no limits but the timeout (it may query the driver, a BMC...).
    s.argv = {"/bin/sh", "-c", options.health_probe};
    s.env.push_back(absl::StrCat("KERNELSERVE_DEVICE=", device));
    s.env.push_back(absl::StrCat("KERNELSERVE_BACKEND=", backend));
    s.limits.isolate_network = false;
    what = absl::StrCat("the health probe command (--user_kernel_health_probe) for device ", device);
  } else {
    std::string worker = WorkerBinary(options, backend);
    char resolved[PATH_MAX];
    if (realpath(worker.c_str(), resolved) != nullptr) worker = resolved;
    if (access(worker.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the kernel worker ", worker, " is missing, so device ", device,
                       " cannot be probed (set --user_kernel_worker or --user_kernel_health_probe)"));
    }
    s.argv = {worker, "--probe", absl::StrCat("--device=", device)};
    s.limits.isolate_network = options.isolate_network;
    s.limits.memory_bytes = backend == "cpu" ? options.worker_memory_bytes : 0;
    s.limits.max_processes = options.worker_max_processes;
    what = absl::StrCat("the health probe of device ", device, " (", worker, " --probe)");
  }
  s.limits.cpu_s = 0;  // the wall-clock timeout bounds it
  s.limits.file_bytes = 16 << 20;
  s.cwd = dir.path();
  const std::string log = dir.path() + "/probe.log";
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  s.stdout_fd = log_fd;
  s.stderr_fd = log_fd;
  absl::StatusOr<Spawned> p = Spawn(s);
  if (log_fd >= 0) close(log_fd);
  if (!p.ok()) return absl::UnavailableError(absl::StrCat(what, " did not start: ", p.status().message()));
  const Exit e = WaitFor(p->pid, options.health_probe_timeout_s, nullptr);
  if (e.exited && e.exit_code == 0) return absl::OkStatus();
  const std::string out(absl::StripAsciiWhitespace(ReadTail(log, 1024)));
  const std::string how = e.timed_out ? absl::StrFormat("did not finish within %.3g s (--user_kernel_health_probe_timeout_s)",
                                                        options.health_probe_timeout_s)
                                      : absl::StrCat("failed (", e.Describe(), ")");
  return absl::UnavailableError(
      absl::StrCat(what, " ", how, out.empty() ? "" : absl::StrCat("; its output ends: ", out)));
}

}  // namespace user_kernels
}  // namespace kernelserve
