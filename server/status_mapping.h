// The one place where absl::Status becomes grpc::Status (DESIGN §1).
#ifndef KERNELSERVE_SERVER_STATUS_MAPPING_H_
#define KERNELSERVE_SERVER_STATUS_MAPPING_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace kernelserve {

// Longest status message sent. gRPC carries the message in a header that it
// percent-encodes (up to 3x) and that clients refuse past their metadata limit
// (8 KiB by default), which would turn the status into RESOURCE_EXHAUSTED.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

grpc::StatusCode ToGrpcCode(absl::StatusCode code);
// The message is cut to kMaxStatusMessageBytes (BoundedMessage).
grpc::Status ToGrpcStatus(const absl::Status& status);
std::string BoundedMessage(absl::string_view message);
// The reverse, for code that talks to gRPC and reports through absl (tests, tools).
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_STATUS_MAPPING_H_
