// The tile scheduler of the MLA decode kernels, portable device code: what
// one CTA works on, (KV split, group of 64 query rows, request) from the
// grid (splits, row_groups, batch), that split's token range, and the KV row
// of each of its tokens in the contiguous tensor or the paged pool.
#ifndef KERNELSERVE_KERNELS_GPU_MLA_MLA_TILE_SCHEDULER_CUH_
#define KERNELSERVE_KERNELS_GPU_MLA_MLA_TILE_SCHEDULER_CUH_

#include <cstdint>

#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {

struct CtaWork {
  int split, group, b, ql, n_tiles, row0, nrows, kv_base;
  int64_t seq, tok_begin, tok_end;
};

__device__ __forceinline__ CtaWork GetCtaWork(const KParams& p) {
  CtaWork w;
  w.split = blockIdx.x;
  w.group = blockIdx.y;
  w.b = blockIdx.z;
  w.seq = p.seq_lens ? p.seq_lens[w.b] : p.kv_seq;
  w.ql = p.q_lens ? p.q_lens[w.b] : p.q_len;
  w.tok_begin = static_cast<int64_t>(w.split) * p.chunk;
  w.tok_end = min(w.seq, w.tok_begin + p.chunk);
  w.n_tiles = w.tok_end > w.tok_begin ? static_cast<int>((w.tok_end - w.tok_begin + kTok - 1) / kTok) : 0;
  w.row0 = w.group * kRows;
  w.nrows = min(kRows, p.rows - w.row0);
  w.kv_base = p.paged ? p.kv_indptr[w.b] : 0;
  return w;
}

// KV row of token j, or -1 past the split's chunk.
__device__ __forceinline__ int64_t SlotOf(const KParams& p, const CtaWork& w, int64_t j) {
  if (j >= w.tok_end) return -1;
  if (!p.paged) return static_cast<int64_t>(w.b) * p.kv_seq + j;
  if (p.page_size == 1) return p.kv_indices[w.kv_base + j];
  return static_cast<int64_t>(p.kv_indices[w.kv_base + j / p.page_size]) * p.page_size + j % p.page_size;
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MLA_MLA_TILE_SCHEDULER_CUH_
