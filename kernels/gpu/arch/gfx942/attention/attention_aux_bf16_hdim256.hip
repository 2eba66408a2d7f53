// The gfx942 bf16 forward's V transpose and dense-tail merge at head dim 256
// (attention_aux_bf16_kernel.h): their C names; the transpose's 33792 bytes of
// LDS leave room for 1 blocks per CU. Compiled, never run: no AMD GPU exists here.
#include "kernels/gpu/arch/gfx942/attention/attention_aux_bf16_kernel.h"

KS_ATTENTION_AUX_GFX942(KsAttentionVTransposeHdim256Gfx942, KsAttentionMergeHdim256Gfx942, 256, 1)
