// The device parameters of the MLA decode kernels and the CTA shape they
// share with the split plan and the merge, in plain C++ so that host code,
// nvcc and clang for HIP all read the same definition.
//
// One CTA = (KV split, group of 64 query rows, request). The 64 rows are the
// flattened (draft position, head) pairs of one request, so every head of a
// group shares each KV tile, read from memory once per group. With several
// splits, the partial outputs and their (max, sum) go to a workspace that the
// merge combines in split order: the result does not depend on scheduling.
#ifndef KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_PARAMS_H_
#define KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_PARAMS_H_

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace mla {

constexpr int kRows = 64;  // query rows per CTA
constexpr int kTok = 64;   // KV tokens per tile
constexpr int kD = 576;    // KV row: latent + rope
constexpr int kDL = 512;   // latent (also V and the output)
constexpr int kDR = 64;    // rope

struct KParams {
  const uint16_t* q_lat;
  const uint16_t* q_pe;
  const uint8_t* kv;
  uint16_t* out;
  // [B][G][splits][64][512]: f16 O / l (MlaPartials::kF16) or fp32 O
  // (MlaPartials::kF32), the partials' layout the kernel writes.
  float* part_o;
  float* part_ml;  // [B][G][splits][64][2]
  const int32_t* seq_lens;
  const int32_t* kv_indices;
  const int32_t* kv_indptr;
  const int32_t* q_lens;
  int q_len, heads, rows, row_groups, splits, page_size, paged, rounding;
  int64_t chunk, kv_seq;
  float sl2;        // softmax scale * kv_scale * log2(e)
  float out_scale;  // kv_scale
};

// What a kernel leaves in the workspace for the merge when it splits KV.
enum class MlaPartials {
  kF32,  // unnormalized fp32 O; (m, l) with l the row sum
  kF16,  // f16 O / l; (m, l); empty splits write zeros and m = -Inf
};

using KernelFn = void (*)(const KParams);

// One kernel of the variant table: its entry point, its launch shape over
// the grid (splits, row groups, batch), and the partials it leaves.
struct DecodeKernel {
  KernelFn fn;
  int threads;
  int smem_bytes;  // dynamic shared memory
  MlaPartials partials;
  int cta_rows = kRows;  // query rows per CTA (the split plan's cta_rows); the partials stay in kRows
};

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_PARAMS_H_
