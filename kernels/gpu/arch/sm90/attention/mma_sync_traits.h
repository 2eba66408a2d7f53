// Tile shapes of the mma.sync (FA2-style) forward kernel. Each warp owns
// 16 * kMTiles query rows of a kBlockM-row tile and walks the keys kBlockN
// at a time.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_MMA_SYNC_TRAITS_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_MMA_SYNC_TRAITS_H_

namespace kernelserve {
namespace gpu {
namespace attention {

template <int kHeadDim_, bool kCausal_>
struct MmaSyncTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kCausal = kCausal_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  // Query rows per warp in 16-row mma tiles. Two tiles share every K and V
  // fragment a warp reads from shared memory, which cuts the shared-memory
  // traffic per mma from 256 to ~160 bytes (FA2's shape); at d256 the
  // accumulator of two tiles would not fit in registers.
  static constexpr int kMTiles = kHeadDim <= 128 ? 2 : 1;
  static constexpr int kBlockM = 16 * kMTiles * kWarps;
  // d256 keeps a 16x256 fp32 accumulator per warp: a narrower key tile
  // leaves room for the scores without spilling.
  static constexpr int kBlockN = kHeadDim <= 128 ? 64 : 32;
  // Q fragments stay in registers for the whole key loop when they are small
  // (16 x 128 per warp at most); otherwise they are re-read from shared memory.
  static constexpr bool kQInRegs = kMTiles * kHeadDim <= 128;
  static constexpr int kMinBlocksPerSm = 2;
  // Shared memory: Q tile, one K tile, one V tile (FA2's schedule: V loads
  // during QK^T, the next K during PV).
  static constexpr int kSmemQ = kBlockM * kHeadDim;  // elements
  static constexpr int kSmemK = kBlockN * kHeadDim;
  static constexpr int kSmemV = kBlockN * kHeadDim;
  static constexpr int kSmemBytes = 2 * (kSmemQ + kSmemK + kSmemV);
  static_assert(kHeadDim % 64 == 0, "head dim 64, 128 or 256");
};

// Swizzled element offset of (row, col) in a tile with kHeadDim columns: the
// 16-byte chunk index is XORed with the row's low 3 bits so that ldmatrix's 8
// rows at one column hit 8 different bank groups.
template <int kHeadDim>
__device__ __forceinline__ int SwizzledOffset(int row, int col) {
  return row * kHeadDim + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_MMA_SYNC_TRAITS_H_
