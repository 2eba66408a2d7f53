#include "server/bench/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kernelserve {

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "kernelserve", "/", path);
}

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = absl::StrCat(base ? base : "/tmp", "/restartXXXXXX");
  char* d = mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

::kernelserve::v1::BenchJobSpec SmallAttentionSpec(const std::string& name) {
  ::kernelserve::v1::BenchJobSpec s;
  s.set_name(name);
  s.set_op(::kernelserve::v1::OP_ATTENTION);
  auto* a = s.mutable_attention();
  a->set_batch(1);
  a->set_heads_q(2);
  a->set_seq_q(64);
  a->set_head_dim(64);
  a->set_causal(true);
  s.add_variants("cpu");
  s.mutable_method()->set_warmup(2);
  s.mutable_method()->set_iters(4);
  return s;
}

int Kernelctl(const std::string& target, const std::string& args, std::string* out) {
  const std::string cmd = absl::StrCat(Runfile("client/kernelctl"), " --server=", target, " ", args, " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  out->clear();
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

ServerProcess::ServerProcess(const std::string& data_dir, const std::string& log,
                             const std::vector<std::string>& extra)
    : log_(log) {
  std::vector<std::string> args = {Runfile("server/kernelserve"),  "--listen=127.0.0.1:0",
                                   "--backend=cpu",                "--cpu_threads=2",
                                   "--data_dir=" + data_dir,       "--enable_test_variants",
                                   "--bench_min_sustained_s=0.05", "--shutdown_grace=1s"};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    dup2(fd, 1);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // The port is in the start-up line of the log.
  const std::regex re("listening on port ([0-9]+)");
  for (int i = 0; i < 600 && port_ == 0; ++i) {
    std::smatch m;
    const std::string text = ReadAll(log_);
    if (std::regex_search(text, m, re)) port_ = std::stoi(m[1]);
    if (port_ == 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {  // it exited: it will not start
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

int ServerProcess::Kill(int sig) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

std::string ServerProcess::target() const { return absl::StrCat("127.0.0.1:", port_); }

}  // namespace kernelserve
