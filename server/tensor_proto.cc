#include "server/tensor_proto.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

bool HasNonFinite(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
    case DType::kFp16:
    case DType::kFp32:
    case DType::kFp64:
    case DType::kFp8E4M3Fn:
    case DType::kFp8E4M3Fnuz:
    case DType::kFp8E5M2:
    case DType::kE8M0:
      return true;
    default:
      return false;
  }
}

namespace {

// "NaN", "Inf", "-Inf", or nullptr for a finite element.
template <typename Bits>
const char* ClassifyIeee(Bits v, Bits exponent, Bits sign) {
  if ((v & exponent) != exponent) return nullptr;
  if ((v & ~(exponent | sign)) != 0) return "NaN";
  return (v & sign) != 0 ? "-Inf" : "Inf";
}

const char* Classify(DType dtype, const uint8_t* p) {
  switch (dtype) {
    case DType::kBf16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return ClassifyIeee<uint16_t>(v, 0x7F80, 0x8000);
    }
    case DType::kFp16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return ClassifyIeee<uint16_t>(v, 0x7C00, 0x8000);
    }
    case DType::kFp32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return ClassifyIeee<uint32_t>(v, 0x7F800000u, 0x80000000u);
    }
    case DType::kFp64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return ClassifyIeee<uint64_t>(v, 0x7FF0000000000000ull, 0x8000000000000000ull);
    }
    case DType::kFp8E5M2:
      return ClassifyIeee<uint8_t>(*p, 0x7C, 0x80);
    case DType::kFp8E4M3Fn:  // no Inf; NaN is S.1111.111
      return (*p & 0x7F) == 0x7F ? "NaN" : nullptr;
    case DType::kFp8E4M3Fnuz:  // no Inf; NaN is 0x80
    case DType::kE8M0:         // 255 is NaN
      return *p == (dtype == DType::kE8M0 ? 0xFF : 0x80) ? "NaN" : nullptr;
    default:
      return nullptr;
  }
}

std::string ElementIndex(const Shape& shape, int64_t flat) {
  std::vector<int64_t> index(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    index[i] = flat % shape[i];
    flat /= shape[i];
  }
  return absl::StrCat("[", absl::StrJoin(index, ","), "]");
}

}  // namespace

absl::Status CheckFinite(absl::string_view field, const TensorDesc& desc, const void* bytes, int64_t first,
                         int64_t count) {
  if (!HasNonFinite(desc.dtype)) return absl::OkStatus();
  const int64_t size = NumBytes(desc.dtype, 1);
  const auto* p = static_cast<const uint8_t*>(bytes);
  for (int64_t i = 0; i < count; ++i) {
    const char* what = Classify(desc.dtype, p + i * size);
    if (what == nullptr) continue;
    const int64_t flat = first + i;
    return absl::InvalidArgumentError(absl::StrCat(field, ElementIndex(desc.shape, flat), ": ", what,
                                                   " (element ", flat, " of ", desc.DebugString(),
                                                   "); --reject_nonfinite refuses non-finite inputs"));
  }
  return absl::OkStatus();
}

HostTensor HostTensorFromProto(const TensorDesc& desc, const pb::Tensor& tensor) {
  const auto* p = reinterpret_cast<const uint8_t*>(tensor.data().data());
  return HostTensor(desc, std::vector<uint8_t>(p, p + tensor.data().size()));
}

}  // namespace kernelserve
