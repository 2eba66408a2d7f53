// The gfx942 bf16 MHA forward at head dim 64 (attention_fwd_bf16_kernel.h):
// its two C names and the occupancy attention_gfx942_launch.h's kHdim64
// states (4 waves per SIMD). Compiled, never run: no AMD GPU exists here.
#include "kernels/gpu/arch/gfx942/attention/attention_fwd_bf16_kernel.h"

KS_ATTENTION_FWD_GFX942(KsAttentionFwdBf16Hdim64Gfx942, 64, false, 4)
KS_ATTENTION_FWD_GFX942(KsAttentionFwdBf16CausalHdim64Gfx942, 64, true, 4)
