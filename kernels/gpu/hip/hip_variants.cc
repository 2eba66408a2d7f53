#include "kernels/gpu/hip/hip_variants.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/api/ops.h"
#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/fp8_attention/fp8_attention_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/mla/mla_gfx942_launch.h"
#include "kernels/gpu/attention/attention_params.h"
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"
#include "kernels/gpu/fp8_attention/fp8_quantize_args.h"
#include "kernels/gpu/fp8_attention/fp8_quantize_plan.h"
#include "kernels/gpu/moe/moe_gemm_args.h"
#include "kernels/gpu/moe/moe_params.h"
#include "kernels/gpu/moe/moe_plan.h"

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

// `args`: a pointer to each of the kernel's arguments, in order, each of the
// kernel's parameter type.
absl::Status Launch(const LaunchContext& ctx, absl::string_view kernel, unsigned gx, unsigned gy, unsigned gz,
                    unsigned threads, void** args) {
  KS_ASSIGN_OR_RETURN(Function fn, ctx.kernel(kernel));
  return ctx.rt->Check(ctx.rt->ModuleLaunchKernel(fn, gx, gy, gz, threads, 1, 1, 0, ctx.stream, args, nullptr),
                       absl::StrCat("hipModuleLaunchKernel ", kernel));
}

absl::Status Launch(const LaunchContext& ctx, absl::string_view kernel, const mla::gfx942::Dims& grid,
                    unsigned threads, const mla::KParams& params) {
  mla::KParams kp = params;
  void* args[] = {&kp};
  return Launch(ctx, kernel, grid.x, grid.y, grid.z, threads, args);
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
  KS_RETURN_IF_ERROR(Launch(ctx, l.kernel, l.grid, mla::gfx942::kThreads, l.params));
  if (l.merge) {
    KS_RETURN_IF_ERROR(Launch(ctx, mla::gfx942::kMergeKernel, l.merge_grid, mla::gfx942::kMergeThreads, l.params));
  }
  return absl::OkStatus();
}

std::string MoeUnsupported(absl::string_view arch, const OpCall& c) {
  if (arch != "gfx942") return absl::StrCat("device is ", arch, " (serves gfx942)");
  return moe::gfx942::Unsupported(c.moe);
}

// One grouped GEMM over the routing's `tile_rows`-row tiles: a down
// projection on 16-row tiles whose K (the expert width) the down kernel
// serves takes it (the whole A tile staged once), every other GEMM the
// slab-walking kernel of its tile and epilogue.
absl::Status MoeGemm(const LaunchContext& ctx, const moe::GemmParams& params, int epilogue, int tile_rows,
                     int64_t max_tiles, bool down) {
  namespace mg = moe::gfx942;
  moe::GemmParams g = params;
  void* args[] = {&g};
  if (down && tile_rows == mg::kTileRows && mg::DownServes(g.k)) {
    const mg::GemmGrid grid = mg::DownGrid(g.out_cols, max_tiles);
    return Launch(ctx, epilogue == moe::kEpiF32 ? mg::kDownF32 : mg::kDownBf16, grid.x, grid.y, 1, mg::kThreads,
                  args);
  }
  const mg::GemmGrid grid = mg::Grid(mg::CtaOf(tile_rows, epilogue == moe::kEpiSwiglu), g.out_cols, max_tiles);
  return Launch(ctx, mg::GemmKernel(tile_rows, epilogue), grid.x, grid.y, 1, mg::kThreads, args);
}

// The routing (moe_routing.cu's kernels, built for gfx942): counts per
// expert, their tiles, then the pairs scattered into the tiles.
absl::Status MoeRouting(const LaunchContext& ctx, const moe::RoutingParams& rp) {
  const Runtime& rt = *ctx.rt;
  KS_RETURN_IF_ERROR(rt.Check(rt.MemsetAsync(rp.counts, 0, 2 * static_cast<size_t>(rp.experts) * 4, ctx.stream),
                              "hipMemsetAsync (routing counts)"));
  KS_RETURN_IF_ERROR(rt.Check(
      rt.MemsetAsync(rp.sorted, 0xFF, static_cast<size_t>(rp.max_tiles) * rp.tile_rows * 4, ctx.stream),
      "hipMemsetAsync (routing tiles)"));
  const unsigned blocks = static_cast<unsigned>(moe::RoutingBlocks(rp.pairs));
  const int32_t* ids = rp.topk_ids;
  int64_t pairs = rp.pairs;
  int experts = rp.experts, bm = rp.tile_rows;
  int *counts = rp.counts, *cursor = rp.cursor, *tile_start = rp.tile_start, *tile_expert = rp.tile_expert,
      *tile_rows = rp.tile_row_count, *num_tiles = rp.num_tiles, *sorted = rp.sorted;
  void* count_args[] = {&ids, &pairs, &counts};
  KS_RETURN_IF_ERROR(Launch(ctx, "MoeCountKernel", blocks, 1, 1, 256, count_args));
  void* scan_args[] = {&counts, &experts, &bm, &tile_start, &tile_expert, &tile_rows, &num_tiles};
  KS_RETURN_IF_ERROR(Launch(ctx, "MoeScanKernel", 1, 1, 1, moe::kScanThreads, scan_args));
  void* scatter_args[] = {&ids, &pairs, &tile_start, &cursor, &bm, &sorted};
  return Launch(ctx, "MoeScatterKernel", blocks, 1, 1, 256, scatter_args);
}

absl::Status RunMoe(const LaunchContext& ctx, const OpCall& c, TensorView& out) {
  const MoeParams& p = c.moe;
  const moe::MoePlan plan = moe::gfx942::Plan(p);
  const int bm = plan.TileRows();
  const moe::MoeWorkspace w = moe::MoeWorkspaceLayout(p, plan);
  KS_ASSIGN_OR_RETURN(void* ws_ptr, ctx.workspace(w.bytes));
  uint8_t* ws = static_cast<uint8_t*>(ws_ptr);
  const moe::RoutingParams rp = moe::MakeRoutingParams(p, c.moe_in, plan, w, ws);
  KS_RETURN_IF_ERROR(MoeRouting(ctx, rp));
  uint16_t* h = reinterpret_cast<uint16_t*>(ws + w.h);
  float* y = reinterpret_cast<float*>(ws + w.y);
  const uint16_t* x = c.moe_in.x.as<const uint16_t>();
  switch (p.stage) {
    case MoeStage::kGateUp:
      return MoeGemm(ctx, moe::GateUpGemm(p, c.moe_in, rp, p.swiglu, static_cast<int>(p.rounding), out.data),
                     p.swiglu ? moe::kEpiSwiglu : moe::kEpiBf16, bm, rp.max_tiles, false);
    case MoeStage::kDown:
      if (!p.weighted_sum) {
        return MoeGemm(ctx, moe::DownGemm(p, c.moe_in, rp, x, out.data), moe::kEpiBf16, bm, rp.max_tiles, true);
      }
      KS_RETURN_IF_ERROR(MoeGemm(ctx, moe::DownGemm(p, c.moe_in, rp, x, y), moe::kEpiF32, bm, rp.max_tiles, true));
      break;
    case MoeStage::kLayer:
      // The stored intermediate is RTNE bf16, as the oracle's.
      KS_RETURN_IF_ERROR(MoeGemm(ctx, moe::GateUpGemm(p, c.moe_in, rp, true, static_cast<int>(Rounding::kRtne), h),
                                 moe::kEpiSwiglu, bm, rp.max_tiles, false));
      KS_RETURN_IF_ERROR(MoeGemm(ctx, moe::DownGemm(p, c.moe_in, rp, h, y), moe::kEpiF32, bm, rp.max_tiles, true));
      break;
  }
  moe::WeightedSumParams sp = moe::MakeWeightedSum(p, c.moe_in, y, out.data);
  void* sum_args[] = {&sp.y, &sp.weights, &sp.top_k, &sp.n, &sp.out, &sp.rounding};
  return Launch(ctx, "MoeWeightedSumKernel", static_cast<unsigned>(sp.tokens), 1, 1, 256, sum_args);
}

std::string AttentionUnsupported(absl::string_view arch, const OpCall& c) {
  if (arch != "gfx942") return absl::StrCat("device is ", arch, " (serves gfx942)");
  return attention::gfx942::Unsupported(c.attention);
}

// V^T into the workspace, the forward (whole items, then the dense tail's
// chunks), and the tail's merge when the plan splits it: the head dim's
// instantiations.
absl::Status RunAttention(const LaunchContext& ctx, const OpCall& c, TensorView& out) {
  namespace ag = attention::gfx942;
  KS_ASSIGN_OR_RETURN(attention::FlashFwdParams fp, attention::MakeFlashFwdParams(c.attention, c.q, c.k, c.v, out));
  if (!attention::HasWork(fp)) return absl::OkStatus();
  ag::AttentionLaunch l = ag::PlanAttention(fp, static_cast<int>(c.attention.head_dim), c.attention.causal,
                                            ctx.compute_units > 0 ? ctx.compute_units : 1);
  KS_ASSIGN_OR_RETURN(void* ws, ctx.workspace(l.workspace.bytes));
  ag::SetWorkspace(l, ws);
  ag::Gfx942AttnParams params = l.params;
  void* args[] = {&params};
  KS_RETURN_IF_ERROR(Launch(ctx, l.v_transpose, l.vt_grid.x, l.vt_grid.y, l.vt_grid.z, ag::kAuxThreads, args));
  KS_RETURN_IF_ERROR(Launch(ctx, l.kernel, l.fwd_grid.x, 1, 1, ag::kThreads, args));
  if (!l.tail.on) return absl::OkStatus();
  return Launch(ctx, l.merge, l.merge_grid.x, 1, 1, ag::kAuxThreads, args);
}

std::string Fp8AttentionUnsupported(absl::string_view arch, const OpCall& c) {
  if (arch != "gfx942") return absl::StrCat("device is ", arch, " (serves gfx942)");
  const std::string no = fp8_attention::gfx942::Unsupported(c.fp8);
  return no;
}

// bf16 inputs to e4m3fnuz codes and expanded descales (fp8_quantize.cu's
// kernels, built for gfx942), in the plan's workspace.
absl::Status QuantizeFp8Inputs(const LaunchContext& ctx, const fp8_attention::QuantizePlan& plan) {
  KS_RETURN_IF_ERROR(
      ctx.rt->Check(ctx.rt->MemsetAsync(plan.amax, 0, plan.amax_bytes, ctx.stream), "hipMemsetAsync (fp8 amax)"));
  for (const fp8_attention::QuantizeArgs& op : plan.ops) {
    fp8_attention::QuantizeArgs a = op;
    void* args[] = {&a};
    const fp8_attention::QuantizeGrids g = fp8_attention::QuantizeGridsOf(a);
    constexpr unsigned kThreads = fp8_attention::kQuantizeThreads;
    KS_RETURN_IF_ERROR(Launch(ctx, "AmaxKernel", static_cast<unsigned>(g.amax), 1, 1, kThreads, args));
    KS_RETURN_IF_ERROR(Launch(ctx, "QuantizeKernel", static_cast<unsigned>(g.quantize), 1, 1, kThreads, args));
    KS_RETURN_IF_ERROR(Launch(ctx, "DescaleKernel", static_cast<unsigned>(g.descale), 1, 1, kThreads, args));
  }
  return absl::OkStatus();
}

absl::Status RunFp8Attention(const LaunchContext& ctx, const OpCall& c, TensorView& out) {
  const Fp8AttentionParams& p = c.fp8;
  const bool work = p.batch > 0 && p.heads_q > 0 && p.seq_q > 0;
  fp8_attention::QuantizePlan plan;
  if (!p.fp8_inputs && work) {
    KS_ASSIGN_OR_RETURN(void* ws, ctx.workspace(fp8_attention::QuantizeWorkspaceBytes(p)));
    plan = fp8_attention::PlanQuantize(p, c.fp8_in, Fp8QuantizedOut{}, static_cast<uint8_t*>(ws));
  }
  KS_ASSIGN_OR_RETURN(fp8_attention::Fp8KernelParams kp,
                      fp8_attention::gfx942::MakeParams(p, c.fp8_in, p.fp8_inputs ? nullptr : &plan, out));
  if (!work) return absl::OkStatus();
  if (!p.fp8_inputs) KS_RETURN_IF_ERROR(QuantizeFp8Inputs(ctx, plan));
  const fp8_attention::gfx942::Grid g = fp8_attention::gfx942::GridOf(p);
  void* args[] = {&kp};
  return Launch(ctx, fp8_attention::gfx942::KernelName(p), g.x, g.y, g.z, fp8_attention::gfx942::kThreads, args);
}

}  // namespace

const std::vector<Variant>& Variants() {
  static const auto* table = new std::vector<Variant>{
      {BenchOp::kAttention, "mfma_bf16",
       "bf16 MHA forward on v_mfma_f32_16x16x16bf16_1k: eight waves of 16-row query tiles (d64 and d128: three, two "
       "in registers and one staged in LDS; d256: two in registers), K double-buffered in LDS, V pre-transposed; the "
       "dense-tail KV split (cost model) merged in fp32",
       "gfx942, head_dim 64, 128 or 256, BSHD or BHSD, causal or not, GQA, any seq_q and seq_kv, RTNE/RTNA/RTZ",
       AttentionUnsupported, RunAttention},
      {BenchOp::kFp8Attention, "mfma_fp8",
       "FP8 attention with ZYFA's numerics on v_mfma_f32_16x16x32_fp8_fp8: per-64-key power-of-two P blocks "
       "(headroom 7), exact, lean (codes by a multiply-add, no exponential) or naive P, rounded-P row sums; "
       "four waves of 16 query rows, S computed transposed so P stays in registers",
       "gfx942, e4m3fnuz: FP8 inputs with per-tensor or per-head descales, or bf16 inputs quantized on the device "
       "(optional Hadamard of Q and K); (d_qk, d_v) = (128, 128) or (192, 128), causal or not, GQA, BSHD or BHSD, "
       "RTNE/RTNA/RTZ",
       Fp8AttentionUnsupported, RunFp8Attention},
      {BenchOp::kMlaDecode, "mfma_a16w8",
       "bf16 Q against fp8 KV on v_mfma_f32_16x16x16bf16_1k; one fused 576-wide row is K and V; two CTAs chosen "
       "at plan time: a 64-row window (q_len 4..8, 16-token tiles) and a 16-row position CTA (64-token tiles, four "
       "producer and four consumer waves); split-KV fixed at plan time, merged in fp32 in split order",
       "gfx942, e4m3fnuz KV, q_len 1..8, contiguous or paged, ragged q_lens", MlaA16w8Unsupported, RunMlaA16w8},
      {BenchOp::kMoeGateUp, "mfma_mxfp4",
       "bf16 activations against E2M1 x E8M0 weights, v_mfma_f32_16x16x16bf16_1k over expert tiles of 16 pairs "
       "(decode) or 64 (at 64+ rows per expert); gate/up (and down at other I or tiles) walks K in 64-k slabs "
       "staged in LDS (double-buffered), the weights decoded from LDS, fused SwiGLU; down on 16-pair tiles at I a "
       "multiple of 128 up to 768 stages the tile's whole A in LDS once and sweeps 256 columns against it; down "
       "into fp32 and a weighted per-token sum",
       "gfx942, every MoE stage (gate/up, down, layer), K and I multiples of 32", MoeUnsupported, RunMoe},
  };
  return *table;
}

bool InTable(const Variant& v, BenchOp op) { return v.op == op || (IsMoeOp(v.op) && IsMoeOp(op)); }

absl::StatusOr<const Variant*> Select(absl::string_view arch, const OpCall& call) {
  std::string why;
  for (const Variant& v : Variants()) {
    if (!InTable(v, call.op)) continue;
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
