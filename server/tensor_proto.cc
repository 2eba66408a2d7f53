#include "server/tensor_proto.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace kernelserve {

absl::StatusOr<TensorDesc> DescFromProto(absl::string_view field, int dtype,
                                         const google::protobuf::RepeatedField<int64_t>& shape) {
  if (dtype == 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".dtype: required (got DTYPE_UNSPECIFIED)"));
  }
  if (!IsValidDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".dtype: unknown dtype value ", dtype));
  }
  TensorDesc desc;
  desc.dtype = static_cast<DType>(dtype);
  desc.shape.assign(shape.begin(), shape.end());
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape[", i, "]: expected > 0, got ", shape[i]));
    }
  }
  if (desc.num_elements() < 0 || desc.num_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: ", ShapeString(desc.shape), " overflows int64"));
  }
  return desc;
}

std::string ByteCountMismatch(const TensorDesc& desc, int64_t got) {
  return absl::StrCat("expected ", desc.num_bytes(), " bytes (", desc.DebugString(), "), got ", got);
}

absl::StatusOr<TensorDesc> CheckTensor(absl::string_view field, const pb::Tensor& tensor) {
  auto desc = DescFromProto(field, tensor.dtype(), tensor.shape());
  if (!desc.ok()) return desc.status();
  const int64_t got = static_cast<int64_t>(tensor.data().size());
  if (got != desc->num_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".data: ", ByteCountMismatch(*desc, got)));
  }
  return desc;
}

void DescToProto(const TensorDesc& desc, pb::Tensor* tensor) {
  tensor->set_dtype(static_cast<pb::DType>(desc.dtype));
  tensor->clear_shape();
  for (int64_t d : desc.shape) tensor->add_shape(d);
}

HostTensor HostTensorFromProto(const TensorDesc& desc, const pb::Tensor& tensor) {
  const auto* p = reinterpret_cast<const uint8_t*>(tensor.data().data());
  return HostTensor(desc, std::vector<uint8_t>(p, p + tensor.data().size()));
}

}  // namespace kernelserve
