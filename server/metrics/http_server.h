// A tiny HTTP/1.1 server on one thread for Prometheus scrapes:
//   GET /metrics  the registry's text exposition
//   GET /healthz  "ok"
// Anything else is 404 (405 for other methods). One request per connection,
// requests are read with a 2 s timeout and at most 8 KiB of header.
#ifndef KERNELSERVE_SERVER_METRICS_HTTP_SERVER_H_
#define KERNELSERVE_SERVER_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/metrics/metrics.h"

namespace kernelserve {
namespace metrics {

class HttpServer {
 public:
  // `listen` is HOST:PORT ("127.0.0.1:9464", "0.0.0.0:9464", "[::1]:0"); port 0 picks one.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listen,
                                                           Registry* registry);
  ~HttpServer();  // Stop()
  void Stop();
  int port() const { return port_; }
  int64_t requests_served() const { return served_.load(); }

 private:
  HttpServer() = default;
  void Loop();
  void Handle(int fd);

  Registry* registry_ = nullptr;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that ends the loop
  int port_ = 0;
  std::atomic<int64_t> served_{0};
  std::thread thread_;
};

// Parses "HOST:PORT" / "[V6]:PORT" into host and port.
absl::Status SplitHostPort(const std::string& listen, std::string* host, int* port);

}  // namespace metrics
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_METRICS_HTTP_SERVER_H_
