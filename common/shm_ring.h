// A request/response ring in shared memory for one KernelService.Session of a
// client on the server's host: the client creates it (shm_open, 0600), names
// it in the session's AttachRing request, and from the acknowledgement on,
// each call's SessionRequest bytes go into the request area and its
// SessionResponse bytes come back in the response area, handed over with a
// futex word per direction instead of a gRPC message each way (a small
// call's round trip is a few futex wake-ups, not gRPC's threads and work).
// The stream stays open as the control channel: the tenant's admission and
// slot, and the server's view of the client's life. The server attaches only
// a ring owned by the calling process's user, and unlinks its name.
#ifndef KERNELSERVE_COMMON_SHM_RING_H_
#define KERNELSERVE_COMMON_SHM_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kernelserve {

struct ShmRingHeader {
  static constexpr uint32_t kMagic = 0x4B53524Eu;  // "KSRN"
  uint32_t magic;
  uint32_t capacity;             // bytes of each data area
  std::atomic<uint32_t> req_seq;   // the client's count of requests written
  std::atomic<uint32_t> resp_seq;  // the server's count of responses written
  std::atomic<uint32_t> closed;    // set by either side when it leaves
  uint32_t req_len, resp_len;
};

// A mapping of one ring; unmapped (and, for its creator, unlinked) when
// destroyed.
class ShmRing {
 public:
  static absl::StatusOr<ShmRing> Create(uint32_t capacity);  // a fresh random name
  static absl::StatusOr<ShmRing> Attach(const std::string& name);
  ShmRing(ShmRing&& o) noexcept;
  ShmRing& operator=(ShmRing&&) = delete;
  ShmRing(const ShmRing&) = delete;
  ~ShmRing();

  const std::string& name() const { return name_; }
  uint32_t owner_uid() const { return owner_uid_; }  // the file's owner when attached
  ShmRingHeader* header() const { return h_; }
  uint8_t* request() const { return reinterpret_cast<uint8_t*>(h_ + 1); }
  uint8_t* response() const { return request() + h_->capacity; }
  // Removes the name (the mappings stay): once the server has attached.
  void Unlink();

  // Waits until *word != seen, or `deadline`: false on the deadline.
  static bool WaitChange(std::atomic<uint32_t>* word, uint32_t seen, absl::Time deadline);
  static void Wake(std::atomic<uint32_t>* word);

 private:
  ShmRing(std::string name, ShmRingHeader* h, size_t bytes, bool owner, uint32_t owner_uid)
      : name_(std::move(name)), h_(h), bytes_(bytes), owner_(owner), owner_uid_(owner_uid) {}
  std::string name_;
  ShmRingHeader* h_;
  size_t bytes_;
  bool owner_;
  uint32_t owner_uid_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_COMMON_SHM_RING_H_
