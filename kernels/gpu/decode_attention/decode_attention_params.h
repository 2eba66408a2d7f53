// The device parameters of decode attention over a PER_HEAD_KV pool and the
// CTA shape the kernels, the split plan and the merge share, in plain C++ so
// host code and nvcc read one definition.
//
// One CTA = (row group, KV head, split, request): the row group is 16 * MT
// of the q_len x group query rows that read KV head hkv (row r = t * group +
// g is new token t of query head hkv * group + g), so every query head of
// the group shares each K and V byte the CTA loads. Row groups of one
// (request, head, split) are adjacent in the grid (blockIdx.x) and read the
// same KV at the same time, from L2 after the first. The CTA's four warps take
// 16-token tiles of the split in turn, each with its own online softmax,
// and combine in warp order at the end. With several splits the unnormalized
// fp32 outputs and their (max, sum) go to a workspace that the merge
// combines in a fixed order: the result does not depend on scheduling.
#ifndef KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_ATTENTION_PARAMS_H_
#define KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_ATTENTION_PARAMS_H_

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace decode {

constexpr int kWarps = 4;  // per CTA
constexpr int kThreads = kWarps * 32;
constexpr int kTileTokens = 16;                    // per warp and step
constexpr int kStepTokens = kWarps * kTileTokens;  // a split's chunk is a multiple of this
constexpr int kMaxSplits = 256;

// KV formats the kernels decode (one object each).
enum class KvFormat : int { kBf16 = 0, kE4m3fn = 1, kE4m3fnuz = 2, kE5m2 = 3 };

struct KParams {
  const uint16_t *q;    // [B, q_len, Hq, D] bf16
  const uint8_t *pool;  // [num_slots, 2 * Hkv * D], read in place
  uint16_t *out;        // [B, q_len, Hq, D] bf16
  float *part_o;        // [B][Hkv][row_groups][splits][cta_rows][D] fp32, unnormalized
  float *part_ml;       // [B][Hkv][row_groups][splits][cta_rows][2]: max (base 2), sum
  const int32_t *seq_lens;
  const int32_t *kv_indices;
  const int32_t *kv_indptr;
  const int32_t *q_lens;  // nullptr: every request has q_len new tokens
  int q_len, heads_q, heads_kv, group, page_size, rounding;
  int rows;        // q_len * group
  int cta_rows;    // 16 * MT
  int row_groups;  // ceil(rows / cta_rows)
  int splits;
  int chunk;          // tokens per split, a multiple of kStepTokens
  int64_t row_elems;  // 2 * Hkv * D
  float sl2;          // softmax scale * kv_scale * log2(e)
  float out_scale;    // kv_scale
};

using KernelFn = void (*)(const KParams);

// One kernel: its entry point and launch shape over the grid
// (row groups, Hkv * splits, batch).
struct DecodeKernel {
  KernelFn fn = nullptr;
  int threads = kThreads;
  int smem_bytes = 0;  // dynamic shared memory
  int mt = 1;          // 16-row m-tiles per CTA
};

}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_ATTENTION_PARAMS_H_
