#include "kernels/gpu/hip/hip_variants.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/api/ops.h"
#include "kernels/gpu/arch/gfx942/mla/mla_gfx942_launch.h"

namespace kernelserve {
namespace gpu {
namespace hip {
namespace {

std::string MlaA16w8Unsupported(absl::string_view arch, const OpCall& c) {
  if (arch != "gfx942") return absl::StrCat("device is ", arch, " (serves gfx942)");
  if (c.mla.kv_dtype != DType::kFp8E4M3Fnuz) {
    return absl::StrCat("KV ", DTypeName(c.mla.kv_dtype), " (serves ", DTypeName(DType::kFp8E4M3Fnuz), ")");
  }
  return "";
}

absl::Status Launch(const LaunchContext& ctx, absl::string_view kernel, const mla::gfx942::Dims& grid,
                    unsigned threads, const mla::KParams& params) {
  KS_ASSIGN_OR_RETURN(Function fn, ctx.kernel(kernel));
  mla::KParams kp = params;
  void* args[] = {&kp};
  return ctx.rt->Check(ctx.rt->ModuleLaunchKernel(fn, grid.x, grid.y, grid.z, threads, 1, 1, 0, ctx.stream, args,
                                                  nullptr),
                       absl::StrCat("hipModuleLaunchKernel ", kernel));
}

absl::Status RunMlaA16w8(const LaunchContext& ctx, const OpCall& c, TensorView& out) {
  const MlaDecodeParams& p = c.mla;
  if (out.desc.dtype != DType::kBf16 || out.desc.num_elements() != p.batch * p.q_len * p.heads * kMlaLatentDim) {
    return absl::InvalidArgumentError(absl::StrCat("mla_decode: out must be bf16[", p.batch, ",", p.q_len, ",",
                                                   p.heads, ",512], got ", out.desc.DebugString()));
  }
  mla::gfx942::DecodeLaunch l = mla::gfx942::PlanDecode(p, c.mla_in, out.data, ctx.compute_units);
  if (l.merge) {
    KS_ASSIGN_OR_RETURN(void* ws, ctx.workspace(l.workspace_bytes));
    mla::gfx942::SetWorkspace(l, ws);
  }
  KS_RETURN_IF_ERROR(Launch(ctx, mla::gfx942::kDecodeKernel, l.grid, mla::gfx942::kThreads, l.params));
  if (l.merge) {
    KS_RETURN_IF_ERROR(Launch(ctx, mla::gfx942::kMergeKernel, l.merge_grid, mla::gfx942::kMergeThreads, l.params));
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<Variant>& Variants() {
  static const auto* table = new std::vector<Variant>{
      {BenchOp::kMlaDecode, "mfma_a16w8",
       "bf16 Q against fp8 KV on v_mfma_f32_16x16x16bf16_1k; one fused 576-wide row is K and V; split-KV "
       "fixed at plan time, merged in fp32 in split order",
       "gfx942, e4m3fnuz KV, q_len 1..8, contiguous or paged, ragged q_lens", MlaA16w8Unsupported, RunMlaA16w8},
  };
  return *table;
}

absl::StatusOr<const Variant*> Select(absl::string_view arch, const OpCall& call) {
  std::string why;
  for (const Variant& v : Variants()) {
    if (v.op != call.op) continue;
    const std::string no = v.unsupported(arch, call);
    if (no.empty()) return &v;
    absl::StrAppend(&why, why.empty() ? "" : "; ", v.name, ": ", no);
  }
  return absl::UnimplementedError(absl::StrCat("hip backend has no ", arch, " kernel for ", BenchOpName(call.op),
                                               why.empty() ? " (none is written yet)" : absl::StrCat(" (", why, ")")));
}

}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
