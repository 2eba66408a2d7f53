#include "kernels/api/tensor.h"

#include "absl/strings/str_cat.h"

namespace kernelserve {

std::string TensorDesc::DebugString() const { return absl::StrCat(DTypeName(dtype), ShapeString(shape)); }

HostTensor::HostTensor(DType dtype, Shape shape) : desc_{dtype, std::move(shape)} {
  const int64_t n = desc_.num_bytes();
  bytes_.assign(n > 0 ? static_cast<size_t>(n) : 0, 0);
}

HostTensor::HostTensor(TensorDesc desc, std::vector<uint8_t> bytes)
    : desc_(std::move(desc)), bytes_(std::move(bytes)) {}

}  // namespace kernelserve
