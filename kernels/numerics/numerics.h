// Number formats and their exact conversions (DESIGN §4), shared by every
// backend's host code, the oracle and the tests. Host-only; GPU kernels keep
// their own device versions and are tested against these.
#ifndef KERNELSERVE_KERNELS_NUMERICS_NUMERICS_H_
#define KERNELSERVE_KERNELS_NUMERICS_NUMERICS_H_

#include <cstdint>
#include <vector>

#include "kernels/api/ops.h"

namespace kernelserve {
namespace numerics {

// ------------------------------------------------------------------- bf16
// bf16 bits -> float (exact).
float Bf16ToFloat(uint16_t bits);
// float -> bf16 in `mode`. NaN -> 0x7FFF. RTNE/RTNA overflow to +-Inf, RTZ to +-max finite.
uint16_t FloatToBf16(float x, Rounding mode);
// double -> bf16 rounded once (no double rounding through float).
uint16_t DoubleToBf16(double x, Rounding mode);
// IEEE half bits <-> float.
float Fp16ToFloat(uint16_t bits);

// ------------------------------------------------------------------- FP8
// Decode one FP8 code of `dtype` (kFp8E4M3Fn, kFp8E4M3Fnuz, kFp8E5M2); NaN codes give NaN.
float Fp8ToFloat(uint8_t code, DType dtype);
// Encode: round to nearest even, saturate finite values and +-Inf to +-max; NaN -> the format's NaN.
uint8_t FloatToFp8(float x, DType dtype);
float Fp8Max(DType dtype);  // 448, 240, 57344
// Code of 1.0 (56 for e4m3fn, 64 for e4m3fnuz) and the headroom h (8, 7) of ZYFA's P scaling.
int Fp8CodeOfOne(Fp8Format format);
int Fp8Headroom(Fp8Format format);

// ------------------------------------------------------------------ MXFP4
// E2M1 nibble (low 4 bits) -> float: {0,.5,1,1.5,2,3,4,6} with sign bit 3.
float E2M1ToFloat(uint8_t nibble);
// Round to nearest even E2M1 value, saturating at 6.
uint8_t FloatToE2M1(float x);
// E8M0 scale: 2^(e-127); e == 255 is NaN.
float E8M0ToFloat(uint8_t e);
// Element i of a packed FP4 array (element 2j in the low nibble of byte j).
inline uint8_t Fp4Nibble(const uint8_t* packed, int64_t i) {
  const uint8_t b = packed[i >> 1];
  return (i & 1) ? (b >> 4) : (b & 0xF);
}

// --------------------------------------------------------------- Hadamard
// In-place normalized Sylvester Hadamard transform of x[0..n), n = 64 or 128;
// n = 192 applies H128 to x[0..128) and H64 to x[128..192). fp64 and fp32 versions.
void Hadamard(double* x, int n);
void Hadamard(float* x, int n);

// ---------------------------------------------------------- quantization
// Per-tensor FP8 quantization of float values, as the server does it for bf16
// inputs: descale = amax / Fp8Max (fp32; 1 if amax == 0), code = FloatToFp8(x / descale)
// with an IEEE fp32 division. Returns the descale.
float QuantizeFp8(const float* x, int64_t n, DType dtype, uint8_t* codes);

// ----------------------------------------------------------- error metrics
struct ErrorMetrics {
  double rel_rms = 0;    // ||out - ref|| / ||ref|| (0 when both are zero)
  double max_abs = 0;    // max |out - ref| over elements where both are finite
  int64_t nonfinite = 0; // elements where out is NaN/Inf and ref is finite
};
ErrorMetrics CompareToReference(const double* out, const double* ref, int64_t n);

}  // namespace numerics
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_NUMERICS_NUMERICS_H_
