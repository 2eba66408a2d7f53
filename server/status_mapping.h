// The one place where absl::Status becomes grpc::Status (DESIGN §1).
#ifndef KERNELSERVE_SERVER_STATUS_MAPPING_H_
#define KERNELSERVE_SERVER_STATUS_MAPPING_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kernelserve {

grpc::StatusCode ToGrpcCode(absl::StatusCode code);
grpc::Status ToGrpcStatus(const absl::Status& status);
// The reverse, for code that talks to gRPC and reports through absl (tests, tools).
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_STATUS_MAPPING_H_
