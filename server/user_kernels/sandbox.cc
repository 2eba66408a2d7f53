#include "server/user_kernels/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace user_kernels {
namespace {

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What the child reports through its close-on-exec pipe before exec.
struct ChildReport {
  int stage;  // 1: unshare result, 2: exec (or setup) failed, 3: RLIMIT_NPROC set
  int err;
};

void Report(int fd, int stage, int err) {
  ChildReport r{stage, err};
  ssize_t n = write(fd, &r, sizeof(r));
  (void)n;
}

// Writes `text` to `path`; async-signal-safe (the child of a threaded fork).
bool WriteProcFile(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t want = static_cast<ssize_t>(strlen(text));
  const bool ok = write(fd, text, static_cast<size_t>(want)) == want;
  close(fd);
  return ok;
}

void SetLimit(int resource, rlim_t value) {
  struct rlimit rl = {value, value};
  setrlimit(resource, &rl);
}

void CloseFrom(int lowest, int keep) {
  if (keep > lowest && syscall(SYS_close_range, lowest, keep - 1, 0) == 0 &&
      syscall(SYS_close_range, keep + 1, UINT_MAX, 0) == 0) {
    return;
  }
  for (int fd = lowest; fd < 65536; ++fd) {
    if (fd != keep) close(fd);
  }
}

// Between fork and exec: only async-signal-safe calls.
[[noreturn]] void Child(const SpawnSpec& spec, char* const* argv, char* const* envp, const std::string& uid_map,
                        const std::string& gid_map, int report_fd, int null_fd) {
  setpgid(0, 0);
  bool own_user_ns = false;
  if (spec.limits.isolate_network) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) {
      // Map our own ids, or the kernel refuses to create files (EOVERFLOW).
      WriteProcFile("/proc/self/setgroups", "deny");
      WriteProcFile("/proc/self/uid_map", uid_map.c_str());
      WriteProcFile("/proc/self/gid_map", gid_map.c_str());
      own_user_ns = true;
      Report(report_fd, 1, 0);
    } else {
      Report(report_fd, 1, errno);
    }
  }
  // In a user namespace of its own the kernel counts RLIMIT_NPROC per
  // namespace (Linux >= 5.14), so the limit bounds this sandbox alone.
  if (own_user_ns && spec.limits.max_processes > 0) {
    struct rlimit rl = {static_cast<rlim_t>(spec.limits.max_processes),
                        static_cast<rlim_t>(spec.limits.max_processes)};
    Report(report_fd, 3, setrlimit(RLIMIT_NPROC, &rl) == 0 ? 0 : errno);
  }
  if (spec.limits.cpu_s > 0) SetLimit(RLIMIT_CPU, static_cast<rlim_t>(spec.limits.cpu_s + 1));
  if (spec.limits.memory_bytes > 0) SetLimit(RLIMIT_AS, static_cast<rlim_t>(spec.limits.memory_bytes));
  if (spec.limits.file_bytes > 0) SetLimit(RLIMIT_FSIZE, static_cast<rlim_t>(spec.limits.file_bytes));
  SetLimit(RLIMIT_CORE, 0);
  const int in = spec.stdin_fd >= 0 ? spec.stdin_fd : null_fd;
  const int out = spec.stdout_fd >= 0 ? spec.stdout_fd : null_fd;
  const int err = spec.stderr_fd >= 0 ? spec.stderr_fd : null_fd;
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 || chdir(spec.cwd.c_str()) != 0) {
    Report(report_fd, 2, errno);
    _exit(127);
  }
  CloseFrom(3, report_fd);
  // The server may block signals on its threads; the child starts clean.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(argv[0], argv, envp);
  Report(report_fd, 2, errno);
  _exit(127);
}

}  // namespace

absl::StatusOr<Spawned> Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("no command");
  std::vector<char*> argv, envp;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::string uid_map = absl::StrCat(getuid(), " ", getuid(), " 1\n");
  const std::string gid_map = absl::StrCat(getgid(), " ", getgid(), " 1\n");
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(report[0]);
    close(report[1]);
    close(null_fd);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", strerror(e)));
  }
  if (pid == 0) Child(spec, argv.data(), envp.data(), uid_map, gid_map, report[1], null_fd);
  setpgid(pid, pid);  // also here, so that a kill right after Spawn reaches the group
  close(report[1]);
  close(null_fd);
  Spawned s;
  s.pid = pid;
  s.network = spec.limits.isolate_network ? "network: not isolated (no report)" : "network: not isolated (off)";
  s.processes = spec.limits.max_processes <= 0 ? "processes: not limited (off)"
                                              : "processes: not limited (no user namespace of its own)";
  ChildReport r;
  int exec_err = 0;
  while (read(report[0], &r, sizeof(r)) == static_cast<ssize_t>(sizeof(r))) {
    if (r.stage == 1) {
      s.network = r.err == 0 ? "network: isolated (a new, empty network namespace)"
                             : absl::StrCat("network: not isolated: unshare(CLONE_NEWUSER|CLONE_NEWNET): ",
                                            strerror(r.err), " (see server/user_kernels/README.md)");
    } else if (r.stage == 3) {
      if (r.err != 0) {
        s.processes = absl::StrCat("processes: not limited: setrlimit(RLIMIT_NPROC): ", strerror(r.err));
      } else if (getuid() == 0) {
        // The kernel exempts uid 0 (mapped to itself in the namespace).
        s.processes = "processes: not limited (the server runs as root, which RLIMIT_NPROC does not bind)";
      } else {
        s.processes = absl::StrCat("processes: at most ", spec.limits.max_processes,
                                   " (RLIMIT_NPROC in its own user namespace)");
      }
    } else {
      exec_err = r.err;
    }
  }
  close(report[0]);
  if (exec_err != 0) {
    Reap(pid, 1);
    return absl::InternalError(absl::StrCat("cannot run ", spec.argv[0], ": ", strerror(exec_err)));
  }
  return s;
}

std::string Exit::Describe() const {
  if (timed_out) return "killed with SIGKILL at its deadline";
  if (stopped) return "killed with SIGKILL (the job was cancelled or ran out of time)";
  if (exited) return absl::StrCat("exit code ", exit_code);
  return absl::StrCat("killed by ", SignalName(signal));
}

namespace {
Exit FromStatus(int status) {
  Exit e;
  if (WIFEXITED(status)) {
    e.exited = true;
    e.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  }
  return e;
}
}  // namespace

Exit KillAndReap(pid_t pid) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return FromStatus(status);
}

Exit WaitFor(pid_t pid, double timeout_s, const std::function<bool()>& stop) {
  const double deadline = NowS() + timeout_s;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      kill(-pid, SIGKILL);  // what it left behind in its group
      return FromStatus(status);
    }
    if (r < 0 && errno != EINTR) return Exit{};
    if (NowS() > deadline) {
      Exit e = KillAndReap(pid);
      e.timed_out = true;
      return e;
    }
    if (stop && stop()) {
      Exit e = KillAndReap(pid);
      e.stopped = true;
      return e;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Exit Reap(pid_t pid, double timeout_s) { return WaitFor(pid, timeout_s, nullptr); }

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* desc = sigdescr_np(sig);
  return absl::StrCat(abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig), " (",
                      desc != nullptr ? desc : "unknown", ")");
}

absl::StatusOr<TempDir> TempDir::Create(const std::string& parent, const std::string& prefix) {
  std::string templ = absl::StrCat(parent.empty() ? "/tmp" : parent, "/", prefix, "XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", templ, ": ", strerror(errno)));
  }
  return TempDir(templ);
}

namespace {
void RemoveTree(const std::string& path) {
  if (DIR* d = opendir(path.c_str())) {
    while (struct dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string child = path + "/" + name;
      struct stat st;
      if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        RemoveTree(child);
      } else {
        unlink(child.c_str());
      }
    }
    closedir(d);
  }
  rmdir(path.c_str());
}
}  // namespace

TempDir::~TempDir() {
  if (!path_.empty()) RemoveTree(path_);
}

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string ReadTail(const std::string& path, size_t max) {
  absl::StatusOr<std::string> bytes = ReadFileBytes(path);
  if (!bytes.ok()) return "";
  std::string s = std::move(*bytes);
  if (s.size() <= max) return s;
  return absl::StrCat("[... ", s.size() - max, " bytes cut ...]\n", s.substr(s.size() - max));
}

}  // namespace user_kernels
}  // namespace kernelserve
