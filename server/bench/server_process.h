// For tests: the real kernelserve binary (a Bazel runfile) as a subprocess
// on 127.0.0.1:0 with the CPU backend, and the helpers such tests share.
#ifndef KERNELSERVE_SERVER_BENCH_SERVER_PROCESS_H_
#define KERNELSERVE_SERVER_BENCH_SERVER_PROCESS_H_

#include <sys/types.h>

#include <csignal>

#include <string>
#include <vector>

#include "kernelserve/v1/bench.pb.h"

namespace kernelserve {

std::string Runfile(const std::string& path);  // under TEST_SRCDIR
std::string TempDir();                         // a fresh directory under TEST_TMPDIR
std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::string& text);
// A small causal attention job (1x2x64, d64) of variant cpu, method kernel
// with 2 warm-up and 4 timed launches.
::kernelserve::v1::BenchJobSpec SmallAttentionSpec(const std::string& name);

// Runs the kernelctl runfile against `target` with `args`; returns its exit
// status and puts its stdout and stderr in *out.
int Kernelctl(const std::string& target, const std::string& args, std::string* out);

class ServerProcess {
 public:
  // Starts it with --data_dir, the test variants and a short sustained
  // minimum, plus `extra` flags; waits until its log names its port (0 when
  // it did not start).
  ServerProcess(const std::string& data_dir, const std::string& log, const std::vector<std::string>& extra = {});
  ~ServerProcess() { Kill(SIGKILL); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int Kill(int sig);  // sends `sig`, reaps it; the wait status
  int port() const { return port_; }
  std::string target() const;
  std::string log() const { return ReadAll(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_SERVER_PROCESS_H_
