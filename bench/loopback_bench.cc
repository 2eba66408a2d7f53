// The service itself over loopback (DESIGN §7): the round trip of a small
// call, and buffer upload / download throughput, through the client library
// (kernelserve::Client) as users call it. By default it starts a server in
// this process on 127.0.0.1:0 with the cpu backend (--backend=cuda on a GPU
// node: uploads then land in device memory); --server=HOST:PORT measures a
// running kernelserve instead. Prints a short markdown table.
//
//   bazel run //bench:loopback_bench -- [--backend=cpu|cuda|auto] [--server=HOST:PORT] [--mib=512]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace {

const char* FlagValue(const char* arg, const char* name) {
  const size_t n = std::strlen(name);
  return std::strncmp(arg, name, n) == 0 ? arg + n : nullptr;
}

int Main(int argc, char** argv) {
  std::string target;
  std::string backend = "cpu";
  int64_t mib = 512;
  for (int i = 1; i < argc; ++i) {
    if (const char* v = FlagValue(argv[i], "--server=")) {
      target = v;
    } else if (const char* v = FlagValue(argv[i], "--backend=")) {
      backend = v;
    } else if (const char* v = FlagValue(argv[i], "--mib=")) {
      if (!absl::SimpleAtoi(v, &mib) || mib < 1) {
        std::fprintf(stderr, "--mib: expected a positive integer, got %s\n", v);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: loopback_bench [--backend=cpu|cuda|auto] [--server=HOST:PORT] [--mib=N]\n");
      return 2;
    }
  }
  TuneHostAllocator();  // as kernelserve's main does
  spdlog::set_level(spdlog::level::warn);
  std::unique_ptr<KernelServer> server;
  if (target.empty()) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.backend = backend;
    auto started = KernelServer::Start(options);
    if (!started.ok()) {
      std::fprintf(stderr, "server: %s\n", started.status().ToString().c_str());
      return 1;
    }
    server = std::move(*started);
    target = "127.0.0.1:" + std::to_string(server->port());
  }

  ClientOptions copts;
  copts.target = target;
  copts.default_timeout = absl::Seconds(120);
  auto client = Client::Connect(copts);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::vector<double> us;
  for (int i = 0; i < 2000; ++i) {
    const absl::Time t0 = absl::Now();
    auto d = (*client)->Devices();
    if (!d.ok()) {
      std::fprintf(stderr, "devices: %s\n", d.status().ToString().c_str());
      return 1;
    }
    if (i >= 200) us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  std::sort(us.begin(), us.end());
  const std::string where = server ? "in-process server, " + backend + " backend" : target;
  std::printf("| measurement (%s) | value |\n| --- | --- |\n", where.c_str());
  std::printf("| DeviceService.List round trip p50 / p99 | %.1f / %.1f us |\n", us[us.size() / 2],
              us[us.size() * 99 / 100]);

  HostTensor t(DType::kUint8, {mib << 20});
  std::mt19937_64 rng(1);
  for (int64_t i = 0; i + 8 <= t.num_bytes(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(t.bytes() + i, &r, 8);
  }
  const double gb = static_cast<double>(t.num_bytes()) / 1e9;
  // Each chunk size three times (a fresh buffer each time, as a client's
  // upload gets); the median and the best of the three are printed.
  for (int64_t chunk : {1 << 20, 4 << 20, 16 << 20}) {
    copts.chunk_bytes = chunk;
    auto c = Client::Connect(copts);
    if (!c.ok()) return 1;
    std::vector<double> up, down;
    for (int rep = 0; rep < 3; ++rep) {
      const absl::Time t0 = absl::Now();
      auto info = (*c)->UploadBuffer(t, "loopback_bench");
      if (!info.ok()) {
        std::fprintf(stderr, "upload: %s\n", info.status().ToString().c_str());
        return 1;
      }
      up.push_back(gb / absl::ToDoubleSeconds(absl::Now() - t0));
      const absl::Time t1 = absl::Now();
      auto back = (*c)->DownloadBuffer(info->id());
      if (!back.ok()) {
        std::fprintf(stderr, "download: %s\n", back.status().ToString().c_str());
        return 1;
      }
      down.push_back(gb / absl::ToDoubleSeconds(absl::Now() - t1));
      if (back->num_bytes() != t.num_bytes() || std::memcmp(back->bytes(), t.bytes(), t.num_bytes()) != 0) {
        std::fprintf(stderr, "download: the bytes differ from the upload\n");
        return 1;
      }
      (void)(*c)->FreeBuffer(info->id());
    }
    std::sort(up.begin(), up.end());
    std::sort(down.begin(), down.end());
    const long long cm = static_cast<long long>(chunk >> 20);
    std::printf("| upload %lld MiB, %lld MiB chunks, median / best of 3 | %.2f / %.2f GB/s |\n",
                static_cast<long long>(mib), cm, up[1], up[2]);
    std::printf("| download %lld MiB, %lld MiB chunks, median / best of 3 | %.2f / %.2f GB/s |\n",
                static_cast<long long>(mib), cm, down[1], down[2]);
  }
  return 0;
}

}  // namespace
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::Main(argc, argv); }
