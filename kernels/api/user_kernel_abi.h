/* The kernel ABI of user kernels: what a kernel that a user submits to a
 * benchmark job (server/user_kernels, `kernelctl submit`) exports so that the
 * server can load it, run it on the job's inputs, gate it against the fp64
 * oracle and time it beside the built-in variants.
 *
 * Plain C so that any compiler and language with a C FFI can implement it. A
 * kernel is a shared object (built by the server from C++ for the cpu
 * backend, CUDA C++ for cuda, or submitted prebuilt) that exports
 *
 *   - `ks_user_abi_version`, an int32_t equal to KS_USER_ABI_VERSION of the
 *     header it was built against (define it with KS_USER_ABI_DEFINE_VERSION()
 *     in exactly one source file); the loader refuses any other value, and
 *   - the entry point of the job's op, one of
 *       ks_user_attention_v1       bf16 MHA forward
 *       ks_user_fp8_attention_v1   FP8 attention (ZYFA numerics)
 *       ks_user_mla_decode_v1      MLA absorbed decode (a16w8), contiguous KV
 *       ks_user_moe_gateup_v1      MXFP4 MoE gate/up
 *       ks_user_moe_down_v1        MXFP4 MoE down
 *       ks_user_moe_layer_v1       the whole MXFP4 MoE layer (gate/up, SwiGLU, down, weighted sum)
 *     each `int fn(const ARGS* args, void* stream)`: 0 on success, anything
 *     else is reported as the kernel's failure (the job fails, naming it).
 *
 * Pointers are device pointers on cuda (`stream` is the cudaStream_t to
 * launch on; the worker synchronises it) and host pointers on cpu (`stream`
 * is NULL; the call is synchronous). On hip a kernel is device code only (a
 * HIP source built into a code object, or a prebuilt code object): see
 * "prebuilt device code" below. Inputs are read-only: on cpu they are
 * mapped read-only, so a write faults. The output is poisoned with NaN
 * before the gate launch and bracketed by guard pages (cpu) or canaries
 * (cuda): a write outside it fails the job. bf16 values are their 16-bit
 * patterns (uint16_t); FP8 values their 8-bit codes. Strides are in
 * elements; the last dimension of every tensor is contiguous.
 *
 * Numerics (tolerances, rounding, masks) are those of DESIGN.md §4: the
 * output is compared with the fp64 oracle by relative RMS error against the
 * op's tolerance, and any NaN or Inf fails the gate.
 *
 * Versioning: a struct's layout never changes within a version. A new field
 * or a new meaning is a new version (ks_..._v2 next to _v1); `struct_size`
 * lets a kernel check that it was handed the struct it was built for.
 */
#ifndef KERNELSERVE_KERNELS_API_USER_KERNEL_ABI_H_
#define KERNELSERVE_KERNELS_API_USER_KERNEL_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KS_USER_ABI_VERSION 1

#if defined(_WIN32)
#define KS_USER_EXPORT __declspec(dllexport)
#else
#define KS_USER_EXPORT __attribute__((visibility("default")))
#endif

/* Rounding of the bf16 output (DESIGN §4): values match kernelserve.v1.Rounding. */
enum { KS_ROUND_RTNE = 1, KS_ROUND_RTNA = 2, KS_ROUND_RTZ = 3 };
/* FP8 formats: values match kernelserve.v1.Fp8Format. */
enum { KS_FP8_E4M3FN = 1, KS_FP8_E4M3FNUZ = 2 };
/* FP8 attention P modes: values match kernelserve.v1.PMode. */
enum { KS_P_EXACT = 1, KS_P_LEAN = 2, KS_P_NAIVE = 3 };

/* ---------------------------------------------------------------- attention
 * O = softmax(scale * Q K^T [+ causal mask]) V per (batch, head); GQA: head h
 * reads KV head h / (heads_q / heads_kv). The causal mask is bottom-right
 * aligned: query i sees keys j <= i + seq_kv - seq_q. Element (b, h, s, d) of
 * q is q[b*q_stride[0] + h*q_stride[1] + s*q_stride[2] + d]; likewise k, v and
 * out (out has q's shape). */
typedef struct {
  uint32_t struct_size; /* sizeof(ks_attention_args_v1) */
  const uint16_t* q;    /* bf16 [B, Hq, Sq, D] by strides */
  const uint16_t* k;    /* bf16 [B, Hkv, Skv, D] */
  const uint16_t* v;    /* bf16 [B, Hkv, Skv, D] */
  uint16_t* out;        /* bf16 [B, Hq, Sq, D] */
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
  int64_t q_stride[3], k_stride[3], v_stride[3], out_stride[3]; /* (b, h, s) */
  float softmax_scale;
  int32_t causal;
  int32_t rounding; /* KS_ROUND_* */
} ks_attention_args_v1;

/* ------------------------------------------------------------ FP8 attention
 * As attention, on FP8 codes with per-tensor fp32 descales (value = decoded
 * code * descale; the server quantized the job's bf16 inputs: descale =
 * amax / fp8_max, code = fp8(x / descale), round to nearest even,
 * saturating). K has head dim d_qk, V and out d_v. The gate's reference is
 * fp64 attention on these quantized inputs with unquantized P, so a kernel
 * may quantize P (p_mode says how the job asked for it) or not. */
typedef struct {
  uint32_t struct_size; /* sizeof(ks_fp8_attention_args_v1) */
  const uint8_t* q;     /* codes [B, Hq, Sq, d_qk] by strides */
  const uint8_t* k;     /* codes [B, Hkv, Skv, d_qk] */
  const uint8_t* v;     /* codes [B, Hkv, Skv, d_v] */
  uint16_t* out;        /* bf16 [B, Hq, Sq, d_v] */
  float q_descale, k_descale, v_descale;
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, d_qk, d_v;
  int64_t q_stride[3], k_stride[3], v_stride[3], out_stride[3]; /* (b, h, s) */
  float softmax_scale;
  int32_t causal;
  int32_t format;   /* KS_FP8_* of q, k and v */
  int32_t p_mode;   /* KS_P_* */
  int32_t rounding; /* KS_ROUND_* */
} ks_fp8_attention_args_v1;

/* ----------------------------------------------------------- MLA decode
 * score(b, t, h, j) = softmax_scale * kv_scale * (q_lat . kv[b, j, :512] +
 * q_pe . kv[b, j, 512:]); draft position t attends rows j <= seq - q_len + t
 * (seq = seq_lens[b], or seq_len without seq_lens); o_lat = softmax(score) .
 * (kv_scale * kv[b, j, :512]). All tensors are contiguous. */
typedef struct {
  uint32_t struct_size;    /* sizeof(ks_mla_decode_args_v1) */
  const uint16_t* q_lat;   /* bf16 [B, q_len, H, 512] */
  const uint16_t* q_pe;    /* bf16 [B, q_len, H, 64] */
  const uint8_t* kv;       /* FP8 codes [B, seq_len, 576] */
  const int32_t* seq_lens; /* [B] (each 1..seq_len), or NULL: all seq_len */
  uint16_t* out;           /* bf16 [B, q_len, H, 512] */
  int64_t batch, q_len, heads, seq_len;
  float softmax_scale;
  float kv_scale;
  int32_t kv_format; /* KS_FP8_* */
  int32_t rounding;  /* KS_ROUND_* */
} ks_mla_decode_args_v1;

/* ----------------------------------------------------------------- MoE
 * MXFP4 weights: E2M1 codes packed two per byte (element 2i in the low
 * nibble of byte i) with one E8M0 scale (2^(e-127)) per 32 consecutive
 * elements along the last dim. Pairs are token-major: row t*top_k + r is
 * token t's r-th routed expert topk_ids[t*top_k + r]. Accumulate in fp32 or
 * wider; the output is rounded once to bf16. */
typedef struct {
  uint32_t struct_size;       /* sizeof(ks_moe_gateup_args_v1) */
  const uint16_t* x;          /* bf16 [T, K] */
  const int32_t* topk_ids;    /* [T, top_k] */
  const float* topk_weights;  /* [T, top_k] (unused by gate/up) */
  const uint8_t* w13;         /* [E, 2I, K/2]: rows 0..I-1 gate, I..2I-1 up */
  const uint8_t* w13_scales;  /* [E, 2I, K/32] */
  uint16_t* out;              /* bf16 [T*top_k, swiglu ? I : 2I] */
  int64_t tokens, top_k, experts, hidden, inter;
  int32_t swiglu; /* out = silu(h_gate) * h_up instead of h */
  int32_t rounding;
} ks_moe_gateup_args_v1;

typedef struct {
  uint32_t struct_size;      /* sizeof(ks_moe_down_args_v1) */
  const uint16_t* a;         /* bf16 [T*top_k, I] */
  const int32_t* topk_ids;   /* [T, top_k] */
  const float* topk_weights; /* [T, top_k] */
  const uint8_t* w2;         /* [E, N, I/2] */
  const uint8_t* w2_scales;  /* [E, N, I/32] */
  uint16_t* out;             /* bf16 [T, N] with weighted_sum, else [T*top_k, N] */
  int64_t tokens, top_k, experts, inter, out_dim;
  int32_t weighted_sum; /* out[t] = sum_r topk_weights[t, r] * a_r . W2[e_r]^T */
  int32_t rounding;
} ks_moe_down_args_v1;

/* The whole layer: out[t] = sum_r topk_weights[t, r] * (a_r . W2[e_r]^T),
 * a_r = bf16(silu(x[t] . W13[e_r]_gate^T) * (x[t] . W13[e_r]_up^T)) with
 * e_r = topk_ids[t, r]: gate/up with the SwiGLU epilogue, the intermediate
 * rounded once to bf16 (RTNE, whatever `rounding` says, as the oracle does),
 * then down with the weighted sum; the output is rounded in `rounding`.
 * `workspace` is scratch of `workspace_bytes` (at least T*top_k*I*2 bytes:
 * room for the bf16 intermediate), in the same memory as the tensors; its
 * contents are undefined on entry and it need not be used. */
typedef struct {
  uint32_t struct_size;       /* sizeof(ks_moe_layer_args_v1) */
  const uint16_t* x;          /* bf16 [T, K] */
  const int32_t* topk_ids;    /* [T, top_k] */
  const float* topk_weights;  /* [T, top_k] */
  const uint8_t* w13;         /* [E, 2I, K/2]: rows 0..I-1 gate, I..2I-1 up */
  const uint8_t* w13_scales;  /* [E, 2I, K/32] */
  const uint8_t* w2;          /* [E, N, I/2] */
  const uint8_t* w2_scales;   /* [E, N, I/32] */
  uint16_t* out;              /* bf16 [T, N] */
  void* workspace;
  int64_t workspace_bytes;
  int64_t tokens, top_k, experts, hidden, inter, out_dim;
  int32_t rounding;
} ks_moe_layer_args_v1;

/* The exported names, for loaders. */
#define KS_USER_ABI_VERSION_SYMBOL "ks_user_abi_version"
#define KS_USER_ATTENTION_V1 "ks_user_attention_v1"
#define KS_USER_FP8_ATTENTION_V1 "ks_user_fp8_attention_v1"
#define KS_USER_MLA_DECODE_V1 "ks_user_mla_decode_v1"
#define KS_USER_MOE_GATEUP_V1 "ks_user_moe_gateup_v1"
#define KS_USER_MOE_DOWN_V1 "ks_user_moe_down_v1"
#define KS_USER_MOE_LAYER_V1 "ks_user_moe_layer_v1"

KS_USER_EXPORT extern const int32_t ks_user_abi_version;
KS_USER_EXPORT int ks_user_attention_v1(const ks_attention_args_v1* args, void* stream);
KS_USER_EXPORT int ks_user_fp8_attention_v1(const ks_fp8_attention_args_v1* args, void* stream);
KS_USER_EXPORT int ks_user_mla_decode_v1(const ks_mla_decode_args_v1* args, void* stream);
KS_USER_EXPORT int ks_user_moe_gateup_v1(const ks_moe_gateup_args_v1* args, void* stream);
KS_USER_EXPORT int ks_user_moe_down_v1(const ks_moe_down_args_v1* args, void* stream);
KS_USER_EXPORT int ks_user_moe_layer_v1(const ks_moe_layer_args_v1* args, void* stream);

/* ------------------------------------ prebuilt device code (cuda, hip)
 * A cubin or PTX submission (UserKernel.cubin / .ptx) holds device code only,
 * so there is no host function to call. It exports, per op,
 *
 *   extern "C" __global__ void ks_user_<op>_v1_kernel(ks_<op>_args_v1 args);
 *
 * (KS_USER_DEVICE_KERNEL(attention)(ks_attention_args_v1 a) { ... } declares
 * it): the same versioned args struct as the shared-object entry point,
 * passed by value as the kernel's one parameter (its layout is the host's:
 * 64-bit device pointers, natural alignment; in PTX one `.param .align 8
 * .b8 NAME[sizeof]`). The name carries the version, so no
 * ks_user_abi_version is needed. The worker launches it with cuLaunchKernel
 * on its stream with the grid, block and dynamic shared memory that the
 * submission gives (UserKernel.launch): a device kernel cannot choose its
 * own grid, and a fixed convention (one block per output row, say) would
 * force one decomposition on every kernel, while the job's shape is known
 * at submit. A cubin must be linked (ET_EXEC: nvcc -cubin, no -rdc) for
 * sm_90 or sm_90a; PTX must declare `.address_size 64` and a target the
 * device can JIT-compile (sm_90a, or any sm_NN up to sm_90).
 *
 * hip takes only this form: a HIP C++ source (the server builds it with
 * clang -x hip --offload-arch=gfx942 --cuda-device-only into a code object)
 * or a prebuilt code object (UserKernel.code_object: a linked AMD GPU ELF,
 * EM_AMDGPU, for the device's gfx architecture, with the kernel's `.kd`
 * descriptor symbol), launched by the worker with hipModuleLaunchKernel on
 * its stream with UserKernel.launch (a block is a workgroup). Include
 * user_kernel_util.h first: it brings <hip/hip_runtime.h> and, when built
 * without ROCm's device libraries (-DKS_HIP_NO_DEVICE_LIBS, as the server
 * does), the work-item id entry points they would provide. */
#define KS_USER_ATTENTION_V1_KERNEL "ks_user_attention_v1_kernel"
#define KS_USER_FP8_ATTENTION_V1_KERNEL "ks_user_fp8_attention_v1_kernel"
#define KS_USER_MLA_DECODE_V1_KERNEL "ks_user_mla_decode_v1_kernel"
#define KS_USER_MOE_GATEUP_V1_KERNEL "ks_user_moe_gateup_v1_kernel"
#define KS_USER_MOE_DOWN_V1_KERNEL "ks_user_moe_down_v1_kernel"
#define KS_USER_MOE_LAYER_V1_KERNEL "ks_user_moe_layer_v1_kernel"
#if defined(__CUDACC__) || defined(__HIP__)
#define KS_USER_DEVICE_KERNEL(op) extern "C" __global__ void ks_user_##op##_v1_kernel
#endif

/* In exactly one source file of the kernel. */
#define KS_USER_ABI_DEFINE_VERSION() const int32_t ks_user_abi_version = KS_USER_ABI_VERSION

typedef int (*ks_attention_fn_v1)(const ks_attention_args_v1*, void*);
typedef int (*ks_fp8_attention_fn_v1)(const ks_fp8_attention_args_v1*, void*);
typedef int (*ks_mla_decode_fn_v1)(const ks_mla_decode_args_v1*, void*);
typedef int (*ks_moe_gateup_fn_v1)(const ks_moe_gateup_args_v1*, void*);
typedef int (*ks_moe_down_fn_v1)(const ks_moe_down_args_v1*, void*);
typedef int (*ks_moe_layer_fn_v1)(const ks_moe_layer_args_v1*, void*);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* KERNELSERVE_KERNELS_API_USER_KERNEL_ABI_H_ */
