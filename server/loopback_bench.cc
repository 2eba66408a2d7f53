// Loopback numbers for the service itself (DESIGN §7): p50 round trip of a
// small call, buffer upload and download throughput. Starts an in-process
// server on 127.0.0.1:0 with the cpu backend; prints a short table.
//
//   bazel run //server:loopback_bench
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/server.h"
#include "server/test_util.h"
#include "spdlog/spdlog.h"

int main() {
  namespace pb = ::kernelserve::v1;
  using namespace ::kernelserve::testing;  // NOLINT
  spdlog::set_level(spdlog::level::warn);
  kernelserve::ServerOptions options;
  options.max_message_mb = 64;
  auto server = StartServer(options);
  if (server == nullptr) return 1;
  auto channel = Connect(server->port());
  auto devices = pb::DeviceService::NewStub(channel);
  auto buffers = pb::BufferService::NewStub(channel);

  std::vector<double> us;
  for (int i = 0; i < 2000; ++i) {
    grpc::ClientContext ctx;
    pb::ListDevicesResponse resp;
    const absl::Time t0 = absl::Now();
    if (!devices->List(&ctx, pb::ListDevicesRequest(), &resp).ok()) return 1;
    if (i >= 200) us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  std::sort(us.begin(), us.end());
  std::printf("| measurement | value |\n| --- | --- |\n");
  std::printf("| DeviceService.List round trip p50 | %.1f us |\n", us[us.size() / 2]);
  std::printf("| DeviceService.List round trip p99 | %.1f us |\n", us[us.size() * 99 / 100]);

  const pb::Tensor t = RandomBytes(pb::UINT8, {512 << 20}, 1);
  for (int64_t chunk : {1 << 20, 4 << 20, 16 << 20}) {
    pb::BufferInfo info;
    const absl::Time t0 = absl::Now();
    if (!Upload(buffers.get(), t, chunk, &info).ok()) return 1;
    const double up_s = absl::ToDoubleSeconds(absl::Now() - t0);
    std::string bytes;
    const absl::Time t1 = absl::Now();
    if (!Download(buffers.get(), info.id(), chunk, &bytes).ok()) return 1;
    const double down_s = absl::ToDoubleSeconds(absl::Now() - t1);
    std::printf("| upload 512 MiB, %lld MiB chunks | %.2f GB/s |\n", static_cast<long long>(chunk >> 20),
                t.data().size() / up_s / 1e9);
    std::printf("| download 512 MiB, %lld MiB chunks | %.2f GB/s |\n",
                static_cast<long long>(chunk >> 20), t.data().size() / down_s / 1e9);
    grpc::ClientContext ctx;
    pb::FreeBufferRequest req;
    req.set_buffer_id(info.id());
    pb::FreeBufferResponse resp;
    buffers->Free(&ctx, req, &resp);
  }
  return 0;
}
