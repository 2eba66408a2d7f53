#include "server/user_kernels/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace user_kernels {
namespace {

// A shell fork bomb with a ceiling: starts up to 40 sleeping children and
// prints how many it got. Returns "" on success, else what went wrong.
std::string RunForkBombUnderLimit(int max_processes) {
  absl::StatusOr<TempDir> dir = TempDir::Create("/tmp", "ks_sandbox_test_");
  if (!dir.ok()) return std::string(dir.status().message());
  const std::string out_path = dir->path() + "/out";
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) return "cannot create the output file";
  SpawnSpec s;
  s.argv = {"/bin/sh", "-c",
            "n=0; while [ $n -lt 40 ]; do sleep 30 & n=$((n+1)); echo $n; done 2>/dev/null; exit 0"};
  s.env = {"PATH=/usr/bin:/bin"};
  s.cwd = dir->path();
  s.limits.max_processes = max_processes;
  s.stdout_fd = out;
  absl::StatusOr<Spawned> p = Spawn(s);
  close(out);
  if (!p.ok()) return std::string(p.status().message());
  const Exit e = WaitFor(p->pid, 20, nullptr);
  if (e.timed_out) return "the shell never finished";
  if (!absl::StartsWith(p->network, "network: isolated")) {
    return "no user namespace here (" + p->network + "); cannot check RLIMIT_NPROC";
  }
  if (p->processes != "processes: at most 8 (RLIMIT_NPROC in its own user namespace)") {
    return "processes: " + p->processes;
  }
  absl::StatusOr<std::string> text = ReadFileBytes(out_path);
  if (!text.ok()) return "no output";
  int started = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    if (!absl::SimpleAtoi(line, &started)) return "bad output line";
  }
  // Dash may count a failed fork too; 8 processes can never hold 40.
  if (started >= 40) return "the shell started all 40 children: " + std::to_string(started);
  return "";
}

// RLIMIT_NPROC binds neither root nor a user without a namespace of its
// own; as root the check runs in a child that drops to nobody first.
TEST(SandboxTest, ForkBombStopsAtTheProcessLimit) {
  if (getuid() != 0) {
    const std::string why = RunForkBombUnderLimit(8);
    if (absl::StrContains(why, "no user namespace here")) GTEST_SKIP() << why;
    EXPECT_EQ(why, "");
    return;
  }
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(pipefd[0]);
    std::string why;
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
      why = "cannot drop to uid 65534";
    } else {
      why = RunForkBombUnderLimit(8);
    }
    if (why.empty()) why = "ok";
    ssize_t n = write(pipefd[1], why.data(), why.size());
    (void)n;
    _exit(0);
  }
  close(pipefd[1]);
  std::string why;
  char buf[512];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) why.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (absl::StrContains(why, "no user namespace here") || why == "cannot drop to uid 65534") {
    GTEST_SKIP() << why;
  }
  EXPECT_EQ(why, "ok");
}

TEST(SandboxTest, RootAndNoNamespaceSayTheLimitDoesNotApply) {
  SpawnSpec s;
  s.argv = {"/bin/true"};
  s.cwd = "/";
  s.limits.max_processes = 8;
  s.limits.isolate_network = false;
  absl::StatusOr<Spawned> p = Spawn(s);
  ASSERT_TRUE(p.ok()) << p.status();
  Reap(p->pid, 5);
  EXPECT_EQ(p->processes, "processes: not limited (no user namespace of its own)");
  s.limits.isolate_network = true;
  p = Spawn(s);
  ASSERT_TRUE(p.ok()) << p.status();
  Reap(p->pid, 5);
  if (!absl::StartsWith(p->network, "network: isolated")) GTEST_SKIP() << p->network;
  if (getuid() == 0) {
    EXPECT_EQ(p->processes, "processes: not limited (the server runs as root, which RLIMIT_NPROC does not bind)");
  } else {
    EXPECT_EQ(p->processes, "processes: at most 8 (RLIMIT_NPROC in its own user namespace)");
  }
}

// Processes of group `pgid` that are not zombies, waiting up to 2 s for the
// SIGKILL to land.
int LiveMembersOfGroup(pid_t pgid) {
  int live = 0;
  for (int attempt = 0; attempt < 200; ++attempt) {
    live = 0;
    if (DIR* d = opendir("/proc")) {
      while (struct dirent* e = readdir(d)) {
        int pid = 0;
        if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
        absl::StatusOr<std::string> stat = ReadFileBytes(absl::StrCat("/proc/", pid, "/stat"));
        if (!stat.ok()) continue;
        // pid (comm) state ppid pgrp ...
        const size_t close_paren = stat->rfind(')');
        if (close_paren == std::string::npos) continue;
        std::vector<std::string> f = absl::StrSplit(stat->substr(close_paren + 2), ' ');
        int group = 0;
        if (f.size() > 2 && absl::SimpleAtoi(f[2], &group) && group == pgid && f[0] != "Z") ++live;
      }
      closedir(d);
    }
    if (live == 0) return 0;
    usleep(10000);
  }
  return live;
}

TEST(SandboxTest, DeadlineKillsTheWholeGroup) {
  SpawnSpec s;
  s.argv = {"/bin/sh", "-c", "sleep 30 & sleep 30"};
  s.env = {"PATH=/usr/bin:/bin"};
  s.cwd = "/";
  absl::StatusOr<Spawned> p = Spawn(s);
  ASSERT_TRUE(p.ok()) << p.status();
  const Exit e = WaitFor(p->pid, 0.3, nullptr);
  EXPECT_TRUE(e.timed_out);
  EXPECT_EQ(e.Describe(), "killed with SIGKILL at its deadline");
  // Nothing of its group still runs: the orphaned `sleep` may linger as a
  // zombie until its new parent reaps it, so check the state, not kill(0).
  EXPECT_EQ(LiveMembersOfGroup(p->pid), 0);
}

TEST(SandboxTest, MemoryLimitFailsARunawayAllocation) {
  SpawnSpec s;
  // sh's variable grows until the address-space limit refuses it.
  s.argv = {"/bin/sh", "-c", "x=a; while true; do x=$x$x; done"};
  s.env = {"PATH=/usr/bin:/bin"};
  s.cwd = "/";
  s.limits.memory_bytes = 64 << 20;
  absl::StatusOr<Spawned> p = Spawn(s);
  ASSERT_TRUE(p.ok()) << p.status();
  const Exit e = WaitFor(p->pid, 20, nullptr);
  EXPECT_FALSE(e.timed_out) << "an allocation past RLIMIT_AS should have failed";
  EXPECT_FALSE(e.exited && e.exit_code == 0) << e.Describe();
}

}  // namespace
}  // namespace user_kernels
}  // namespace kernelserve
