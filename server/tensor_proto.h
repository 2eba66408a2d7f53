// Conversions between proto tensors and kernels/api descriptors, with the
// checks every request field gets: a known dtype, positive dims and a byte
// count equal to dtype x shape. Messages name the field ("q.shape[2]: ...").
#ifndef KERNELSERVE_SERVER_TENSOR_PROTO_H_
#define KERNELSERVE_SERVER_TENSOR_PROTO_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_field.h"
#include "kernels/api/tensor.h"
#include "kernelserve/v1/tensor.pb.h"

namespace kernelserve {

namespace pb = ::kernelserve::v1;

// dtype (proto enum value) and shape from a request; `field` prefixes the
// messages. Dims must be > 0; a rank-0 shape is a scalar.
absl::StatusOr<TensorDesc> DescFromProto(absl::string_view field, int dtype,
                                         const google::protobuf::RepeatedField<int64_t>& shape);

// A whole inline tensor: descriptor checks plus data size.
absl::StatusOr<TensorDesc> CheckTensor(absl::string_view field, const pb::Tensor& tensor);

void DescToProto(const TensorDesc& desc, pb::Tensor* tensor);  // dtype and shape only
HostTensor HostTensorFromProto(const TensorDesc& desc, const pb::Tensor& tensor);

// "expected N bytes (bf16[2,3]), got M".
std::string ByteCountMismatch(const TensorDesc& desc, int64_t got);

// Whether `dtype` can hold NaN or Inf (the float and fp8 types and e8m0; fp4 and integers cannot).
bool HasNonFinite(DType dtype);
// --reject_nonfinite: `bytes` holds elements [first, first + count) of a
// tensor `desc`; the first NaN or Inf among them is INVALID_ARGUMENT naming
// the field and the element's index, e.g. "q[0,1,3,7]: NaN (element 103)".
absl::Status CheckFinite(absl::string_view field, const TensorDesc& desc, const void* bytes, int64_t first,
                         int64_t count);

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_TENSOR_PROTO_H_
