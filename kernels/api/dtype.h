// Element types shared by the API, the backends and the numerics.
#ifndef KERNELSERVE_KERNELS_API_DTYPE_H_
#define KERNELSERVE_KERNELS_API_DTYPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelserve {

// Values match proto kernelserve.v1.DType.
enum class DType : int {
  kInvalid = 0,
  kBf16 = 1,
  kFp16 = 2,
  kFp32 = 3,
  kFp64 = 4,
  kFp8E4M3Fn = 5,
  kFp8E4M3Fnuz = 6,
  kFp8E5M2 = 7,
  kFp4E2M1 = 8,  // packed two per byte, even element in the low nibble
  kE8M0 = 9,
  kInt32 = 10,
  kInt64 = 11,
  kUint8 = 12,
};

// Bits per element (4 for kFp4E2M1); 0 for kInvalid.
int DTypeBits(DType dtype);
// Lower-case name as used in messages and on the command line ("bf16", "fp8_e4m3fn").
std::string DTypeName(DType dtype);
absl::StatusOr<DType> ParseDType(absl::string_view name);
bool IsFp8(DType dtype);
// True for values a proto enum may carry that name a real type.
bool IsValidDType(int value);

using Shape = std::vector<int64_t>;

std::string ShapeString(const Shape& shape);  // "[2,3,4]"
// Product of dims; -1 if any dim is negative or the product overflows int64.
int64_t NumElements(const Shape& shape);
// Bytes for `elements` of `dtype` (packed FP4 rounds up to whole bytes); -1 on overflow.
int64_t NumBytes(DType dtype, int64_t elements);

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_API_DTYPE_H_
