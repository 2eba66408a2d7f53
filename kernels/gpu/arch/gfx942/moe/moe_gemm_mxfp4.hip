// The decode CTA of the gfx942 MXFP4 MoE GEMM (moe_gemm_mxfp4_cta.h): a
// 16-pair routing tile x 64 output columns, four waves of one 16 x 16 MFMA
// tile each (and its up tile under SwiGLU). The routing takes 16-row tiles
// when moe_gfx942_launch.h's SelectTileRows says a call has few rows per
// expert (decode), or a K or width too small for the prefill CTA.
//
// Occupancy (checked on the code object by moe_gfx942_hip_test): LDS 11008
// bytes (bf16 and fp32 epilogues) and 17408 (SwiGLU: 128 weight rows), so
// three CTAs per CU for every epilogue, three waves per SIMD: VGPR + AGPR
// <= 168 per lane (two accumulators of 4 fp32, one k-step's operands, the
// next slab's loads in flight). No scratch.
#include "kernels/gpu/arch/gfx942/moe/moe_gemm_mxfp4_cta.h"

KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942Bf16, kernelserve::gpu::moe::gfx942::kTileRows,
                   kernelserve::gpu::moe::kEpiBf16)
KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942Swiglu, kernelserve::gpu::moe::gfx942::kTileRows,
                   kernelserve::gpu::moe::kEpiSwiglu)
KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942F32, kernelserve::gpu::moe::gfx942::kTileRows,
                   kernelserve::gpu::moe::kEpiF32)
