#include "server/cpu_latency.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace {

absl::Status Failed(const std::string& path, const char* what) {
  return absl::FailedPreconditionError(absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno),
                                                    " (the CPU latency request needs root or write access to it)"));
}

}  // namespace

absl::StatusOr<CpuLatencyRequest> CpuLatencyRequest::Hold(int32_t us, const std::string& path) {
  if (us < 0) return absl::InvalidArgumentError(absl::StrCat("expected a latency of 0 µs or more, got ", us));
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Failed(path, "open");
  // The binary form: one native 32-bit integer.
  if (write(fd, &us, sizeof(us)) != static_cast<ssize_t>(sizeof(us))) {
    const absl::Status s = Failed(path, "write");
    close(fd);
    return s;
  }
  return CpuLatencyRequest(fd);
}

CpuLatencyRequest& CpuLatencyRequest::operator=(CpuLatencyRequest&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

CpuLatencyRequest::~CpuLatencyRequest() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<int32_t> CurrentCpuLatency(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Failed(path, "open");
  int32_t us = 0;
  const ssize_t n = read(fd, &us, sizeof(us));
  const int saved = errno;
  close(fd);
  errno = saved;
  if (n != static_cast<ssize_t>(sizeof(us))) return Failed(path, "read");
  return us;
}

}  // namespace kernelserve
