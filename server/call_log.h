// One log line per call: debug when OK, warn on errors (method, code, ms, bytes).
#ifndef KERNELSERVE_SERVER_CALL_LOG_H_
#define KERNELSERVE_SERVER_CALL_LOG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace kernelserve {

class CallLog {
 public:
  CallLog(absl::string_view method, grpc::ServerContext* ctx);
  void AddBytesIn(int64_t n) { bytes_in_ += n; }
  void AddBytesOut(int64_t n) { bytes_out_ += n; }
  // Logs the call and maps its status (status_mapping.h).
  grpc::Status Done(const absl::Status& status);

 private:
  std::string method_;
  std::string peer_;
  absl::Time start_;
  int64_t bytes_in_ = 0;
  int64_t bytes_out_ = 0;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_CALL_LOG_H_
