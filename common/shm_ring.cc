#include "common/shm_ring.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kernelserve {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<ShmRing> ShmRing::Create(uint32_t capacity) {
  std::random_device rd;
  const std::string name = absl::StrCat("/kernelserve-ring-", rd(), "-", rd());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno(absl::StrCat("shm_open ", name));
  const size_t bytes = sizeof(ShmRingHeader) + 2 * static_cast<size_t>(capacity);
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int saved = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    errno = saved;
    return Errno(absl::StrCat("mapping ", name));
  }
  auto* h = new (p) ShmRingHeader{};
  h->magic = ShmRingHeader::kMagic;
  h->capacity = capacity;
  return ShmRing(name, h, bytes, /*owner=*/true, getuid());
}

absl::StatusOr<ShmRing> ShmRing::Attach(const std::string& name) {
  if (name.empty() || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("attach_ring.shm_name: expected \"/NAME\", got \"", name, "\""));
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Errno(absl::StrCat("attach_ring.shm_name: shm_open ", name));
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(ShmRingHeader))) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("attach_ring.shm_name: ", name, " is not a ring"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return Errno(absl::StrCat("attach_ring.shm_name: mmap ", name));
  auto* h = static_cast<ShmRingHeader*>(p);
  if (h->magic != ShmRingHeader::kMagic ||
      sizeof(ShmRingHeader) + 2 * static_cast<size_t>(h->capacity) > bytes) {
    munmap(p, bytes);
    return absl::InvalidArgumentError(absl::StrCat("attach_ring.shm_name: ", name, " is not a ring"));
  }
  return ShmRing(name, h, bytes, /*owner=*/false, st.st_uid);
}

ShmRing::ShmRing(ShmRing&& o) noexcept
    : name_(std::move(o.name_)), h_(o.h_), bytes_(o.bytes_), owner_(o.owner_), owner_uid_(o.owner_uid_) {
  o.h_ = nullptr;
  o.owner_ = false;
}

ShmRing::~ShmRing() {
  if (h_ == nullptr) return;
  h_->closed.store(1);
  Wake(&h_->req_seq);
  Wake(&h_->resp_seq);
  munmap(h_, bytes_);
  if (owner_) shm_unlink(name_.c_str());
}

void ShmRing::Unlink() {
  shm_unlink(name_.c_str());
  owner_ = false;
}

bool ShmRing::WaitChange(std::atomic<uint32_t>* word, uint32_t seen, absl::Time deadline) {
  while (word->load(std::memory_order_acquire) == seen) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    const timespec ts = absl::ToTimespec(left);
    // Not FUTEX_PRIVATE: the word is shared between processes.
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  return true;
}

void ShmRing::Wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

}  // namespace kernelserve
