#include "kernels/gpu/moe/moe.h"

#include "absl/strings/str_cat.h"
#include "kernels/gpu/common/gpu_status.h"
#include "kernels/gpu/moe/moe_launch.h"

namespace kernelserve {
namespace gpu {

namespace {

// The launcher's arguments from validated params and device views.
cuda_moe::MoeArgs MakeArgs(const MoeParams& p, const MoeInputs& in) {
  cuda_moe::MoeArgs a;
  a.stage = static_cast<cuda_moe::Stage>(static_cast<int>(p.stage));
  a.swiglu = p.swiglu;
  a.weighted = p.weighted_sum;
  a.rounding = static_cast<int>(p.rounding);
  a.tokens = p.tokens;
  a.top_k = p.top_k;
  a.experts = p.experts;
  a.hidden = p.hidden;
  a.inter = p.inter;
  a.out_dim = p.out_dim;
  a.x = in.x.data;
  a.topk_ids = in.topk_ids.as<const int32_t>();
  a.topk_weights = in.topk_weights.as<const float>();
  a.w13 = in.w13.as<const uint8_t>();
  a.w13_scales = in.w13_scales.as<const uint8_t>();
  a.w2 = in.w2.as<const uint8_t>();
  a.w2_scales = in.w2_scales.as<const uint8_t>();
  return a;
}

}  // namespace

MoeGemm AutoMoeGemm(const MoeParams& p) {
  return static_cast<MoeGemm>(static_cast<int>(cuda_moe::AutoGemm(MakeArgs(p, MoeInputs{}))));
}

absl::Status RunMoe(const MoeParams& p, const MoeInputs& in, TensorView& out, cudaStream_t stream) {
  return RunMoeWithTile(0, p, in, out, stream);
}

absl::Status RunMoeWithTile(int tile_rows, const MoeParams& p, const MoeInputs& in, TensorView& out,
                            cudaStream_t stream) {
  return RunMoeWithGemm(MoeGemm::kAuto, tile_rows, p, in, out, stream);
}

absl::Status RunMoeWithGemm(MoeGemm gemm, int tile_rows, const MoeParams& p, const MoeInputs& in,
                            TensorView& out, cudaStream_t stream) {
  const TensorDesc want = p.OutputDesc();
  if (out.desc.dtype != want.dtype || out.desc.shape != want.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe: out must be ", want.DebugString(), ", got ", out.desc.DebugString()));
  }
  if (tile_rows != 0 && tile_rows != 16 && tile_rows != 64 && tile_rows != 128) {
    return absl::InvalidArgumentError(absl::StrCat("moe: tile rows must be 0, 16, 64 or 128, got ", tile_rows));
  }
  cuda_moe::MoeArgs a = MakeArgs(p, in);
  a.out = out.data;
  a.tile = static_cast<cuda_moe::Tile>(tile_rows);
  a.gemm = static_cast<cuda_moe::Gemm>(static_cast<int>(gemm));
  if (const char* why = cuda_moe::MoeUnsupported(a)) return absl::UnimplementedError(why);
  if (p.tokens == 0) return absl::OkStatus();
  return GpuStatus(cuda_moe::LaunchMoe(a, stream), "moe launch");
}

}  // namespace gpu
}  // namespace kernelserve
