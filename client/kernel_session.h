// The client side of KernelService.Session (ClientOptions::kernel_session):
// kernel calls as messages on one long-lived bidirectional stream instead of
// one unary RPC each. A message round trip on an open stream skips a unary
// call's setup (a new HTTP/2 stream, its headers and the server's call
// dispatch), about half of a small call's latency over loopback.
//
// Calls take turns: one request is on the stream at a time, answered in
// order. A call that fails on the server gets that call's status and the
// session goes on; a stream that breaks (the server went away, a call's
// deadline passed while it waited for its answer) is cancelled, and the
// next call opens a new one. A request whose write fails on a stream that
// was already dead never reached the server, so it is sent once more on a
// fresh stream; nothing is retried once written.
#ifndef KERNELSERVE_CLIENT_KERNEL_SESSION_H_
#define KERNELSERVE_CLIENT_KERNEL_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernelserve/v1/kernel.grpc.pb.h"

namespace kernelserve {

class KernelSession {
 public:
  // `stub` outlives the session; `bearer_token` as ClientOptions's.
  // ring_bytes > 0: the calls through a shared-memory ring of that many bytes
  // each way where the server attaches it (common/shm_ring.h).
  KernelSession(v1::KernelService::Stub* stub, std::string bearer_token, uint32_t ring_bytes = 0);
  ~KernelSession();
  KernelSession(const KernelSession&) = delete;
  KernelSession& operator=(const KernelSession&) = delete;

  // Sends `req` (its id is set here) and waits for its answer until
  // `deadline`: the response when the call succeeded, else the call's
  // status (DEADLINE_EXCEEDED when the deadline passed first).
  absl::StatusOr<v1::SessionResponse> Call(v1::SessionRequest* req, absl::Time deadline);

  // Streams opened so far (tests: a failed call must not reopen one).
  int64_t streams_opened() const;
  // Whether the open stream's calls go through a ring.
  bool ring_attached() const;

 private:
  struct Stream;
  // The open stream, opening one when there is none.
  absl::StatusOr<Stream*> Open(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the stream (cancelled first when `cancel`: an operation is still
  // pending, or the stream is healthy but must go); the next call opens a
  // new one. Returns the stream's final status: the server's, or OK when
  // only our cancellation ended it.
  absl::Status Drop(bool cancel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One call through the stream's ring.
  absl::StatusOr<v1::SessionResponse> RingCall(Stream* s, const v1::SessionRequest& req, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  v1::KernelService::Stub* stub_;
  const std::string bearer_token_;
  const uint32_t ring_bytes_;
  mutable absl::Mutex mu_;  // one call at a time
  std::unique_ptr<Stream> stream_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status ring_refused_ ABSL_GUARDED_BY(mu_);  // why the server refused a ring: later streams do not ask
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_KERNEL_SESSION_H_
