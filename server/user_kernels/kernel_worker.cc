// The kernel worker: runs one user kernel (kernels/api/user_kernel_abi.h) in
// a process of its own, for one job run (kernel_worker on cpu with
// host_memory.cc, kernel_worker_cuda with cuda_memory.cc, kernel_worker_hip
// with hip_memory.cc). The server
// (worker_client.h) starts it with the built shared object, hands it the
// job's spec and a secret seed over the protocol of worker_protocol.h, and
// reads back the output of the gate launch and the timings. A fault, an
// abort or a hang here ends this process only.
// Where the tensors live and how a write outside the output is caught is
// the memory's (worker_memory.h).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/api/user_kernel_abi.h"
#include "kernels/numerics/numerics.h"
#include "server/bench/bench_inputs.h"
#include "server/user_kernels/builder.h"
#include "server/user_kernels/worker_memory.h"
#include "server/user_kernels/worker_protocol.h"

namespace kernelserve {
namespace user_kernels {
namespace {

namespace pb = ::kernelserve::v1;

// ------------------------------------------------------- the ABI call

struct Launcher {
  std::function<int()> launch;
  std::string what;
  std::function<std::string(int)> describe;  // a non-zero launch result; null: the kernel's own return code
};

// How the args reach the kernel: the shared object's entry point, called on
// the host with the stream, or a cubin's / PTX's device kernel launched with
// the args by value.
struct Entry {
  void* so_fn = nullptr;
  DeviceLaunch device;
};

template <typename Fn, typename Args>
Launcher MakeLauncher(const Entry& e, Args* a, void* stream, const char* what) {
  if (e.device.launch) return Launcher{[l = e.device.launch, a] { return l(a); }, what, e.device.describe};
  auto f = reinterpret_cast<Fn>(e.so_fn);
  return Launcher{[f, a, stream] { return f(a, stream); }, what, nullptr};
}

void Strides(Layout layout, int64_t heads, int64_t seq, int64_t d, int64_t s[3]) {
  if (layout == Layout::kBhsd) {
    s[0] = heads * seq * d, s[1] = seq * d, s[2] = d;
  } else {
    s[0] = seq * heads * d, s[1] = d, s[2] = heads * d;
  }
}

using Inputs = std::map<std::string, const void*>;

template <typename T>
const T* In(const Inputs& in, const std::string& name) {
  auto it = in.find(name);
  return it == in.end() ? nullptr : static_cast<const T*>(it->second);
}

// The FP8 attention inputs, quantized per tensor as the oracle quantizes
// the job's bf16 inputs.
absl::Status QuantizeFp8Inputs(WorkerMemory& mem, const bench::HostTensors& t, Fp8Format format, Inputs* in,
                               float descale[3]) {
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const HostTensor& x = t.at(names[i]);
    std::vector<float> f(static_cast<size_t>(x.num_elements()));
    numerics::Bf16ToFloat(x.data<uint16_t>(), f.data(), x.num_elements());
    std::vector<uint8_t> codes(f.size());
    descale[i] = numerics::QuantizeFp8(f.data(), x.num_elements(), Fp8FormatDType(format), codes.data());
    KS_ASSIGN_OR_RETURN((*in)[names[i]], mem.Input(names[i], codes.data(), codes.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Launcher> BindAttention(WorkerMemory& mem, const Entry& e, const OpCall& c, const Inputs& in, uint16_t* out) {
  auto* a = new ks_attention_args_v1{};
  const AttentionParams& p = c.attention;
  a->struct_size = sizeof(*a);
  a->q = In<uint16_t>(in, "q"), a->k = In<uint16_t>(in, "k"), a->v = In<uint16_t>(in, "v"), a->out = out;
  a->batch = p.batch, a->heads_q = p.heads_q, a->heads_kv = p.heads_kv;
  a->seq_q = p.seq_q, a->seq_kv = p.seq_kv, a->head_dim = p.head_dim;
  Strides(p.layout, p.heads_q, p.seq_q, p.head_dim, a->q_stride);
  Strides(p.layout, p.heads_kv, p.seq_kv, p.head_dim, a->k_stride);
  Strides(p.layout, p.heads_kv, p.seq_kv, p.head_dim, a->v_stride);
  Strides(p.layout, p.heads_q, p.seq_q, p.head_dim, a->out_stride);
  a->softmax_scale = static_cast<float>(p.scale), a->causal = p.causal, a->rounding = static_cast<int32_t>(p.rounding);
  return MakeLauncher<ks_attention_fn_v1>(e, a, mem.stream(), "attention");
}

absl::StatusOr<Launcher> BindFp8Attention(WorkerMemory& mem, const Entry& e, const OpCall& c, const bench::HostTensors& t, Inputs* in,
                                          uint16_t* out) {
  const Fp8AttentionParams& p = c.fp8;
  float descale[3];
  KS_RETURN_IF_ERROR(QuantizeFp8Inputs(mem, t, p.format, in, descale));
  auto* a = new ks_fp8_attention_args_v1{};
  a->struct_size = sizeof(*a);
  a->q = In<uint8_t>(*in, "q"), a->k = In<uint8_t>(*in, "k"), a->v = In<uint8_t>(*in, "v"), a->out = out;
  a->q_descale = descale[0], a->k_descale = descale[1], a->v_descale = descale[2];
  a->batch = p.batch, a->heads_q = p.heads_q, a->heads_kv = p.heads_kv;
  a->seq_q = p.seq_q, a->seq_kv = p.seq_kv, a->d_qk = p.d_qk, a->d_v = p.d_v;
  Strides(p.layout, p.heads_q, p.seq_q, p.d_qk, a->q_stride);
  Strides(p.layout, p.heads_kv, p.seq_kv, p.d_qk, a->k_stride);
  Strides(p.layout, p.heads_kv, p.seq_kv, p.d_v, a->v_stride);
  Strides(p.layout, p.heads_q, p.seq_q, p.d_v, a->out_stride);
  a->softmax_scale = static_cast<float>(p.scale), a->causal = p.causal;
  a->format = static_cast<int32_t>(p.format), a->p_mode = static_cast<int32_t>(p.p_mode);
  a->rounding = static_cast<int32_t>(p.rounding);
  return MakeLauncher<ks_fp8_attention_fn_v1>(e, a, mem.stream(), "fp8_attention");
}

absl::StatusOr<Launcher> BindMla(WorkerMemory& mem, const Entry& e, const OpCall& c, const Inputs& in, uint16_t* out) {
  const MlaDecodeParams& p = c.mla;
  auto* a = new ks_mla_decode_args_v1{};
  a->struct_size = sizeof(*a);
  a->q_lat = In<uint16_t>(in, "q_lat"), a->q_pe = In<uint16_t>(in, "q_pe"), a->kv = In<uint8_t>(in, "kv");
  a->seq_lens = In<int32_t>(in, "seq_lens"), a->out = out;
  a->batch = p.batch, a->q_len = p.q_len, a->heads = p.heads, a->seq_len = p.max_seq;
  a->softmax_scale = static_cast<float>(p.scale), a->kv_scale = static_cast<float>(p.kv_scale);
  a->kv_format = p.kv_dtype == DType::kFp8E4M3Fnuz ? KS_FP8_E4M3FNUZ : KS_FP8_E4M3FN;
  a->rounding = static_cast<int32_t>(p.rounding);
  return MakeLauncher<ks_mla_decode_fn_v1>(e, a, mem.stream(), "mla_decode");
}

absl::StatusOr<Launcher> BindMoe(WorkerMemory& mem, const Entry& e, const OpCall& c, const Inputs& in, uint16_t* out) {
  const MoeParams& p = c.moe;
  if (p.stage == MoeStage::kLayer) {
    auto* a = new ks_moe_layer_args_v1{};
    a->struct_size = sizeof(*a);
    a->x = In<uint16_t>(in, "x"), a->topk_ids = In<int32_t>(in, "topk_ids");
    a->topk_weights = In<float>(in, "topk_weights");
    a->w13 = In<uint8_t>(in, "w13"), a->w13_scales = In<uint8_t>(in, "w13_scales");
    a->w2 = In<uint8_t>(in, "w2"), a->w2_scales = In<uint8_t>(in, "w2_scales"), a->out = out;
    a->workspace_bytes = p.tokens * p.top_k * p.inter * static_cast<int64_t>(sizeof(uint16_t));
    KS_ASSIGN_OR_RETURN(a->workspace, mem.Scratch(static_cast<size_t>(a->workspace_bytes)));
    a->tokens = p.tokens, a->top_k = p.top_k, a->experts = p.experts, a->hidden = p.hidden, a->inter = p.inter;
    a->out_dim = p.out_dim, a->rounding = static_cast<int32_t>(p.rounding);
    return MakeLauncher<ks_moe_layer_fn_v1>(e, a, mem.stream(), "moe_layer");
  }
  if (p.stage == MoeStage::kGateUp) {
    auto* a = new ks_moe_gateup_args_v1{};
    a->struct_size = sizeof(*a);
    a->x = In<uint16_t>(in, "x"), a->topk_ids = In<int32_t>(in, "topk_ids");
    a->topk_weights = In<float>(in, "topk_weights"), a->w13 = In<uint8_t>(in, "w13");
    a->w13_scales = In<uint8_t>(in, "w13_scales"), a->out = out;
    a->tokens = p.tokens, a->top_k = p.top_k, a->experts = p.experts, a->hidden = p.hidden, a->inter = p.inter;
    a->swiglu = p.swiglu, a->rounding = static_cast<int32_t>(p.rounding);
    return MakeLauncher<ks_moe_gateup_fn_v1>(e, a, mem.stream(), "moe_gateup");
  }
  auto* a = new ks_moe_down_args_v1{};
  a->struct_size = sizeof(*a);
  a->a = In<uint16_t>(in, "x"), a->topk_ids = In<int32_t>(in, "topk_ids");
  a->topk_weights = In<float>(in, "topk_weights"), a->w2 = In<uint8_t>(in, "w2");
  a->w2_scales = In<uint8_t>(in, "w2_scales"), a->out = out;
  a->tokens = p.tokens, a->top_k = p.top_k, a->experts = p.experts, a->inter = p.inter, a->out_dim = p.out_dim;
  a->weighted_sum = p.weighted_sum, a->rounding = static_cast<int32_t>(p.rounding);
  return MakeLauncher<ks_moe_down_fn_v1>(e, a, mem.stream(), "moe_down");
}

// The kernel's entry point for `op`, after its ABI version.
absl::StatusOr<void*> Load(const std::string& so, BenchOp op) {
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return absl::InvalidArgumentError(absl::StrCat("the kernel does not load: ", dlerror()));
  const auto* version = static_cast<const int32_t*>(dlsym(h, KS_USER_ABI_VERSION_SYMBOL));
  if (version == nullptr) {
    return absl::InvalidArgumentError(
        "the kernel exports no ks_user_abi_version; define it with KS_USER_ABI_DEFINE_VERSION() "
        "(kernels/api/user_kernel_abi.h)");
  }
  if (*version != KS_USER_ABI_VERSION) {
    return absl::InvalidArgumentError(absl::StrCat("the kernel was built for user kernel ABI version ", *version,
                                                   "; this server speaks version ", KS_USER_ABI_VERSION,
                                                   " (kernels/api/user_kernel_abi.h)"));
  }
  const UserAbiEntry* abi = FindUserAbiEntry(static_cast<pb::BenchOp>(op));
  if (abi == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("op ", BenchOpName(op), " has no user kernel entry point"));
  }
  const char* entry = abi->entry;
  void* fn = dlsym(h, entry);
  if (fn == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("the kernel exports no ", entry, ", the entry point of op ",
                                                   BenchOpName(op), " (declare it extern \"C\")"));
  }
  return fn;
}

// ------------------------------------------------------------- the loop

struct Worker {
  std::unique_ptr<bench::PreparedJob> job;
  std::unique_ptr<WorkerMemory> mem;
  Launcher launcher;
};

// What the worker was started with: a shared object (--so=), or a cubin /
// PTX / AMD code object (--cubin=, --ptx=, --hsaco=) with its launch (--grid=X,Y,Z --block=X,Y,Z
// --shared_bytes=N).
struct Object {
  std::string so;
  DeviceKernelSpec device;  // path "" unless a cubin or PTX
};

bool ParseDims(const char* text, uint32_t out[3]) {
  unsigned x = 0, y = 0, z = 0;
  if (sscanf(text, "%u,%u,%u", &x, &y, &z) != 3) return false;
  out[0] = x, out[1] = y, out[2] = z;
  return true;
}

absl::Status Setup(const Object& object, const std::string& payload, Worker* w) {
  uint64_t seed = 0;
  size_t pos = 0;
  pb::BenchJobSpec spec;
  if (!ReadPod(payload, &pos, &seed) || !spec.ParseFromString(payload.substr(pos))) {
    return absl::InternalError("a malformed setup frame");
  }
  spec.mutable_inputs()->set_seed(seed);
  KS_ASSIGN_OR_RETURN(w->job, bench::PrepareJob(spec, bench::BufferReader(), ""));
  const OpCall& c = w->job->host_call;
  Entry fn;
  if (object.device.path.empty()) {
    KS_ASSIGN_OR_RETURN(fn.so_fn, Load(object.so, c.op));
  }
  w->mem = MakeWorkerMemory(spec.device());
  WorkerMemory& mem = *w->mem;
  if (!object.device.path.empty()) {
    const UserAbiEntry* abi = FindUserAbiEntry(static_cast<pb::BenchOp>(c.op));
    if (abi == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("op ", BenchOpName(c.op), " has no user kernel entry point"));
    }
    DeviceKernelSpec d = object.device;
    d.name = abi->device_kernel;
    d.args_bytes = abi->args_bytes;
    KS_ASSIGN_OR_RETURN(fn.device, mem.LoadDeviceKernel(d));
  }
  KS_ASSIGN_OR_RETURN(void* out_data, mem.Output(static_cast<size_t>(c.OutputDesc().num_bytes())));
  Inputs in;
  for (const auto& [name, t] : w->job->tensors) {
    if (c.op == BenchOp::kFp8Attention) continue;  // quantized below
    KS_ASSIGN_OR_RETURN(in[name], mem.Input(name, t.bytes(), static_cast<size_t>(t.num_bytes())));
  }
  uint16_t* out = static_cast<uint16_t*>(out_data);
  absl::StatusOr<Launcher> bound;
  switch (c.op) {
    case BenchOp::kAttention:
      bound = BindAttention(mem, fn, c, in, out);
      break;
    case BenchOp::kFp8Attention:
      bound = BindFp8Attention(mem, fn, c, w->job->tensors, &in, out);
      break;
    case BenchOp::kMlaDecode:
      bound = BindMla(mem, fn, c, in, out);
      break;
    default:
      bound = BindMoe(mem, fn, c, in, out);
  }
  KS_RETURN_IF_ERROR(bound.status());
  w->launcher = std::move(*bound);
  return absl::OkStatus();
}

// A failed launch, after the device's own error: a fault of an earlier
// launch surfaces at the next one, and is a device error, not this launch's.
absl::Status LaunchFailed(Worker* w, int rc) {
  KS_RETURN_IF_ERROR(w->mem->Check());
  return absl::AbortedError(w->launcher.describe ? w->launcher.describe(rc)
                                                 : absl::StrCat("the kernel returned ", rc, " (0 is success)"));
}

absl::Status LaunchOnce(Worker* w) {
  const int rc = w->launcher.launch();
  if (rc != 0) return LaunchFailed(w, rc);
  return w->mem->Check();
}

absl::Status Gate(Worker* w) {
  KS_RETURN_IF_ERROR(w->mem->Poison());  // bf16 NaN everywhere
  KS_RETURN_IF_ERROR(LaunchOnce(w));
  KS_ASSIGN_OR_RETURN(const std::string out, w->mem->ReadOutput());
  return WriteFrame(kWorkerProtocolFd, kOutput, out);
}

// `n` launches timed by the memory's clock (a launch's non-zero return is
// the kernel's failure, after the device's own error); ms for all of them.
absl::StatusOr<double> TimeBatch(Worker* w, int n) {
  int failed = 0;
  absl::StatusOr<double> ms = w->mem->Time(
      [w, &failed] {
        const int rc = w->launcher.launch();
        if (rc != 0) failed = rc;
        return rc;
      },
      n);
  if (!ms.ok() && failed != 0) return LaunchFailed(w, failed);
  return ms;
}

// kTimes: the total, the launches and one sample (ms per launch) per batch.
absl::Status SendTimes(double total_ms, int64_t launches, const std::vector<double>& samples) {
  std::string reply;
  AppendPod(&reply, total_ms);
  AppendPod(&reply, launches);
  for (double s : samples) AppendPod(&reply, s);
  return WriteFrame(kWorkerProtocolFd, kTimes, reply);
}

// Warm-up launches, each after a flush when `flush_bytes` > 0 (as the
// server's Warm does for a built-in variant).
absl::Status WarmUp(Worker* w, int warmup, uint64_t flush_bytes) {
  for (int i = 0; i < warmup; ++i) {
    KS_RETURN_IF_ERROR(w->mem->FlushCache(flush_bytes));
    KS_RETURN_IF_ERROR(LaunchOnce(w));
  }
  return absl::OkStatus();
}

absl::Status Time(Worker* w, const std::string& payload) {
  int32_t warmup = 0, timed = 0, batches = 1;
  uint64_t flush_bytes = 0;
  size_t pos = 0;
  if (!ReadPod(payload, &pos, &warmup) || !ReadPod(payload, &pos, &timed) || !ReadPod(payload, &pos, &batches) ||
      !ReadPod(payload, &pos, &flush_bytes)) {
    return absl::InternalError("a malformed timing frame");
  }
  KS_RETURN_IF_ERROR(WarmUp(w, warmup, flush_bytes));
  double total = 0;
  std::vector<double> samples;
  int done = 0;
  // With a flush, every launch is timed alone right after it.
  batches = flush_bytes > 0 ? timed : std::max(1, std::min(batches, std::max(timed, 1)));
  for (int b = 0; b < batches && timed > 0; ++b) {
    const int m = (timed - done) / (batches - b);
    KS_RETURN_IF_ERROR(w->mem->FlushCache(flush_bytes));
    KS_ASSIGN_OR_RETURN(const double ms, TimeBatch(w, m));
    total += ms;
    samples.push_back(ms / m);
    done += m;
  }
  return SendTimes(total, done, samples);
}

// Method graph: a capture that fails is no failure of the kernel: the
// server reports the variant untimed, as for a built-in one, and the worker
// lives on.
absl::Status Graph(Worker* w, const std::string& payload) {
  int32_t warmup = 0, replays = 0, batches = 1;
  size_t pos = 0;
  if (!ReadPod(payload, &pos, &warmup) || !ReadPod(payload, &pos, &replays) || !ReadPod(payload, &pos, &batches)) {
    return absl::InternalError("a malformed graph frame");
  }
  KS_RETURN_IF_ERROR(WarmUp(w, warmup, 0));
  double total = 0;
  std::vector<double> samples;
  int done = 0;
  batches = std::max(1, std::min(batches, std::max(replays, 1)));
  for (int b = 0; b < batches && replays > 0; ++b) {
    const int m = (replays - done) / (batches - b);
    absl::StatusOr<double> ms = w->mem->TimeGraph([w] { return w->launcher.launch(); }, m);
    if (absl::IsFailedPrecondition(ms.status()) || absl::IsUnimplemented(ms.status())) {
      return WriteFrame(kWorkerProtocolFd, kNotCaptured, ErrorPayload(ms.status()));
    }
    KS_RETURN_IF_ERROR(ms.status());
    total += *ms;
    samples.push_back(*ms / m);
    done += m;
  }
  return SendTimes(total, done, samples);
}

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Method sustained, here rather than one launch per pipe round trip: the
// warm-in in back-to-back batches of about 20 ms, then the window in timed
// batches of the same size, each one sample.
absl::Status Sustain(Worker* w, const std::string& payload) {
  double warmin_s = 0, window_s = 0;
  size_t pos = 0;
  if (!ReadPod(payload, &pos, &warmin_s) || !ReadPod(payload, &pos, &window_s)) {
    return absl::InternalError("a malformed sustained frame");
  }
  int batch = 1;
  auto next_batch = [&batch](double ms) {
    batch = std::clamp(static_cast<int>(20.0 / std::max(ms / batch, 1e-4)), 1, 100000);
  };
  const double t_warm = NowS();
  while (NowS() - t_warm < warmin_s) {
    KS_ASSIGN_OR_RETURN(const double ms, TimeBatch(w, batch));
    next_batch(ms);
  }
  double total = 0;
  int64_t launches = 0;
  std::vector<double> samples;
  const double t_window = NowS();
  while (NowS() - t_window < window_s || launches == 0) {
    const int n = batch;
    KS_ASSIGN_OR_RETURN(const double ms, TimeBatch(w, n));
    total += ms;
    launches += n;
    samples.push_back(ms / n);
    next_batch(ms);
  }
  return SendTimes(total, launches, samples);
}

// `--probe --device=N`: the device health check after another worker's
// abnormal death (device_probe.h): the worker's memory on the device (its
// own context on cuda), a small input copied there, an output poisoned and
// read back after a synchronisation. Exit 0: healthy.
int Probe(int device) {
  std::unique_ptr<WorkerMemory> mem = MakeWorkerMemory(device);
  constexpr size_t kBytes = 4096;
  std::vector<uint8_t> pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<uint8_t>(i * 131 + 7);
  absl::Status st = mem->Input("probe", pattern.data(), kBytes).status();
  absl::StatusOr<void*> out = st.ok() ? mem->Output(kBytes) : absl::StatusOr<void*>(st);
  st = out.status();
  if (st.ok()) st = mem->Poison();
  if (st.ok()) st = mem->Check();
  absl::StatusOr<std::string> back = st.ok() ? mem->ReadOutput() : absl::StatusOr<std::string>(st);
  if (back.ok() && (back->size() != kBytes || back->find_first_not_of('\xff') != std::string::npos)) {
    back = absl::DataLossError("the poisoned output read back changed");
  }
  if (!back.ok()) {
    fprintf(stderr, "probe of device %d failed: %s\n", device, back.status().ToString().c_str());
    return 1;
  }
  fprintf(stderr, "probe of device %d: %s: ok\n", device, mem->Describe().c_str());
  return 0;
}

int Main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--probe") {
    int device = 0;
    for (int i = 2; i < argc; ++i) {
      if (absl::StartsWith(argv[i], "--device=")) device = atoi(argv[i] + 9);
    }
    return Probe(device);
  }
  // The protocol pipe came as stdout: keep it on fd 3 and send the kernel's
  // own stdout to stderr (the server's log of this worker).
  if (dup2(1, kWorkerProtocolFd) < 0 || dup2(2, 1) < 0) return 2;
  Object object;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    bool ok = true;
    if (absl::StartsWith(arg, "--so=")) {
      object.so = arg.substr(5);
    } else if (absl::StartsWith(arg, "--cubin=") || absl::StartsWith(arg, "--ptx=") ||
               absl::StartsWith(arg, "--hsaco=")) {
      object.device.ptx = absl::StartsWith(arg, "--ptx=");
      object.device.path = arg.substr(arg.find('=') + 1);
    } else if (absl::StartsWith(arg, "--grid=")) {
      ok = ParseDims(argv[i] + 7, object.device.grid);
    } else if (absl::StartsWith(arg, "--block=")) {
      ok = ParseDims(argv[i] + 8, object.device.block);
    } else if (absl::StartsWith(arg, "--shared_bytes=")) {
      ok = sscanf(argv[i] + 15, "%u", &object.device.shared_bytes) == 1;
    }
    if (!ok) {
      fprintf(stderr, "kernel_worker: bad argument %s\n", argv[i]);
      return 2;
    }
  }
  Worker w;
  while (true) {
    uint32_t tag = 0;
    std::string payload;
    if (!ReadFrame(0, &tag, &payload).ok() || tag == kQuit) return 0;
    absl::Status st;
    if (tag == kSetup) {
      st = Setup(object, payload, &w);
      if (st.ok()) st = WriteFrame(kWorkerProtocolFd, kReady, w.launcher.what);
    } else if (tag == kGate && w.launcher.launch) {
      st = Gate(&w);
    } else if (tag == kTime && w.launcher.launch) {
      st = Time(&w, payload);
    } else if (tag == kGraph && w.launcher.launch) {
      st = Graph(&w, payload);
    } else if (tag == kSustain && w.launcher.launch) {
      st = Sustain(&w, payload);
    } else {
      st = absl::InternalError(absl::StrCat("unexpected frame ", tag));
    }
    if (!st.ok()) {
      WriteFrame(kWorkerProtocolFd, kError, ErrorPayload(st)).IgnoreError();
      return 1;
    }
  }
}

}  // namespace
}  // namespace user_kernels
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::user_kernels::Main(argc, argv); }
