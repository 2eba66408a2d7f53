#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "server/metrics/grpc_metrics.h"
#include "server/metrics/http_server.h"
#include "server/metrics/metrics.h"

namespace kernelserve {
namespace metrics {
namespace {

// A raw HTTP/1.1 exchange with the endpoint; returns the whole response.
std::string Http(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "connect failed";
  }
  (void)!write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

TEST(Registry, RendersExpositionFormat) {
  Registry r;
  r.DeclareCounter("c_total", "A counter.");
  r.DeclareGauge("g", "A gauge with \\ and\nnewline.");
  r.DeclareHistogram("h_seconds", "A histogram.", {0.1, 1});
  r.Inc("c_total", {{"code", "OK"}});
  r.Inc("c_total", {{"code", "OK"}}, 2);
  r.Inc("c_total", {{"code", "NOT_FOUND"}});
  r.Inc("c_total", {{"code", "OK"}}, -5);  // counters never go down
  r.Set("g", {{"tenant", "a\"b\\c\nd"}}, 1.5);
  r.Observe("h_seconds", {}, 0.05);
  r.Observe("h_seconds", {}, 0.5);
  r.Observe("h_seconds", {}, 7);
  r.Inc("undeclared", {});  // ignored
  r.Set("c_total", {}, 9);  // wrong type: ignored
  const std::string text = r.Render();
  EXPECT_TRUE(absl::StrContains(text, "# HELP c_total A counter.\n# TYPE c_total counter\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "c_total{code=\"OK\"} 3\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "c_total{code=\"NOT_FOUND\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "# HELP g A gauge with \\\\ and\\nnewline.\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "g{tenant=\"a\\\"b\\\\c\\nd\"} 1.5\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "h_seconds_bucket{le=\"0.1\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "h_seconds_bucket{le=\"1\"} 2\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "h_seconds_bucket{le=\"+Inf\"} 3\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "h_seconds_sum 7.55\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "h_seconds_count 3\n")) << text;
  EXPECT_FALSE(absl::StrContains(text, "undeclared"));
  EXPECT_FALSE(absl::StrContains(text, "c_total 9"));
}

TEST(Registry, CollectorsRunAtScrape) {
  Registry r;
  r.DeclareGauge("tenant_bytes", "x");
  int calls = 0;
  r.AddCollector([&](Registry* reg) {
    ++calls;
    reg->Clear("tenant_bytes");
    if (calls == 1) reg->Set("tenant_bytes", {{"tenant", "alice"}}, 10);
    reg->Set("tenant_bytes", {{"tenant", "bob"}}, 20);
  });
  EXPECT_TRUE(absl::StrContains(r.Render(), "tenant_bytes{tenant=\"alice\"} 10"));
  const std::string second = r.Render();
  EXPECT_FALSE(absl::StrContains(second, "alice")) << "cleared series vanish";
  EXPECT_TRUE(absl::StrContains(second, "tenant_bytes{tenant=\"bob\"} 20"));
  EXPECT_EQ(calls, 2);
}

TEST(HttpServer, ServesMetricsOverHttp) {
  Registry r;
  DeclareServerMetrics(&r);
  auto server = HttpServer::Start("127.0.0.1:0", &r);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  const std::string resp = Http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(resp, "HTTP/1.1 200 OK\r\n")) << resp;
  EXPECT_TRUE(absl::StrContains(resp, "Content-Type: text/plain; version=0.0.4")) << resp;
  EXPECT_TRUE(absl::StrContains(resp, "# TYPE kernelserve_grpc_calls_total counter")) << resp;
  EXPECT_TRUE(absl::StrContains(resp, "\nprocess_resident_memory_bytes ")) << resp;
  // Content-Length matches the body.
  const size_t body = resp.find("\r\n\r\n") + 4;
  const size_t cl = resp.find("Content-Length: ") + 16;
  EXPECT_EQ(std::stoul(resp.substr(cl)), resp.size() - body);

  EXPECT_TRUE(absl::StartsWith(Http(port, "GET /healthz HTTP/1.1\r\n\r\n"), "HTTP/1.1 200"));
  EXPECT_TRUE(absl::StartsWith(Http(port, "GET /secret HTTP/1.1\r\n\r\n"), "HTTP/1.1 404"));
  EXPECT_TRUE(absl::StartsWith(Http(port, "POST /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 405"));
  EXPECT_TRUE(absl::StartsWith(Http(port, "garbage\r\n\r\n"), "HTTP/1.1 400"));
  EXPECT_TRUE(absl::StartsWith(Http(port, std::string(10000, 'A')), "HTTP/1.1 431"));
  // Still serving after the bad requests.
  EXPECT_TRUE(absl::StartsWith(Http(port, "GET /metrics HTTP/1.0\r\n\r\n"), "HTTP/1.1 200"));
  (*server)->Stop();
  EXPECT_EQ(Http(port, "GET /metrics HTTP/1.1\r\n\r\n"), "connect failed");

  EXPECT_FALSE(HttpServer::Start("nonsense", &r).ok());
  EXPECT_FALSE(HttpServer::Start("127.0.0.1:99999", &r).ok());
}

class Echo final : public v1::DeviceService::Service {
  grpc::Status List(grpc::ServerContext* ctx, const v1::ListDevicesRequest*,
                    v1::ListDevicesResponse*) override {
    auto it = ctx->client_metadata().find("fail");
    if (it != ctx->client_metadata().end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no");
    return grpc::Status::OK;
  }
};

TEST(GrpcMetrics, InterceptorCountsCallsByCodeAndTimesThem) {
  Registry r;
  DeclareServerMetrics(&r);
  Echo service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<GrpcMetricsInterceptorFactory>(&r));
  builder.experimental().SetInterceptorCreators(std::move(creators));
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::DeviceService::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 5; ++i) {
    grpc::ClientContext ctx;
    if (i >= 3) ctx.AddMetadata("fail", "1");
    v1::ListDevicesResponse resp;
    stub->List(&ctx, v1::ListDevicesRequest(), &resp);
  }
  server->Shutdown();
  const Labels ok = {{"service", "kernelserve.v1.DeviceService"}, {"method", "List"}, {"code", "OK"}};
  const Labels nf = {{"service", "kernelserve.v1.DeviceService"}, {"method", "List"}, {"code", "NOT_FOUND"}};
  EXPECT_EQ(r.Value(kCallsTotal, ok), 3);
  EXPECT_EQ(r.Value(kCallsTotal, nf), 2);
  const Labels m = {{"service", "kernelserve.v1.DeviceService"}, {"method", "List"}};
  EXPECT_EQ(r.HistogramCount(kCallSeconds, m), 5);
  EXPECT_EQ(r.Value(kCallsInFlight, m), 0);
}

}  // namespace
}  // namespace metrics
}  // namespace kernelserve
