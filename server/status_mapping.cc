#include "server/status_mapping.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kernelserve {

grpc::StatusCode ToGrpcCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return grpc::StatusCode::OK;
    case absl::StatusCode::kCancelled: return grpc::StatusCode::CANCELLED;
    case absl::StatusCode::kUnknown: return grpc::StatusCode::UNKNOWN;
    case absl::StatusCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case absl::StatusCode::kDeadlineExceeded: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case absl::StatusCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case absl::StatusCode::kAlreadyExists: return grpc::StatusCode::ALREADY_EXISTS;
    case absl::StatusCode::kPermissionDenied: return grpc::StatusCode::PERMISSION_DENIED;
    case absl::StatusCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case absl::StatusCode::kFailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case absl::StatusCode::kAborted: return grpc::StatusCode::ABORTED;
    case absl::StatusCode::kOutOfRange: return grpc::StatusCode::OUT_OF_RANGE;
    case absl::StatusCode::kUnimplemented: return grpc::StatusCode::UNIMPLEMENTED;
    case absl::StatusCode::kInternal: return grpc::StatusCode::INTERNAL;
    case absl::StatusCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case absl::StatusCode::kDataLoss: return grpc::StatusCode::DATA_LOSS;
    case absl::StatusCode::kUnauthenticated: return grpc::StatusCode::UNAUTHENTICATED;
    default: return grpc::StatusCode::UNKNOWN;
  }
}

std::string BoundedMessage(absl::string_view message) {
  if (message.size() <= kMaxStatusMessageBytes) return std::string(message);
  return absl::StrCat(message.substr(0, kMaxStatusMessageBytes), "... (message cut at ",
                      kMaxStatusMessageBytes, " of ", message.size(), " bytes)");
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(ToGrpcCode(status.code()), BoundedMessage(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // The numeric values are the canonical codes in both libraries.
  const int code = static_cast<int>(status.error_code());
  if (code < 0 || code > 16) return absl::UnknownError(status.error_message());
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

}  // namespace kernelserve
