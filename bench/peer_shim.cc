// libks_peer_shim.so: our attention kernels behind a C ABI, for bench/peers.py
// (--ours) to load with ctypes. The GPU's power cap lowers its clocks by how
// long it has been busy, so our bench binaries and torch's kernels timed in
// separate processes, one after the other, compare different clocks; loaded
// into the peers' process, ours run on the same tensors, stream and CUDA-event
// timer as cuDNN's and FlashAttention's, interleaved with them.
//
// Every pointer is device memory in BHSD layout; every call is asynchronous
// on `stream` (a cudaStream_t; torch's current stream) and returns 0, or
// nonzero with the absl::Status text in err (at most err_len bytes with the
// terminating NUL). Each call runs the entry of the op's variant table that
// the dispatcher picks (gpu::SelectVariant, as the CUDA backend's Dispatch),
// with default params but for those named.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "kernels/api/op_call.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/attention/attention_variants.h"
#include "kernels/gpu/common/gpu_status.h"
#include "kernels/gpu/common/kernel_variant.h"
#include "kernels/gpu/fp8_attention/fp8_attention_variants.h"

namespace kernelserve {
namespace {

int Report(const absl::Status& s, char* err, int err_len) {
  if (s.ok()) return 0;
  if (err != nullptr && err_len > 0) {
    const std::string text = s.ToString();
    const size_t n = std::min(text.size(), static_cast<size_t>(err_len - 1));
    std::memcpy(err, text.data(), n);
    err[n] = '\0';
  }
  return 1;
}

// The current device's caps (torch's device), queried once per device.
absl::StatusOr<gpu::DeviceCaps> CurrentCaps() {
  int device = 0;
  KS_RETURN_IF_ERROR(gpu::GpuStatus(cudaGetDevice(&device), "cudaGetDevice"));
  static std::mutex mu;
  static auto* caps = new std::map<int, gpu::DeviceCaps>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = caps->find(device);
  if (it == caps->end()) {
    KS_ASSIGN_OR_RETURN(const gpu::DeviceCaps c, gpu::QueryDeviceCaps(device));
    it = caps->emplace(device, c).first;
  }
  return it->second;
}

// The entry the dispatcher picks for `call` on the current device.
absl::StatusOr<const gpu::KernelVariant*> Select(const gpu::VariantTable& table, const OpCall& call) {
  KS_ASSIGN_OR_RETURN(const gpu::DeviceCaps caps, CurrentCaps());
  return gpu::SelectVariant(table, BenchOpName(call.op), caps, call);
}

// Runs that entry (the backend's RunSelected); then any launch error, as the
// backend's AfterLaunch.
absl::Status RunDispatched(const gpu::VariantTable& table, const OpCall& call, TensorView& out, void* stream) {
  KS_ASSIGN_OR_RETURN(const gpu::DeviceCaps caps, CurrentCaps());
  KS_RETURN_IF_ERROR(
      gpu::RunSelected(table, BenchOpName(call.op), caps, call, out, static_cast<cudaStream_t>(stream)));
  return gpu::GpuStatus(cudaGetLastError(), "kernel launch");
}

absl::StatusOr<OpCall> AttentionCall(const void* q, const void* k, const void* v, int64_t b, int64_t h, int64_t s,
                                     int64_t d, bool causal) {
  AttentionParams p;
  p.layout = Layout::kBhsd;
  p.causal = causal;
  const TensorDesc desc{DType::kBf16, {b, h, s, d}};
  KS_RETURN_IF_ERROR(p.Validate(desc, desc, desc));
  return MakeOpCall(p, TensorView{desc, const_cast<void*>(q)}, TensorView{desc, const_cast<void*>(k)},
                    TensorView{desc, const_cast<void*>(v)});
}

// Per-tensor descales (q, k, v) in device memory: one buffer per distinct
// triple, allocated and filled on `stream` by the first call that passes it
// and kept for the process, so that a timed launch neither allocates nor
// waits on the host.
absl::StatusOr<float*> Descales(float q, float k, float v, cudaStream_t stream) {
  static std::mutex mu;
  static auto* cache = new std::map<std::array<float, 3>, float*>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find({q, k, v});
  if (it != cache->end()) return it->second;
  float* dev = nullptr;
  KS_RETURN_IF_ERROR(
      gpu::GpuStatus(cudaMalloc(reinterpret_cast<void**>(&dev), 3 * sizeof(float)), "cudaMalloc (descales)"));
  it = cache->emplace(std::array<float, 3>{q, k, v}, dev).first;
  // The source is the map's key: it outlives the asynchronous copy.
  const absl::Status filled =
      gpu::GpuStatus(cudaMemcpyAsync(dev, it->first.data(), 3 * sizeof(float), cudaMemcpyHostToDevice, stream),
                     "cudaMemcpyAsync (descales)");
  if (!filled.ok()) {
    cache->erase(it);
    cudaFree(dev);
    return filled;
  }
  return dev;
}

absl::Status AttentionBf16(const void* q, const void* k, const void* v, void* out, int64_t b, int64_t h, int64_t s,
                           int64_t d, bool causal, void* stream) {
  KS_ASSIGN_OR_RETURN(const OpCall call, AttentionCall(q, k, v, b, h, s, d, causal));
  TensorView o{call.attention.OutputDesc(), out};
  return RunDispatched(gpu::AttentionVariants(), call, o, stream);
}

absl::Status Fp8AttentionLean(const void* q, const void* k, const void* v, void* out, float q_descale, float k_descale,
                              float v_descale, int64_t b, int64_t h, int64_t s, int64_t d_qk, int64_t d_v, bool causal,
                              void* stream) {
  Fp8AttentionParams p;
  p.layout = Layout::kBhsd;
  p.causal = causal;
  p.format = Fp8Format::kE4M3Fn;
  p.p_mode = PMode::kLean;
  const DType fp8 = Fp8FormatDType(p.format);
  const TensorDesc qk_desc{fp8, {b, h, s, d_qk}}, v_desc{fp8, {b, h, s, d_v}}, one{DType::kFp32, {1}};
  KS_RETURN_IF_ERROR(p.Validate(qk_desc, qk_desc, v_desc, &one, &one, &one));
  KS_ASSIGN_OR_RETURN(float* ds, Descales(q_descale, k_descale, v_descale, static_cast<cudaStream_t>(stream)));
  Fp8AttentionInputs in;
  in.q = TensorView{qk_desc, const_cast<void*>(q)};
  in.k = TensorView{qk_desc, const_cast<void*>(k)};
  in.v = TensorView{v_desc, const_cast<void*>(v)};
  in.q_descale = TensorView{one, ds};
  in.k_descale = TensorView{one, ds + 1};
  in.v_descale = TensorView{one, ds + 2};
  TensorView o{p.OutputDesc(), out};
  return RunDispatched(gpu::Fp8AttentionVariants(), MakeOpCall(p, in), o, stream);
}

}  // namespace
}  // namespace kernelserve

// bf16 MHA forward, q, k, v and out [b, h, s, d] (AttentionParams' defaults:
// scale 1/sqrt(d), RTNE; causal bottom-right aligned).
extern "C" int ks_attention_bf16(const void* q, const void* k, const void* v, void* out, int64_t b, int64_t h,
                                 int64_t s, int64_t d, int causal, void* stream, char* err, int err_len) {
  return kernelserve::Report(kernelserve::AttentionBf16(q, k, v, out, b, h, s, d, causal != 0, stream), err, err_len);
}

// The name of the entry ks_attention_bf16 runs at head dim d on the current
// device (the table's predicates read the device and the head dim), or
// nullptr when none serves it.
extern "C" const char* ks_attention_bf16_kernel(int64_t d) {
  namespace ks = kernelserve;
  const absl::StatusOr<ks::OpCall> call = ks::AttentionCall(nullptr, nullptr, nullptr, 1, 1, 1, d, false);
  if (!call.ok()) return nullptr;
  const absl::StatusOr<const ks::gpu::KernelVariant*> v = ks::Select(ks::gpu::AttentionVariants(), *call);
  return v.ok() ? (*v)->name : nullptr;
}

// FP8 attention (ZYFA numerics) on e4m3fn codes with per-tensor descales
// (value = code * descale) and lean P, out bf16 [b, h, s, d_v]: what
// bench/fp8_attention_cuda_bench times in its "fp8 in" column.
extern "C" int ks_fp8_attention_lean(const void* q, const void* k, const void* v, void* out, float q_descale,
                                     float k_descale, float v_descale, int64_t b, int64_t h, int64_t s, int64_t d_qk,
                                     int64_t d_v, int causal, void* stream, char* err, int err_len) {
  return kernelserve::Report(kernelserve::Fp8AttentionLean(q, k, v, out, q_descale, k_descale, v_descale, b, h, s, d_qk,
                                                           d_v, causal != 0, stream),
                             err, err_len);
}
