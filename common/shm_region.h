// A POSIX shared-memory object through which a buffer's bytes move between a
// client and a server on the same host (tensor.proto's SharedMemoryRegion):
// the client creates it (Create: a fresh random name, mode 0600) and copies
// the bytes in or out of its mapping; the server opens it by name (Open),
// after checking that the caller's user owns it, and reads or writes it with
// pread / pwrite rather than through a mapping of its own: a client that
// shrinks the object mid-copy then gets a short read, where a mapping would
// take the server down with SIGBUS, and the server's copy faults in no
// pages of its own.
#ifndef KERNELSERVE_COMMON_SHM_REGION_H_
#define KERNELSERVE_COMMON_SHM_REGION_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelserve {

// A download through shared memory answers with the buffer's size in this
// trailing metadata entry, failed or not: a client whose region was too
// small learns the size it needs without another call.
inline constexpr char kShmBufferBytesTrailer[] = "kernelserve-buffer-bytes";

class ShmRegion {
 public:
  // Client side: a fresh object of `bytes` (0 allowed), mapped read-write;
  // its name is removed and the mapping unmapped when the region goes. The
  // name ("/kernelserve-buf-PID-RANDOM") carries the creating process's id:
  // the first Create of a process removes this user's objects whose process
  // is gone (one killed while it held a region would otherwise leave it in
  // /dev/shm until the host restarts).
  static absl::StatusOr<ShmRegion> Create(int64_t bytes);
  // What the first Create does: removes this user's objects of Create whose
  // process is gone (to kill(2); a process of another pid namespace sharing
  // /dev/shm looks gone too: its region loses its name, and its transfers
  // fall back to the stream).
  static void RemoveOrphans();

  // Server side: `bytes` at `offset` of the object `name` ("/NAME"), opened
  // read-only or (writable) read-write. `check_owner` is asked about the
  // object's owner uid before anything else of it is looked at or reported,
  // so a refused caller learns nothing of another user's object. Failures
  // name `field` ("header.shm", "shm"): INVALID_ARGUMENT for a malformed
  // name, a negative offset, an object that is not a regular one or is
  // smaller than offset + bytes; NOT_FOUND for no such object;
  // PERMISSION_DENIED where the server may not open it.
  static absl::StatusOr<ShmRegion> Open(absl::string_view field, const std::string& name, int64_t offset,
                                        int64_t bytes, bool writable,
                                        const std::function<absl::Status(uint32_t owner_uid)>& check_owner);

  ShmRegion(ShmRegion&& o) noexcept;
  ShmRegion& operator=(ShmRegion&& o) noexcept;
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;
  ~ShmRegion();

  const std::string& name() const { return name_; }
  int64_t size() const { return size_; }  // the region's bytes (from offset, for Open)
  uint32_t owner_uid() const { return owner_uid_; }
  // Created regions: the mapping (nullptr for 0 bytes).
  uint8_t* data() const { return data_; }

  // Opened regions: bytes [at, at + n) of the region into `dst`, or from
  // `src`. A short read (the object shrank) is DATA_LOSS naming the field.
  absl::Status Read(int64_t at, void* dst, int64_t n) const;
  absl::Status Write(int64_t at, const void* src, int64_t n) const;

 private:
  ShmRegion() = default;
  void Reset();

  std::string field_;
  std::string name_;
  int fd_ = -1;          // opened regions
  int64_t offset_ = 0;   // opened regions: where the region starts in the object
  uint8_t* data_ = nullptr;  // created regions
  int64_t size_ = 0;
  uint32_t owner_uid_ = 0;
  bool created_ = false;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_COMMON_SHM_REGION_H_
