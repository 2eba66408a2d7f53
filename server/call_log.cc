#include "server/call_log.h"

#include <algorithm>

#include "absl/status/status.h"
#include "server/status_mapping.h"
#include "spdlog/spdlog.h"

namespace kernelserve {

void CallCounter::Start() {
  absl::MutexLock lock(&mu_);
  ++in_flight_;
}

void CallCounter::End() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  last_end_ = absl::Now();
}

bool CallCounter::WaitQuiet(absl::Duration quiet, absl::Time deadline) {
  while (true) {
    absl::Time until;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      if (in_flight_ == 0 && now - last_end_ >= quiet) return true;
      if (now >= deadline) return in_flight_ == 0;
      // Polls while calls run; otherwise sleeps until the quiet time would be up.
      until = std::min(deadline, in_flight_ == 0 ? last_end_ + quiet : now + absl::Milliseconds(10));
    }
    absl::SleepFor(until - absl::Now());
  }
}

CallLog::CallLog(absl::string_view method, grpc::ServerContext* ctx, CallCounter* counter)
    : counter_(counter), method_(method), peer_(ctx != nullptr ? ctx->peer() : ""), start_(absl::Now()) {
  if (counter_ != nullptr) counter_->Start();
}

CallLog::~CallLog() {
  if (counter_ != nullptr) counter_->End();
}

absl::Status CallLog::OutOfHostMemory() {
  return absl::ResourceExhaustedError(
      "the server has no host memory left for this call; retry later or with smaller tensors");
}

std::string CallLog::PhasesString(absl::Time end) const {
  if (num_marks_ == 0) return "";
  std::string out;
  absl::Time prev = start_;
  for (int i = 0; i < num_marks_; ++i) {
    absl::StrAppend(&out, marks_[i].phase, "=", absl::ToDoubleMilliseconds(marks_[i].at - prev), " ");
    prev = marks_[i].at;
  }
  absl::StrAppend(&out, "reply=", absl::ToDoubleMilliseconds(end - prev));
  return out;
}

grpc::Status CallLog::Done(const absl::Status& status) {
  const absl::Time end = absl::Now();
  const double ms = absl::ToDoubleMilliseconds(end - start_);
  const std::string code = absl::StatusCodeToString(status.code());
  if (status.ok()) {
    spdlog::debug("call {} code={} ms={:.3f} in={} out={} peer={}{}{}", method_, code, ms, bytes_in_, bytes_out_,
                  peer_, num_marks_ > 0 ? " phases_ms: " : "", PhasesString(end));
  } else {
    spdlog::warn("call {} code={} ms={:.3f} in={} out={} peer={}: {}", method_, code, ms, bytes_in_,
                 bytes_out_, peer_, std::string(status.message()));
  }
  return ToGrpcStatus(status);
}

}  // namespace kernelserve
