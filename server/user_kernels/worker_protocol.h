// The frames between the server and a kernel worker
// (//server/user_kernels:kernel_worker), over the worker's stdin (server to
// worker) and a pipe the worker keeps as its protocol channel (its stdout is
// moved to stderr, so a kernel's printf cannot corrupt it). A frame is
// [u32 tag][u64 length][payload], little-endian.
//
//   server                              worker
//   kSetup  u64 seed, BenchJobSpec  ->  generate inputs, dlopen, check the ABI
//                                   <-  kReady "<what it runs>" | kError
//   kGate                           ->  poison the output, one launch, check guards
//                                   <-  kOutput <output bytes> | kError
//   kTime   i32 warmup, i32 timed,  ->  warm-up, then `timed` launches in
//           i32 batches,                `batches` timed batches; with
//           u64 flush_bytes             flush_bytes > 0 (l2_flush) each launch
//                                       follows a copy of that many bytes
//                                       between two buffers of the worker's
//                                       and is timed alone
//                                   <-  kTimes | kError
//   kGraph  i32 warmup, i32 replays, -> warm-up, then in `batches` batches: one
//           i32 batches                 launch captured into a graph (CUDA
//                                       graphs), the graph replayed and timed
//                                   <-  kTimes | kNotCaptured <error payload>
//                                       (the worker lives on) | kError
//   kSustain f64 warmin_s,          ->  launches in batches of ~20 ms for the
//           f64 window_s                warm-in, then timed batches for the window
//                                   <-  kTimes | kError
//   kQuit / EOF                     ->  exit 0
//
// kTimes: f64 total_ms, i64 launches, f64 sample_ms (ms per launch, one per
// batch)...
//
// A kernel that faults gets a kError frame written from the signal handler
// (what it touched: a guard page, a read-only input) before the worker dies
// of the signal.
#ifndef KERNELSERVE_SERVER_USER_KERNELS_WORKER_PROTOCOL_H_
#define KERNELSERVE_SERVER_USER_KERNELS_WORKER_PROTOCOL_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"

namespace kernelserve {
namespace user_kernels {

enum FrameTag : uint32_t {
  kSetup = 1,
  kReady = 2,
  kGate = 3,
  kOutput = 4,
  kTime = 5,
  kTimes = 6,
  kError = 7,  // i32 absl::StatusCode, then the message
  kQuit = 8,
  kGraph = 9,
  kNotCaptured = 10,  // ErrorPayload: why the launch could not be captured
  kSustain = 11,
};

// The worker's fd for frames to the server (its stdout is redirected).
constexpr int kWorkerProtocolFd = 3;
// Frames larger than this are refused (the output of the largest job fits).
constexpr uint64_t kMaxFrameBytes = uint64_t{4} << 30;

// Blocking; INTERNAL on a short write.
absl::Status WriteFrame(int fd, uint32_t tag, const std::string& payload);
// Blocking; UNAVAILABLE at EOF, INTERNAL on a bad frame.
absl::Status ReadFrame(int fd, uint32_t* tag, std::string* payload);

std::string ErrorPayload(const absl::Status& status);
absl::Status StatusFromErrorPayload(const std::string& payload);

template <typename T>
void AppendPod(std::string* s, const T& v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(v));
}
template <typename T>
bool ReadPod(const std::string& s, size_t* pos, T* v) {
  if (*pos + sizeof(T) > s.size()) return false;
  std::memcpy(v, s.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return true;
}

}  // namespace user_kernels
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_USER_KERNELS_WORKER_PROTOCOL_H_
