#include "kernels/gpu/mla/mla_decode.h"

#include "absl/strings/str_cat.h"
#include "kernels/gpu/common/gpu_status.h"
#include "kernels/gpu/mla/mla_decode_launch.h"

namespace kernelserve {
namespace gpu {

// v8 (KV converted in registers into the wgmma A operand): 1.4-1.6x v7 on
// the H200, every GPU test passed (bench/RESULTS.md, 2026-12-02). e4m3fnuz
// KV runs v7 (the launcher's fallback).
const MlaKernel kDefaultMlaKernel = MlaKernel::kWgmmaRegA;

absl::Status RunMlaDecode(const MlaDecodeParams& p, const MlaDecodeInputs& in, TensorView& out,
                          cudaStream_t stream) {
  return RunMlaDecodeWith(kDefaultMlaKernel, p, in, out, stream);
}

absl::Status RunMlaDecodeWith(MlaKernel kernel, const MlaDecodeParams& p, const MlaDecodeInputs& in,
                              TensorView& out, cudaStream_t stream) {
  if (out.desc.dtype != DType::kBf16 || out.desc.num_elements() != p.batch * p.q_len * p.heads * kMlaLatentDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("mla_decode: out must be bf16[", p.batch, ",", p.q_len, ",", p.heads, ",512], got ",
                     out.desc.DebugString()));
  }
  cuda_mla::MlaDecodeArgs a;
  a.q_lat = in.q_lat.data;
  a.q_pe = in.q_pe.data;
  a.kv = in.kv.data;
  a.out = out.data;
  a.seq_lens = in.seq_lens.as<const int32_t>();
  a.kv_indices = in.kv_indices.as<const int32_t>();
  a.kv_indptr = in.kv_indptr.as<const int32_t>();
  a.q_lens = p.has_q_lens ? in.q_lens.as<const int32_t>() : nullptr;
  if (!p.has_seq_lens) a.seq_lens = nullptr;
  a.batch = static_cast<int>(p.batch);
  a.q_len = static_cast<int>(p.q_len);
  a.heads = static_cast<int>(p.heads);
  a.paged = p.paged;
  a.kv_seq = p.paged ? 0 : in.kv.desc.shape[1];
  a.max_seq = p.max_seq;
  a.page_size = static_cast<int>(p.page_size);
  a.fnuz = p.kv_dtype == DType::kFp8E4M3Fnuz;
  a.scale = p.scale;
  a.kv_scale = p.kv_scale;
  a.rounding = static_cast<int>(p.rounding);
  a.num_splits = static_cast<int>(p.num_splits);
  switch (kernel) {
    case MlaKernel::kWgmma:
      a.variant = cuda_mla::MlaVariant::kWgmma;
      break;
    case MlaKernel::kWgmmaPv:
      a.variant = cuda_mla::MlaVariant::kWgmmaPv;
      break;
    case MlaKernel::kWgmmaPvSw:
      a.variant = cuda_mla::MlaVariant::kWgmmaPvSw;
      break;
    case MlaKernel::kWgmmaPipe:
      a.variant = cuda_mla::MlaVariant::kWgmmaPipe;
      break;
    case MlaKernel::kWgmmaRoles:
      a.variant = cuda_mla::MlaVariant::kWgmmaRoles;
      break;
    case MlaKernel::kMmaSync:
      a.variant = cuda_mla::MlaVariant::kMmaSync;
      break;
    case MlaKernel::kWgmmaRegA:
      a.variant = cuda_mla::MlaVariant::kWgmmaRegA;
      break;
  }
  return GpuStatus(cuda_mla::LaunchMlaDecode(a, stream), "mla_decode launch");
}

}  // namespace gpu
}  // namespace kernelserve
