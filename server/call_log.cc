#include "server/call_log.h"

#include "absl/status/status.h"
#include "server/status_mapping.h"
#include "spdlog/spdlog.h"

namespace kernelserve {

CallLog::CallLog(absl::string_view method, grpc::ServerContext* ctx)
    : method_(method), peer_(ctx != nullptr ? ctx->peer() : ""), start_(absl::Now()) {}

grpc::Status CallLog::Done(const absl::Status& status) {
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - start_);
  const std::string code = absl::StatusCodeToString(status.code());
  if (status.ok()) {
    spdlog::debug("call {} code={} ms={:.3f} in={} out={} peer={}", method_, code, ms, bytes_in_,
                  bytes_out_, peer_);
  } else {
    spdlog::warn("call {} code={} ms={:.3f} in={} out={} peer={}: {}", method_, code, ms, bytes_in_,
                 bytes_out_, peer_, std::string(status.message()));
  }
  return ToGrpcStatus(status);
}

}  // namespace kernelserve
