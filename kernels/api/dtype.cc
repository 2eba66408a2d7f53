#include "kernels/api/dtype.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelserve {
namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  int bits;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kBf16, "bf16", 16},          {DType::kFp16, "fp16", 16},
    {DType::kFp32, "fp32", 32},          {DType::kFp64, "fp64", 64},
    {DType::kFp8E4M3Fn, "fp8_e4m3fn", 8}, {DType::kFp8E4M3Fnuz, "fp8_e4m3fnuz", 8},
    {DType::kFp8E5M2, "fp8_e5m2", 8},    {DType::kFp4E2M1, "fp4_e2m1", 4},
    {DType::kE8M0, "e8m0", 8},           {DType::kInt32, "int32", 32},
    {DType::kInt64, "int64", 64},        {DType::kUint8, "uint8", 8},
};

}  // namespace

int DTypeBits(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.bits;
  }
  return 0;
}

std::string DTypeName(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return absl::StrCat("invalid(", static_cast<int>(dtype), ")");
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (const auto& e : kDTypes) {
    if (name == e.name) return e.dtype;
  }
  std::vector<std::string> names;
  for (const auto& e : kDTypes) names.push_back(e.name);
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype \"", name, "\"; expected one of ",
                                                 absl::StrJoin(names, ", ")));
}

bool IsFp8(DType dtype) {
  return dtype == DType::kFp8E4M3Fn || dtype == DType::kFp8E4M3Fnuz || dtype == DType::kFp8E5M2;
}

bool IsValidDType(int value) { return DTypeBits(static_cast<DType>(value)) != 0; }

std::string ShapeString(const Shape& shape) { return absl::StrCat("[", absl::StrJoin(shape, ","), "]"); }

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

int64_t NumBytes(DType dtype, int64_t elements) {
  const int bits = DTypeBits(dtype);
  if (elements < 0 || bits == 0) return -1;
  if (elements > std::numeric_limits<int64_t>::max() / bits) return -1;
  return (elements * bits + 7) / 8;
}

}  // namespace kernelserve
