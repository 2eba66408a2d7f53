// One log line per call: debug when OK, warn on errors (method, code, ms,
// bytes); and the count of calls in flight that the shutdown drain waits on.
#ifndef KERNELSERVE_SERVER_CALL_LOG_H_
#define KERNELSERVE_SERVER_CALL_LOG_H_

#include <cstdint>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace kernelserve {

// The calls in flight on one server. Shutdown waits on it: a result that
// travels back as a buffer is downloaded by a second call right after the
// kernel call, which must still be served.
class CallCounter {
 public:
  void Start();
  void End();
  // Until no call has been in flight for `quiet`, or `deadline`; false when
  // calls are still in flight at the deadline.
  bool WaitQuiet(absl::Duration quiet, absl::Time deadline);

 private:
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_end_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

class CallLog {
 public:
  // `counter` (may be null) counts the call from here to the destructor.
  CallLog(absl::string_view method, grpc::ServerContext* ctx, CallCounter* counter = nullptr);
  ~CallLog();
  CallLog(const CallLog&) = delete;
  CallLog& operator=(const CallLog&) = delete;
  void AddBytesIn(int64_t n) { bytes_in_ += n; }
  void AddBytesOut(int64_t n) { bytes_out_ += n; }
  // Marks the end of a phase of the call (resolve, queue, validate, stage,
  // launch, sync, copy_out); the log line gives each phase's milliseconds from
  // the previous mark, and `reply` up to Done, so a call's service overhead can
  // be split from the kernel's time. Calls on one CallLog are sequential (the
  // handler thread waits while the device worker marks).
  void Mark(const char* phase) {
    if (num_marks_ < kMaxMarks) marks_[num_marks_++] = {phase, absl::Now()};
  }
  // "resolve=0.012 queue=0.004 ... reply=0.020" (ms), or "" without marks.
  std::string PhasesString(absl::Time end) const;
  // Logs the call and maps its status (status_mapping.h).
  grpc::Status Done(const absl::Status& status);
  // Done(body()). A handler that still runs out of host memory (std::bad_alloc
  // and the like) answers RESOURCE_EXHAUSTED, any other exception INTERNAL
  // naming it, instead of gRPC's bare UNKNOWN with no log line.
  template <typename Body>
  grpc::Status Run(Body&& body) {
    try {
      return Done(body());
    } catch (const std::bad_alloc&) {
      return Done(OutOfHostMemory());
    } catch (const std::length_error&) {
      return Done(OutOfHostMemory());
    } catch (const std::exception& e) {
      return Done(absl::InternalError(absl::StrCat("server bug: unexpected exception: ", e.what())));
    }
  }

 private:
  static absl::Status OutOfHostMemory();

  CallCounter* counter_;
  std::string method_;
  std::string peer_;
  absl::Time start_;
  int64_t bytes_in_ = 0;
  int64_t bytes_out_ = 0;
  struct PhaseMark {
    const char* phase;
    absl::Time at;
  };
  static constexpr int kMaxMarks = 12;
  PhaseMark marks_[kMaxMarks];
  int num_marks_ = 0;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_CALL_LOG_H_
