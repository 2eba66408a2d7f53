// kernelserve: the gRPC server binary.
//
//   kernelserve --listen=127.0.0.1:50051 --backend=auto
//
// Flags may also come from --config=FILE: one flag=value per line ("--" is
// optional; blank lines and lines starting with '#' are ignored). The file is
// applied first, so flags on the command line override it.
//
// Message size: --max_message_mb limits every gRPC message in both directions;
// a request over it is refused by gRPC itself with RESOURCE_EXHAUSTED, and an
// output too large for one response asks for output.to_buffer. Large tensors
// travel as buffers in chunks (BufferService.Upload / Download).
//
// SIGTERM / SIGINT: stop accepting calls, let running calls finish for up to
// --shutdown_grace, then exit 0. SIGHUP: re-read the TLS certificate, key and
// client CA and the tokens file (new connections and calls use them).
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "server/bench/bench_flags.h"
#include "server/node_flags.h"
#include "server/server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "HOST:PORT to listen on (port 0: any free port)");
ABSL_FLAG(std::string, backend, "auto",
          "auto|cpu|cuda|hip; auto takes a GPU backend when a device answers, else cpu");
ABSL_FLAG(int, max_message_mb, 64, "largest gRPC message, both directions, in MiB (1..2047)");
ABSL_FLAG(int, queue_capacity, 64, "calls that may wait per device; more get RESOURCE_EXHAUSTED");
ABSL_FLAG(int, cpu_threads, 0, "CPU backend threads; 0: all hardware threads");
ABSL_FLAG(int64_t, memory_limit_mb, 0,
          "accounted memory per device in MiB: buffers, pools and what calls hold in flight (their host "
          "staging and copies too); 0: 90% of device memory");
ABSL_FLAG(std::string, log_level, "info", "debug|info|warn (debug logs one line per call)");
ABSL_FLAG(std::string, data_dir, "",
          "directory for persistent state (bench.db, the benchmark jobs); empty: jobs live in memory only");
ABSL_FLAG(bool, reject_nonfinite, false,
          "refuse NaN/Inf in op inputs and pool writes (INVALID_ARGUMENT naming the tensor and element)");
ABSL_FLAG(std::string, config, "", "file of flag=value lines applied before the command line");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(30),
          "on SIGTERM/SIGINT, how long running calls may take to finish");

namespace {

// argv with the --config file's lines inserted after argv[0].
bool ExpandConfig(int argc, char** argv, std::vector<std::string>* out, std::string* error) {
  std::string path;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--config=") || absl::ConsumePrefix(&a, "-config=")) {
      path = std::string(a);
    } else if ((a == "--config" || a == "-config") && i + 1 < argc) {
      path = argv[i + 1];
    }
  }
  out->push_back(argv[0]);
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) {
      *error = absl::StrCat("--config=", path, ": cannot open the file");
      return false;
    }
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      absl::string_view s = absl::StripAsciiWhitespace(line);
      if (s.empty() || s[0] == '#') continue;
      absl::ConsumePrefix(&s, "--") || absl::ConsumePrefix(&s, "-");
      if (!absl::StrContains(s, '=')) {
        *error = absl::StrCat("--config=", path, " line ", n, ": expected flag=value, got \"", s, "\"");
        return false;
      }
      if (absl::StartsWith(s, "config=")) {
        *error = absl::StrCat("--config=", path, " line ", n, ": config files do not nest");
        return false;
      }
      out->push_back(absl::StrCat("--", s));
    }
  }
  for (int i = 1; i < argc; ++i) out->push_back(argv[i]);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  kernelserve::TuneHostAllocator();
  absl::SetProgramUsageMessage("kernelserve: attention, MLA-decode and MoE kernels over gRPC");
  std::vector<std::string> args;
  std::string error;
  if (!ExpandConfig(argc, argv, &args, &error)) {
    std::fprintf(stderr, "kernelserve: %s\n", error.c_str());
    return 2;
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());

  spdlog::set_default_logger(spdlog::stderr_color_mt("kernelserve"));
  const std::string level = absl::GetFlag(FLAGS_log_level);
  if (level == "debug") {
    spdlog::set_level(spdlog::level::debug);
  } else if (level == "info") {
    spdlog::set_level(spdlog::level::info);
  } else if (level == "warn") {
    spdlog::set_level(spdlog::level::warn);
  } else {
    std::fprintf(stderr, "kernelserve: --log_level: expected debug, info or warn, got \"%s\"\n",
                 level.c_str());
    return 2;
  }

  // Block the signals in every thread (gRPC's included); main waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  kernelserve::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.backend = absl::GetFlag(FLAGS_backend);
  options.max_message_mb = absl::GetFlag(FLAGS_max_message_mb);
  options.queue_capacity = absl::GetFlag(FLAGS_queue_capacity);
  options.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  options.memory_limit_mb = absl::GetFlag(FLAGS_memory_limit_mb);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.reject_nonfinite = absl::GetFlag(FLAGS_reject_nonfinite);
  kernelserve::bench::ApplyBenchFlags(&options.bench);
  kernelserve::ApplyNodeFlags(&options);

  auto server = kernelserve::KernelServer::Start(options);
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    return 1;
  }
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    spdlog::info("received SIGHUP: reloading the TLS certificates and the tokens file");
    absl::Status reloaded = (*server)->ReloadCredentials();
    if (!reloaded.ok()) spdlog::error("reload: {}", reloaded.ToString());
  }
  spdlog::info("received {}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown(absl::GetFlag(FLAGS_shutdown_grace));
  (*server)->Wait();
  server->reset();
  return 0;
}
