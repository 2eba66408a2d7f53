// The gfx942 bf16 MHA forward at head dim 256 (attention_fwd_bf16_kernel.h):
// its two C names and the occupancy attention_gfx942_launch.h's kHdim256
// states (2 waves per SIMD). Compiled, never run: no AMD GPU exists here.
#include "kernels/gpu/arch/gfx942/attention/attention_fwd_bf16_kernel.h"

KS_ATTENTION_FWD_GFX942(KsAttentionFwdBf16Hdim256Gfx942, 256, false, 2)
KS_ATTENTION_FWD_GFX942(KsAttentionFwdBf16CausalHdim256Gfx942, 256, true, 2)
