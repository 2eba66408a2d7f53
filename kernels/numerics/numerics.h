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

// ===================================================================
// Additions (additive; used by the oracle and the fast CPU backend).
// ===================================================================

// ---------------------------------------------------------- element access
// Exact double -> FP8 (round to nearest even once, saturating, NaN -> the
// format's NaN). FloatToFp8(x) == DoubleToFp8(double(x)).
uint8_t DoubleToFp8(double x, DType dtype);
// The 256 decoded values of an FP8 dtype (NaN codes are NaN); a static table.
const float* Fp8DecodeTable(DType dtype);
// The 16 decoded E2M1 values indexed by nibble; a static table.
const float* E2M1DecodeTable();
// float -> IEEE half, round to nearest even (overflow to Inf, NaN -> 0x7E00).
uint16_t FloatToFp16(float x);

// Vector helpers.
void Bf16ToFloat(const uint16_t* in, float* out, int64_t n);
void FloatToBf16(const float* in, uint16_t* out, int64_t n, Rounding mode);
void Fp8ToFloat(const uint8_t* in, float* out, int64_t n, DType dtype);

// Element i of a host buffer of a floating dtype (bf16, fp16, fp32, fp64,
// any FP8, packed FP4, E8M0) or integer dtype, as double. NaN for kInvalid.
double ElementToDouble(DType dtype, const void* data, int64_t i);
// Whole tensor as doubles (dtype as above).
std::vector<double> ToDoubles(const TensorView& t);
std::vector<float> ToFloats(const TensorView& t);
// Rounds fp64 results once into `dtype` (bf16 with `mode`, fp16 RNE, fp32
// RNE, fp64 exact, FP8 RNE saturating) and stores them into out[0..n).
void StoreDoubles(const double* in, int64_t n, DType dtype, Rounding mode, void* out);

// ------------------------------------------------------ ZYFA P codes (§4)
// The FP8 dtype of an attention format, without going through ops.cc.
DType Fp8FormatToDType(Fp8Format format);
// Block reference R = ceil(max_t) - h over one row's 64-key block, t in
// base-2 units (score * scale * log2 e). The ceiling is exact in any
// precision, so a backend evaluating max_t in fp32 gets the same R unless its
// max_t is on the other side of an integer. max_t = -Inf (fully masked block)
// gives INT_MIN: callers skip such blocks. Clamped to +-2^30 otherwise.
int BlockReference(double max_t, Fp8Format format);
// Exact P: code = fp8(2^y) rounded to nearest even, y = t - R <= h. 2^y is
// evaluated in fp64 (exactly representable for |y| < 1000 up to one rounding
// of exp2) and rounded once to FP8. A backend that computes exp2 in fp32 may
// differ by one code where 2^y lies within fp32 rounding of an FP8 tie.
// y = -Inf gives code 0. NaN y gives the format's NaN.
uint8_t ExactPCode(double y, Fp8Format format);
// Lean P: code = clamp(round_half_even(8*y + c1), 0, c1 + 8h).
// fp32 version: 8*y is exact (power-of-two multiply), so fmaf(y, 8, c1) and
// y*8 + c1 give the same single fp32 rounding; the rounding to an integer is
// half-to-even (rintf / __float2int_rn). A GPU kernel computing
// __float2int_rn(fmaf(y, 8.f, c1)) with the same fp32 y reproduces this bit
// for bit. The oracle uses the fp64 version (same formula in fp64).
uint8_t LeanPCode(float y, Fp8Format format);
uint8_t LeanPCode(double y, Fp8Format format);

}  // namespace numerics
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_NUMERICS_NUMERICS_H_
