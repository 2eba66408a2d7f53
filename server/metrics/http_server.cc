#include "server/metrics/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kernelserve {
namespace metrics {
namespace {

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void Respond(int fd, int code, absl::string_view reason, absl::string_view content_type,
             absl::string_view body, bool head_only) {
  WriteAll(fd, absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                            "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n"));
  if (!head_only) WriteAll(fd, body);
}

}  // namespace

absl::Status SplitHostPort(const std::string& listen, std::string* host, int* port) {
  absl::string_view hp = listen;
  absl::string_view port_str;
  if (absl::StartsWith(hp, "[")) {
    const size_t close = hp.find("]:");
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad listen address \"", listen, "\""));
    }
    *host = std::string(hp.substr(1, close - 1));
    port_str = hp.substr(close + 2);
  } else {
    const size_t colon = hp.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("listen address \"", listen, "\" needs HOST:PORT"));
    }
    *host = std::string(hp.substr(0, colon));
    port_str = hp.substr(colon + 1);
  }
  if (!absl::SimpleAtoi(port_str, port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad port in \"", listen, "\""));
  }
  if (host->empty()) *host = "0.0.0.0";
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen,
                                                             Registry* registry) {
  std::string host;
  int port = 0;
  absl::Status s = SplitHostPort(listen, &host, &port);
  if (!s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_str = absl::StrCat(port);
  if (int rc = getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listen address \"", listen, "\": ", gai_strerror(rc)));
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->registry_ = registry;
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      server->listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  if (server->listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics endpoint cannot listen on ", listen, ": ", last_error));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  server->port_ = ntohs(addr.ss_family == AF_INET6
                           ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  server->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

void HttpServer::Loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents & POLLIN) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      Handle(fd);
      close(fd);
    }
  }
}

void HttpServer::Handle(int fd) {
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
    if (request.size() > 8192) {
      Respond(fd, 431, "Request Header Fields Too Large", "text/plain", "header too large\n", false);
      return;
    }
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  const size_t eol = request.find_first_of("\r\n");
  std::vector<absl::string_view> parts =
      absl::StrSplit(absl::string_view(request).substr(0, eol), ' ', absl::SkipEmpty());
  if (parts.size() < 2) {
    Respond(fd, 400, "Bad Request", "text/plain", "bad request\n", false);
    return;
  }
  const bool head = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head) {
    Respond(fd, 405, "Method Not Allowed", "text/plain", "only GET\n", false);
    return;
  }
  absl::string_view path = parts[1];
  path = path.substr(0, path.find('?'));
  ++served_;
  if (path == "/metrics") {
    Respond(fd, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", registry_->Render(), head);
  } else if (path == "/healthz") {
    Respond(fd, 200, "OK", "text/plain", "ok\n", head);
  } else {
    Respond(fd, 404, "Not Found", "text/plain", "not found; try /metrics\n", head);
  }
}

}  // namespace metrics
}  // namespace kernelserve
