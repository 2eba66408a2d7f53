// The prefill CTA of the gfx942 MXFP4 MoE GEMM (moe_gemm_mxfp4_cta.h): a
// 64-pair routing tile x 128 weight rows (128 output columns; 64 gate and 64
// up columns under SwiGLU), four waves in a 2 x 2 grid, each 32 rows x 64
// weight rows: 2 x 4 MFMA tiles per k-step from 2 A operands and 4 decoded B
// operands. The routing takes 64-row tiles when moe_gfx942_launch.h's
// SelectTileRows finds many rows per expert (chunked prefill: the seed's
// 146 per expert at T = 8192), where each weight is then decoded and read
// once per 64 pairs instead of per 16.
//
// Occupancy (checked on the code object by moe_gemm_m64_gfx942_hip_test):
// every epilogue stages 64 activation rows and 128 weight rows per slab, two
// buffers of 15616 bytes: LDS 31232, so two CTAs per CU, two waves per SIMD:
// VGPR + AGPR <= 256 per lane (8 accumulators of 4 fp32, gate and up alike;
// the next slab's three 16-byte pieces per thread in flight). No scratch.
#include "kernels/gpu/arch/gfx942/moe/moe_gemm_mxfp4_cta.h"

KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942M64Bf16, kernelserve::gpu::moe::gfx942::kPrefillTileRows,
                   kernelserve::gpu::moe::kEpiBf16)
KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942M64Swiglu, kernelserve::gpu::moe::gfx942::kPrefillTileRows,
                   kernelserve::gpu::moe::kEpiSwiglu)
KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942M64F32, kernelserve::gpu::moe::gfx942::kPrefillTileRows,
                   kernelserve::gpu::moe::kEpiF32)
