#include "server/user_kernels/worker_protocol.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace user_kernels {
namespace {

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// false at EOF or on an error; *got says how far it came.
bool ReadAll(int fd, char* p, size_t n, size_t* got) {
  *got = 0;
  while (*got < n) {
    const ssize_t r = read(fd, p + *got, n - *got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    *got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

absl::Status WriteFrame(int fd, uint32_t tag, const std::string& payload) {
  std::string header;
  AppendPod(&header, tag);
  AppendPod(&header, static_cast<uint64_t>(payload.size()));
  if (!WriteAll(fd, header.data(), header.size()) || !WriteAll(fd, payload.data(), payload.size())) {
    return absl::InternalError(absl::StrCat("writing a frame: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ReadFrame(int fd, uint32_t* tag, std::string* payload) {
  char header[12];
  size_t got = 0;
  if (!ReadAll(fd, header, sizeof(header), &got)) {
    if (got == 0) return absl::UnavailableError("end of stream");
    return absl::InternalError("a truncated frame header");
  }
  uint64_t len = 0;
  std::memcpy(tag, header, 4);
  std::memcpy(&len, header + 4, 8);
  if (len > kMaxFrameBytes) return absl::InternalError(absl::StrCat("a frame of ", len, " bytes"));
  payload->resize(len);
  if (!ReadAll(fd, payload->data(), len, &got)) return absl::InternalError("a truncated frame");
  return absl::OkStatus();
}

std::string ErrorPayload(const absl::Status& status) {
  std::string p;
  AppendPod(&p, static_cast<int32_t>(status.code()));
  p.append(status.message().data(), status.message().size());
  return p;
}

absl::Status StatusFromErrorPayload(const std::string& payload) {
  int32_t code = static_cast<int32_t>(absl::StatusCode::kInternal);
  size_t pos = 0;
  if (!ReadPod(payload, &pos, &code)) return absl::InternalError("a malformed error frame");
  if (code == 0) code = static_cast<int32_t>(absl::StatusCode::kInternal);
  return absl::Status(static_cast<absl::StatusCode>(code), payload.substr(pos));
}

}  // namespace user_kernels
}  // namespace kernelserve
