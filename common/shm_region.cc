#include "common/shm_region.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kernelserve {
namespace {

std::string ErrnoText() { return std::strerror(errno); }

// "/NAME" as shm_open takes it: one component, no "." or "..".
absl::Status CheckName(absl::string_view field, const std::string& name) {
  const absl::string_view rest = absl::string_view(name).substr(name.empty() ? 0 : 1);
  if (name.empty() || name[0] != '/' || rest.empty() || rest.size() > NAME_MAX ||
      rest.find('/') != absl::string_view::npos || rest == "." || rest == "..") {
    return absl::InvalidArgumentError(absl::StrCat(field, ".shm_name: expected \"/NAME\" (one component of 1 to ",
                                                   NAME_MAX, " characters, no '/'), got \"", name, "\""));
  }
  return absl::OkStatus();
}

absl::Status OpenError(absl::string_view field, const std::string& name) {
  const std::string what = absl::StrCat(field, ".shm_name: shm_open \"", name, "\": ", ErrnoText());
  switch (errno) {
    case ENOENT:
      return absl::NotFoundError(
          absl::StrCat(what, " (expected a shared-memory object of the client's on the server's host)"));
    case EACCES:
      return absl::PermissionDeniedError(what);
    case ELOOP:
      return absl::InvalidArgumentError(absl::StrCat(what, " (expected a shared-memory object, found a link)"));
    default:
      return absl::FailedPreconditionError(what);
  }
}

constexpr absl::string_view kCreatedPrefix = "kernelserve-buf-";

}  // namespace

void ShmRegion::RemoveOrphans() {
  DIR* dir = opendir("/dev/shm");  // where glibc's shm_open keeps objects
  if (dir == nullptr) return;
  while (const dirent* e = readdir(dir)) {
    absl::string_view rest = e->d_name;
    int pid = 0;
    if (!absl::ConsumePrefix(&rest, kCreatedPrefix) ||
        !absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid) || pid <= 0) {
      continue;
    }
    struct stat st {};
    if (kill(pid, 0) == 0 || errno != ESRCH || fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        st.st_uid != geteuid()) {
      continue;
    }
    shm_unlink(absl::StrCat("/", e->d_name).c_str());
  }
  closedir(dir);
}

absl::StatusOr<ShmRegion> ShmRegion::Create(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("shared memory: expected >= 0 bytes, got ", bytes));
  static std::once_flag orphans;
  std::call_once(orphans, &ShmRegion::RemoveOrphans);
  std::random_device rd;
  ShmRegion r;
  r.name_ = absl::StrCat("/", kCreatedPrefix, getpid(), "-", rd(), "-", rd());
  const int fd = shm_open(r.name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("shared memory: shm_open \"", r.name_, "\": ", ErrnoText()));
  }
  r.created_ = true;  // from here on, the name goes with `r`
  r.size_ = bytes;
  r.owner_uid_ = getuid();
  void* p = nullptr;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    p = MAP_FAILED;
  } else if (bytes > 0) {
    p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const std::string error = p == MAP_FAILED ? ErrnoText() : "";
  close(fd);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shared memory: ", bytes, " bytes for \"", r.name_, "\": ", error));
  }
  r.data_ = static_cast<uint8_t*>(p);
  return r;
}

absl::StatusOr<ShmRegion> ShmRegion::Open(absl::string_view field, const std::string& name, int64_t offset,
                                          int64_t bytes, bool writable,
                                          const std::function<absl::Status(uint32_t owner_uid)>& check_owner) {
  if (auto s = CheckName(field, name); !s.ok()) return s;
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".offset: expected >= 0, got ", offset));
  }
  ShmRegion r;
  // O_NONBLOCK: a FIFO put there in place of an object would otherwise hold
  // the open until a writer comes; it is refused below as not regular.
  r.fd_ = shm_open(name.c_str(), (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0);
  if (r.fd_ < 0) return OpenError(field, name);
  struct stat st {};
  if (fstat(r.fd_, &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(field, ".shm_name: fstat \"", name, "\": ", ErrnoText()));
  }
  if (auto s = check_owner(st.st_uid); !s.ok()) return s;
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".shm_name: expected a regular shared-memory object, \"",
                                                   name, "\" is not one (mode 0", absl::Hex(st.st_mode), ")"));
  }
  const auto have = static_cast<int64_t>(st.st_size);
  if (offset > have || bytes > have - offset) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": expected an object of at least offset + the buffer's bytes = ",
                                                   offset, " + ", bytes, " bytes, \"", name, "\" has ", have));
  }
  r.field_ = std::string(field);
  r.name_ = name;
  r.offset_ = offset;
  r.size_ = bytes;
  r.owner_uid_ = st.st_uid;
  return r;
}

absl::Status ShmRegion::Read(int64_t at, void* dst, int64_t n) const {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t done = 0; done < n;) {
    const ssize_t k = pread(fd_, out + done, static_cast<size_t>(n - done), static_cast<off_t>(offset_ + at + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      return absl::DataLossError(absl::StrCat(field_, ": reading \"", name_, "\" at byte ", offset_ + at + done,
                                              k < 0 ? absl::StrCat(": ", ErrnoText())
                                                    : std::string(": the object ended there (it shrank)")));
    }
    done += k;
  }
  return absl::OkStatus();
}

absl::Status ShmRegion::Write(int64_t at, const void* src, int64_t n) const {
  const auto* in = static_cast<const uint8_t*>(src);
  for (int64_t done = 0; done < n;) {
    const ssize_t k = pwrite(fd_, in + done, static_cast<size_t>(n - done), static_cast<off_t>(offset_ + at + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      return absl::DataLossError(absl::StrCat(field_, ": writing \"", name_, "\" at byte ", offset_ + at + done,
                                              ": ", k < 0 ? ErrnoText() : "nothing written"));
    }
    done += k;
  }
  return absl::OkStatus();
}

ShmRegion::ShmRegion(ShmRegion&& o) noexcept { *this = std::move(o); }

ShmRegion& ShmRegion::operator=(ShmRegion&& o) noexcept {
  if (this == &o) return *this;
  Reset();
  field_ = std::move(o.field_);
  name_ = std::move(o.name_);
  fd_ = std::exchange(o.fd_, -1);
  offset_ = o.offset_;
  data_ = std::exchange(o.data_, nullptr);
  size_ = std::exchange(o.size_, 0);
  owner_uid_ = o.owner_uid_;
  created_ = std::exchange(o.created_, false);
  return *this;
}

ShmRegion::~ShmRegion() { Reset(); }

void ShmRegion::Reset() {
  if (data_ != nullptr) munmap(data_, static_cast<size_t>(size_));
  if (fd_ >= 0) close(fd_);
  if (created_) shm_unlink(name_.c_str());
  data_ = nullptr;
  fd_ = -1;
  created_ = false;
}

}  // namespace kernelserve
