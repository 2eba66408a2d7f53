#include "client/kernel_session.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/shm_ring.h"
#include "server/status_mapping.h"

namespace kernelserve {

struct KernelSession::Stream {
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::SessionRequest, v1::SessionResponse>> rw;
  std::unique_ptr<ShmRing> ring;  // attached: the calls go through it
  // With a ring, a read stays pending on the stream: the server writes
  // nothing more on it, so its completion means the stream ended (a server
  // that died leaves the ring's words as they were; only the stream says so).
  v1::SessionResponse end_read;
  bool ended = false;

  // Whether the ring's stream has ended, without waiting.
  bool RingStreamEnded() {
    void* tag = nullptr;
    bool ok = false;
    if (!ended && cq.AsyncNext(&tag, &ok, std::chrono::system_clock::time_point()) ==
                      grpc::CompletionQueue::GOT_EVENT) {
      ended = true;
    }
    return ended;
  }
};

namespace {

// Tags of the stream's operations; one is pending at a time, except that a
// cancelled stream's last one comes back before Finish's.
void* const kStartTag = reinterpret_cast<void*>(1);
void* const kWriteTag = reinterpret_cast<void*>(2);
void* const kReadTag = reinterpret_cast<void*>(3);
void* const kFinishTag = reinterpret_cast<void*>(4);

enum class Event { kOk, kFailed, kTimedOut };

// How often a call waiting on its ring looks whether the stream ended.
constexpr absl::Duration kRingStreamCheck = absl::Milliseconds(20);

// The status a session answer carries (its call's, as the unary RPC's).
absl::Status AnswerStatus(const v1::SessionResponse& resp) {
  return FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(resp.code()), resp.message()));
}

// The pending operation's completion, or kTimedOut at `deadline`. The
// calling thread polls the queue itself: no thread hand-off per message.
Event Next(grpc::CompletionQueue* cq, absl::Time deadline) {
  void* tag = nullptr;
  bool ok = false;
  switch (cq->AsyncNext(&tag, &ok, absl::ToChronoTime(deadline))) {
    case grpc::CompletionQueue::GOT_EVENT:
      return ok ? Event::kOk : Event::kFailed;
    case grpc::CompletionQueue::TIMEOUT:
      return Event::kTimedOut;
    case grpc::CompletionQueue::SHUTDOWN:
      break;
  }
  return Event::kFailed;
}

}  // namespace

KernelSession::KernelSession(v1::KernelService::Stub* stub, std::string bearer_token, uint32_t ring_bytes)
    : stub_(stub), bearer_token_(std::move(bearer_token)), ring_bytes_(ring_bytes) {}

KernelSession::~KernelSession() {
  absl::MutexLock lock(&mu_);
  if (stream_ != nullptr) Drop(/*cancel=*/true).IgnoreError();
}

bool KernelSession::ring_attached() const {
  absl::MutexLock lock(&mu_);
  return stream_ != nullptr && stream_->ring != nullptr;
}

int64_t KernelSession::streams_opened() const {
  absl::MutexLock lock(&mu_);
  return opened_;
}

absl::StatusOr<KernelSession::Stream*> KernelSession::Open(absl::Time deadline) {
  if (stream_ != nullptr) return stream_.get();
  stream_ = std::make_unique<Stream>();
  // No deadline on the stream itself: each call waits until its own.
  if (!bearer_token_.empty()) stream_->ctx.AddMetadata("authorization", absl::StrCat("Bearer ", bearer_token_));
  stream_->rw = stub_->AsyncSession(&stream_->ctx, &stream_->cq, kStartTag);
  ++opened_;
  Event e = Next(&stream_->cq, deadline);
  if (e == Event::kOk && ring_bytes_ > 0 && ring_refused_.ok()) {
    absl::StatusOr<ShmRing> ring = ShmRing::Create(ring_bytes_);
    if (!ring.ok()) {
      Drop(/*cancel=*/true).IgnoreError();
      return ring.status();
    }
    v1::SessionRequest attach;
    attach.set_id(0);
    attach.mutable_attach_ring()->set_shm_name(ring->name());
    stream_->rw->Write(attach, kWriteTag);
    e = Next(&stream_->cq, deadline);
    v1::SessionResponse ack;
    if (e == Event::kOk) {
      stream_->rw->Read(&ack, kReadTag);
      e = Next(&stream_->cq, deadline);
    }
    if (e == Event::kOk && ack.code() != 0) {
      // Refused (another host, another user, no shared memory): the calls
      // stay on the stream, which is still open, and later streams do not ask.
      ring_refused_ = AnswerStatus(ack);
    } else if (e == Event::kOk) {
      ring->Unlink();  // mapped on both sides: the name is no longer needed
      stream_->ring = std::make_unique<ShmRing>(std::move(*ring));
      stream_->rw->Read(&stream_->end_read, kReadTag);
    }
  }
  if (e == Event::kOk) return stream_.get();
  const absl::Status final_status = Drop(/*cancel=*/e == Event::kTimedOut);
  if (e == Event::kTimedOut) return absl::DeadlineExceededError("session: deadline exceeded opening the stream");
  return final_status.ok() ? absl::UnavailableError("session: the stream could not be opened") : final_status;
}

absl::Status KernelSession::Drop(bool cancel) {
  std::unique_ptr<Stream> s = std::move(stream_);
  s->ring.reset();  // marks it closed: the server's loop ends the stream
  if (cancel) s->ctx.TryCancel();
  grpc::Status status;
  s->rw->Finish(&status, kFinishTag);
  // A cancelled operation comes back first, then Finish.
  for (;;) {
    void* tag = nullptr;
    bool ok = false;
    if (!s->cq.Next(&tag, &ok) || tag == kFinishTag) break;
  }
  s->cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (s->cq.Next(&tag, &ok)) {
  }
  // A stream we cancelled ends CANCELLED; only the server's own ending says more.
  return status.error_code() == grpc::StatusCode::CANCELLED ? absl::OkStatus() : FromGrpcStatus(status);
}

absl::StatusOr<v1::SessionResponse> KernelSession::Call(v1::SessionRequest* req, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  req->set_id(next_id_++);
  for (int attempt = 0;; ++attempt) {
    const bool reused = stream_ != nullptr;
    absl::StatusOr<Stream*> s = Open(deadline);
    if (!s.ok()) return s.status();
    if ((*s)->ring != nullptr) {
      if ((*s)->ring->header()->closed.load() != 0 || (*s)->ended) {
        // The server left the ring while it was idle (a restart, a shutdown,
        // or a crash an earlier call saw): this call never reached it, so
        // once more on a fresh stream.
        const absl::Status final_status = Drop(/*cancel=*/false);
        if (reused && attempt == 0) continue;
        return final_status.ok() ? absl::UnavailableError("session ring: the server ended the session")
                                 : final_status;
      }
      return RingCall(*s, *req, deadline);
    }
    (*s)->rw->Write(*req, kWriteTag);
    Event e = Next(&(*s)->cq, deadline);
    if (e == Event::kTimedOut) {
      Drop(/*cancel=*/true).IgnoreError();
      return absl::DeadlineExceededError("session: deadline exceeded sending a kernel call");
    }
    if (e == Event::kFailed) {
      const absl::Status final_status = Drop(/*cancel=*/false);
      // A stream that died before this call never saw the request: once more, fresh.
      if (reused && attempt == 0) continue;
      return final_status.ok() ? absl::UnavailableError("session: the stream closed before the call was sent")
                               : final_status;
    }
    v1::SessionResponse resp;
    (*s)->rw->Read(&resp, kReadTag);
    e = Next(&(*s)->cq, deadline);
    if (e == Event::kTimedOut) {
      Drop(/*cancel=*/true).IgnoreError();
      return absl::DeadlineExceededError("session: deadline exceeded waiting for a kernel call's answer");
    }
    if (e == Event::kFailed) {
      const absl::Status final_status = Drop(/*cancel=*/false);
      return final_status.ok()
                 ? absl::UnavailableError("session: the server ended the session before answering the call")
                 : final_status;
    }
    if (resp.id() != req->id()) {
      Drop(/*cancel=*/true).IgnoreError();
      return absl::DataLossError(
          absl::StrCat("session: the answer to request ", req->id(), " came with id ", resp.id()));
    }
    if (resp.code() != 0) {
      return AnswerStatus(resp);
    }
    return resp;
  }
}

absl::StatusOr<v1::SessionResponse> KernelSession::RingCall(Stream* s, const v1::SessionRequest& req,
                                                           absl::Time deadline) {
  ShmRingHeader* h = s->ring->header();
  const size_t n = req.ByteSizeLong();
  if (n > h->capacity) {
    return absl::ResourceExhaustedError(absl::StrCat("session ring: a request of ", n, " bytes is over the ring's ",
                                                     h->capacity, " (pass large tensors as buffers)"));
  }
  req.SerializeToArray(s->ring->request(), static_cast<int>(n));
  h->req_len = static_cast<uint32_t>(n);
  const uint32_t seq = h->req_seq.load(std::memory_order_relaxed) + 1;
  const uint32_t seen = h->resp_seq.load(std::memory_order_acquire);
  h->req_seq.store(seq, std::memory_order_release);
  ShmRing::Wake(&h->req_seq);
  bool ended = false;
  while (h->resp_seq.load(std::memory_order_acquire) != seq) {
    if (h->closed.load() != 0 || ended) {
      const absl::Status final_status = Drop(/*cancel=*/false);
      return final_status.ok()
                 ? absl::UnavailableError("session ring: the server ended the session before answering the call")
                 : final_status;
    }
    if (absl::Now() >= deadline) {
      Drop(/*cancel=*/true).IgnoreError();
      return absl::DeadlineExceededError("session ring: deadline exceeded waiting for a kernel call's answer");
    }
    // In slices, looking at the stream only after one passed unanswered (a
    // server that died mid-call never sets `closed`; polling the stream's
    // queue on every call cost ~70 µs of a ~90 µs round trip).
    if (!ShmRing::WaitChange(&h->resp_seq, seen, std::min(deadline, absl::Now() + kRingStreamCheck))) {
      ended = s->RingStreamEnded();
    }
  }
  v1::SessionResponse resp;
  if (!resp.ParseFromArray(s->ring->response(), static_cast<int>(h->resp_len)) || resp.id() != req.id()) {
    Drop(/*cancel=*/true).IgnoreError();
    return absl::DataLossError("session ring: an unreadable answer or one to another request");
  }
  if (resp.code() != 0) {
    return AnswerStatus(resp);
  }
  return resp;
}

}  // namespace kernelserve
