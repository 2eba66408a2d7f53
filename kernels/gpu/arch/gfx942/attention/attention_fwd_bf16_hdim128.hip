// The gfx942 bf16 MHA forward at head dim 128 (attention_fwd_bf16_kernel.h):
// its two C names and the occupancy attention_gfx942_launch.h's kHdim128
// states (2 waves per SIMD). Compiled, never run: no AMD GPU exists here.
#include "kernels/gpu/arch/gfx942/attention/attention_fwd_bf16_kernel.h"

KS_ATTENTION_FWD_GFX942(KsAttentionFwdBf16Hdim128Gfx942, 128, false, 2)
KS_ATTENTION_FWD_GFX942(KsAttentionFwdBf16CausalHdim128Gfx942, 128, true, 2)
