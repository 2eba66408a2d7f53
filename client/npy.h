// NumPy .npy files (format versions 1.0, 2.0 and 3.0; little-endian; C order)
// and their conversion to and from the tensors the ops take.
//
// Reading rules (NpyToTensor):
//   - float16/float32/float64 arrays become the op's float input type. For
//     bf16 each value is rounded ONCE from its exact value to bf16 with
//     round-to-nearest-even (no double rounding through fp32; NaN becomes
//     0x7FFF, overflow becomes +-Inf). For fp32 the value is converted with
//     IEEE round-to-nearest-even.
//   - uint8 arrays are raw codes: FP8 (e4m3fn/e4m3fnuz/e5m2), E8M0 scales,
//     uint8, or packed FP4 (two elements per byte, even element in the low
//     nibble; an array of shape [..., K/2] bytes is the tensor [..., K]).
//   - int32/int64 arrays are index tensors (int32 values are range-checked).
//   - anything else (bool, big-endian, Fortran order, other types) is an
//     error naming the file and what was expected.
// Writing (TensorToNpy): bf16 and fp32 tensors become float32 arrays holding
// the exact values; fp64 float64; int32/int64 themselves; byte types uint8
// (packed FP4 as its bytes, last dim halved).
#ifndef KERNELSERVE_CLIENT_NPY_H_
#define KERNELSERVE_CLIENT_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {

// A parsed .npy array: its element kind and size, shape and raw little-endian bytes.
struct NpyArray {
  char kind = 0;      // 'f' float, 'i' signed int, 'u' unsigned int
  int itemsize = 0;   // bytes per element
  Shape shape;        // () is a scalar with one element
  std::vector<uint8_t> data;

  std::string DescrString() const;  // "<f4", "|u1"
  int64_t num_elements() const { return NumElements(shape); }
};

// Parses the bytes of a .npy file; `name` (usually the path) appears in errors.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view name);
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);

// Serializes with a v1.0 header (v2.0 when the header needs it), 64-byte aligned.
std::string SerializeNpy(const NpyArray& array);
absl::Status WriteNpyFile(const std::string& path, const NpyArray& array);

// What an input may be converted to. A field left kInvalid means arrays of
// that kind are not accepted for this input.
struct NpyAccept {
  DType float_as = DType::kInvalid;  // kBf16, kFp32 or kFp64
  DType uint8_as = DType::kInvalid;  // an FP8 type, kE8M0, kUint8 or kFp4E2M1 (packed)
  DType int_as = DType::kInvalid;    // kInt32 or kInt64
  std::string what;                  // for errors: "q", "kv_indices", ...
};

// Converts following the rules above; errors name `name` and the accepted kinds.
absl::StatusOr<HostTensor> NpyToTensor(const NpyArray& array, const NpyAccept& accept,
                                       absl::string_view name);
absl::StatusOr<HostTensor> ReadNpyTensor(const std::string& path, const NpyAccept& accept);

absl::StatusOr<NpyArray> TensorToNpy(const HostTensor& tensor);
absl::Status WriteNpyTensor(const std::string& path, const HostTensor& tensor);

// Conversions used above, exposed for tests and callers that build tensors.
// bf16 of `x` rounded once in `mode` (DESIGN §4: NaN -> 0x7FFF; RTNE/RTNA
// overflow to +-Inf, RTZ to +-max finite).
uint16_t NpyDoubleToBf16(double x, Rounding mode = Rounding::kRtne);
float NpyBf16ToFloat(uint16_t bits);
double NpyHalfToDouble(uint16_t bits);

}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_NPY_H_
