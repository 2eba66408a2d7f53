// Plain C++ launcher of the MXFP4 MoE kernels (no absl, so nvcc compiles it
// alone); moe.cc wraps it into the Backend-facing absl::Status API.
#ifndef KERNELSERVE_KERNELS_CUDA_MOE_MOE_LAUNCH_H_
#define KERNELSERVE_KERNELS_CUDA_MOE_MOE_LAUNCH_H_

#include <cuda_runtime.h>
#include <cstdint>

namespace kernelserve {
namespace cuda_moe {

enum class Stage { kGateUp = 1, kDown = 2, kLayer = 3 };

// Row tile of the grouped GEMM: 16 (decode), 64 or 128 rows per expert tile.
enum class Tile { kAuto = 0, k16 = 16, k64 = 64, k128 = 128 };

// GEMM kernel of the gate/up projection. kAuto: for gate/up alone at >= 72
// rows per expert when no tile is forced, the swizzled wgmma kernel whose
// tiling (kWgmmaSw 128 x 256 or kWgmmaWideSw 192 x 192) launches fewer CTAs,
// else mma.sync. kWgmma (128 x 256 tiles) also serves the gate/up half of a layer
// (routing in 128-row tiles; down stays on mma.sync); kWgmmaTall (256 x 128,
// measured slower) serves gate/up alone; kWgmmaSw is kWgmma with 128-byte-
// swizzled operands (same tiles, same uses); kWgmmaWide (192 x 192 tiles, 3
// warpgroups: one tile per expert up to 192 rows) and kWgmmaWideSw (the same,
// swizzled) serve gate/up alone. The wgmma ones ignore `tile`.
enum class Gemm { kAuto = 0, kMmaSync = 1, kWgmma = 2, kWgmmaTall = 3, kWgmmaSw = 4, kWgmmaWide = 5, kWgmmaWideSw = 6 };

struct MoeArgs {
  Stage stage = Stage::kLayer;
  bool swiglu = false;
  bool weighted = false;
  int rounding = 1;  // Rounding enum value
  int64_t tokens = 0, top_k = 0, experts = 0;
  int64_t hidden = 0;  // K of gate/up
  int64_t inter = 0;   // I
  int64_t out_dim = 0; // N of down
  const void* x = nullptr;               // bf16: [T,K] (gate/up, layer) or [T*top_k,I] (down)
  const int32_t* topk_ids = nullptr;     // [T, top_k]
  const float* topk_weights = nullptr;   // [T, top_k]
  const uint8_t* w13 = nullptr;          // fp4 [E, 2I, K/2 bytes]
  const uint8_t* w13_scales = nullptr;   // e8m0 [E, 2I, K/32]
  const uint8_t* w2 = nullptr;           // fp4 [E, N, I/2 bytes]
  const uint8_t* w2_scales = nullptr;    // e8m0 [E, N, I/32]
  void* out = nullptr;                   // bf16, MoeParams::OutputDesc
  Tile tile = Tile::kAuto;
  Gemm gemm = Gemm::kAuto;
};

// The kernel kAuto runs for the shape (kMmaSync, kWgmmaSw or kWgmmaWideSw).
Gemm AutoGemm(const MoeArgs& a);

// Empty when the shape is served, else why not (-> UNIMPLEMENTED).
const char* MoeUnsupported(const MoeArgs& a);

cudaError_t LaunchMoe(const MoeArgs& a, cudaStream_t stream);

}  // namespace cuda_moe
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_MOE_MOE_LAUNCH_H_
