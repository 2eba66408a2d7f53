// kernelctl: command-line client for kernelserve. See client/README.md.
//
//   kernelctl --server=HOST:PORT [--timeout=SECONDS] SUBCOMMAND [flags]
//
// Exit status: 0 success, 1 a failed call (server or file error), 2 a usage error.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/kernelctl_bench.h"
#include "client/kernelctl_flags.h"
#include "client/npy.h"
#include "common/status_macros.h"
#include "server/security/tls.h"

namespace kernelserve {
namespace kernelctl {
namespace {

constexpr char kBufferPrefix[] = "buffer:";

int Fail(const absl::Status& s, int code) {
  std::cerr << "error: " << absl::StatusCodeToString(s.code()) << ": " << s.message() << "\n";
  return code;
}

// Shared state of one invocation.
struct Env {
  ClientOptions options;
  std::unique_ptr<Client> client;
  bool help = false;  // print usage only

  absl::StatusOr<Client*> GetClient() {
    if (!client) {
      KS_ASSIGN_OR_RETURN(client, Client::Connect(options));
    }
    return client.get();
  }
};

struct Command {
  std::string name;
  std::string summary;
  std::function<int(Env&, const std::vector<std::string>&)> run;
};

// ------------------------------------------------------------- helpers

absl::StatusOr<Rounding> ParseRounding(const std::string& s) {
  if (s == "rtne") return Rounding::kRtne;
  if (s == "rtna") return Rounding::kRtna;
  if (s == "rtz") return Rounding::kRtz;
  return absl::InvalidArgumentError(absl::StrCat("--round must be rtne, rtna or rtz, not \"", s, "\""));
}

absl::StatusOr<Layout> ParseLayout(const std::string& s) {
  if (s == "bhsd") return Layout::kBhsd;
  if (s == "bshd") return Layout::kBshd;
  return absl::InvalidArgumentError(absl::StrCat("--layout must be bhsd or bshd, not \"", s, "\""));
}

absl::StatusOr<Fp8Format> ParseFormat(const std::string& flag, const std::string& s) {
  if (s == "e4m3fn") return Fp8Format::kE4M3Fn;
  if (s == "e4m3fnuz") return Fp8Format::kE4M3Fnuz;
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be e4m3fn or e4m3fnuz, not \"", s, "\""));
}

// Loads a flag value naming a .npy file, or "buffer:ID" for a server buffer.
absl::StatusOr<TensorArg> LoadArg(const std::string& value, NpyAccept accept) {
  if (absl::StartsWith(value, kBufferPrefix)) return TensorArg::Buffer(value.substr(sizeof(kBufferPrefix) - 1));
  KS_ASSIGN_OR_RETURN(HostTensor t, ReadNpyTensor(value, accept));
  return TensorArg(std::move(t));
}

NpyAccept Accept(const std::string& what, DType float_as, DType uint8_as = DType::kInvalid,
                 DType int_as = DType::kInvalid) {
  NpyAccept a;
  a.what = what;
  a.float_as = float_as;
  a.uint8_as = uint8_as;
  a.int_as = int_as;
  return a;
}

NpyAccept IndexAccept(const std::string& what) { return Accept(what, DType::kInvalid, DType::kInvalid, DType::kInt32); }

void PrintResult(const OpResult& r, const std::string& out_path) {
  if (!r.out_buffer_id.empty()) {
    std::cout << "out: buffer " << r.out_buffer_id << "\n";
  } else {
    std::cout << "out: " << r.out.desc().DebugString() << (out_path.empty() ? "" : " -> " + out_path) << "\n";
  }
  if (r.error) std::cout << "error_report: " << ErrorReportString(*r.error) << "\n";
  std::cout << "call: " << CallInfoString(r.info) << "\n";
  std::cout << "wall: " << WallSplitString(r.info) << "\n";
}

// Writes the op's output unless it stayed in a buffer.
absl::Status WriteOut(const OpResult& r, const std::string& out_path) {
  if (!r.out_buffer_id.empty() || out_path.empty()) return absl::OkStatus();
  return WriteNpyTensor(out_path, r.out);
}

// Parses flags; on error prints it and returns the exit code to use.
std::optional<int> ParseOrFail(FlagSet& f, const std::vector<std::string>& args,
                               std::vector<std::string>* positional = nullptr) {
  absl::Status st = f.Parse(args, positional);
  if (!st.ok()) return Fail(st, 2);
  return std::nullopt;
}

// Output destination flags shared by the ops: --out=FILE or --out-buffer[=LABEL].
struct OutFlags {
  std::string out;
  bool to_buffer = false;
  std::string label;
  void Define(FlagSet& f) {
    f.String("out", &out, "FILE.npy", "write the output here (float32 array of the exact bf16 values)");
    f.Bool("out-buffer", &to_buffer, "keep the output on the server as a buffer and print its id");
    f.String("out-label", &label, "LABEL", "label for the --out-buffer buffer");
  }
  absl::Status Check(const std::string& cmd) const {
    if (out.empty() && !to_buffer) {
      return absl::InvalidArgumentError(absl::StrCat(cmd, ": give --out=FILE.npy or --out-buffer"));
    }
    return absl::OkStatus();
  }
  OutputOptions Options() const { return OutputOptions{to_buffer, label}; }
};

int Finish(const absl::StatusOr<OpResult>& r, const std::string& out_path) {
  if (!r.ok()) return Fail(r.status(), 1);
  if (absl::Status st = WriteOut(*r, out_path); !st.ok()) return Fail(st, 1);
  PrintResult(*r, out_path);
  return 0;
}

void PrintUsage(const std::string& synopsis, const std::string& about, const FlagSet& f) {
  std::cout << "usage: " << synopsis << "\n\n" << about << "\n\nflags:\n" << f.Usage();
}

// -------------------------------------------------------------- devices

void PrintDeviceTable(const google::protobuf::RepeatedPtrField<v1::Device>& devices, const std::string& indent) {
  absl::PrintF("%s%-5s %-7s %-10s %-28s %14s %14s %6s %8s\n", indent, "index", "backend", "state", "name",
               "mem_used_MiB", "mem_limit_MiB", "units", "queue");
  for (const v1::Device& d : devices) {
    std::string state = v1::DeviceState_Name(d.state());
    if (!d.state_reason().empty()) state += " (" + d.state_reason() + ")";
    absl::PrintF("%s%-5d %-7s %-10s %-28s %14.1f %14.1f %6d %4d/%-3d\n", indent, d.index(), d.backend(), state,
                 d.name(), d.memory_used_bytes() / 1048576.0, d.memory_limit_bytes() / 1048576.0, d.compute_units(),
                 d.queue_depth(), d.queue_capacity());
    if (!d.health_probe().empty()) std::cout << indent << "      health probe: " << d.health_probe() << "\n";
  }
}

// The other nodes of the server's fleet, as of their last heartbeats.
void PrintFleet(const v1::ListDevicesResponse& resp) {
  if (resp.node_id().empty()) {
    std::cout << "fleet: none (this server keeps its own job store; servers started with the same "
                 "--job_store=postgres://... form a fleet)\n";
    return;
  }
  std::cout << "fleet: " << resp.fleet_size() << " other node(s)\n";
  const int64_t now = absl::ToUnixMillis(absl::Now());
  for (const v1::FleetNode& n : resp.fleet()) {
    absl::PrintF("node %s at %s: %s, version %s, last heartbeat %.1f s ago\n", n.node_id(), n.address(),
                 n.backend(), n.server_version(), (now - n.heartbeat_unix_ms()) / 1000.0);
    PrintDeviceTable(n.devices(), "  ");
  }
}

int CmdDevices(Env& env, const std::vector<std::string>& args) {
  FlagSet f("devices");
  bool fleet = false;
  f.Bool("fleet", &fleet, "also list the other nodes of the server's fleet (--job_store) and their devices");
  if (env.help) {
    PrintUsage("kernelctl devices",
               "Lists the backends in the server binary (and why any is missing), then the devices, their "
               "state, memory and queues. With --fleet, then every other node sharing the server's job store, "
               "its address, last heartbeat and devices.",
               f);
    return 0;
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  auto resp = (*client)->Devices();
  if (!resp.ok()) return Fail(resp.status(), 1);
  std::cout << "server_version: " << resp->server_version() << "\n";
  if (!resp->node_id().empty()) std::cout << "node: " << resp->node_id() << "\n";
  if (!resp->backend_selection().empty()) std::cout << "backend: " << resp->backend_selection() << "\n";
  for (const v1::BackendBuild& b : resp->backends()) {
    absl::PrintF("  %-5s %-9s %s\n", b.name(), b.active() ? "running" : b.built() ? "built" : "not built", b.note());
  }
  PrintDeviceTable(resp->devices(), "");
  if (fleet) PrintFleet(*resp);
  return 0;
}

int CmdDrain(Env& env, const std::vector<std::string>& args) {
  FlagSet f("drain");
  int64_t device = -1;
  bool undrain = false;
  std::string reason;
  f.Int("device", &device, "device index", true);
  f.Bool("undrain", &undrain, "return the device to service");
  f.String("reason", &reason, "TEXT", "shown in the device's state");
  if (env.help) {
    PrintUsage("kernelctl drain",
               "Admin only: stop new work on a device (ops, uploads, pools answer UNAVAILABLE; downloads still "
               "work), or return it to service with --undrain.",
               f);
    return 0;
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  auto d = (*client)->DrainDevice(static_cast<int>(device), undrain, reason);
  if (!d.ok()) return Fail(d.status(), 1);
  std::cout << "device " << d->index() << ": " << v1::DeviceState_Name(d->state())
            << (d->state_reason().empty() ? "" : " (" + d->state_reason() + ")") << "\n";
  return 0;
}

int CmdProbe(Env& env, const std::vector<std::string>& args) {
  FlagSet f("probe");
  int64_t device = -1;
  f.Int("device", &device, "device index", true);
  if (env.help) {
    PrintUsage("kernelctl probe --device=N",
               "Admin only: run the device's health probe now (the one run after a user kernel's worker fault). "
               "A pass returns an UNHEALTHY device to service; a failure keeps or marks it UNHEALTHY with the "
               "probe's reason. Prints the verdict and the device; exits 0 only when the probe passed.",
               f);
    return 0;
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  auto r = (*client)->ProbeDevice(static_cast<int>(device));
  if (!r.ok()) return Fail(r.status(), 1);
  std::cout << "probe of device " << device << ": " << r->verdict() << "\n";
  google::protobuf::RepeatedPtrField<v1::Device> one;
  *one.Add() = r->device();
  PrintDeviceTable(one, "");
  return r->passed() ? 0 : 1;
}

int CmdHealth(Env& env, const std::vector<std::string>& args) {
  FlagSet f("health");
  std::string service;
  f.String("service", &service, "NAME", "service to check (default: the whole server)");
  if (env.help) {
    PrintUsage("kernelctl health [--service=NAME]",
               "grpc.health.v1 check. Prints SERVING or NOT_SERVING; exits 0 only when serving.", f);
    return 0;
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  auto h = (*client)->Health(service);
  if (!h.ok()) return Fail(h.status(), 1);
  std::cout << HealthStateName(*h) << "\n";
  return *h == HealthState::kServing ? 0 : 1;
}

// -------------------------------------------------------------- buffers

void PrintBuffer(const v1::BufferInfo& b) {
  absl::PrintF("%-24s %-12s %-20s %12d  device=%d  %s\n", b.id(),
               DTypeName(static_cast<DType>(b.dtype())),
               ShapeString(Shape(b.shape().begin(), b.shape().end())), b.size_bytes(), b.device(), b.label());
}

int CmdBuffers(Env& env, const std::vector<std::string>& all_args) {
  const std::string about =
      "Server-resident buffers.\n"
      "  list                      list this tenant's buffers\n"
      "  upload --in=FILE.npy      upload (chunked); prints the new buffer id\n"
      "  download --id=ID --out=FILE.npy\n"
      "  free --id=ID\n"
      "An op flag taking FILE.npy also takes buffer:ID.";
  std::string action = all_args.empty() ? "" : all_args[0];
  std::vector<std::string> args(all_args.begin() + (all_args.empty() ? 0 : 1), all_args.end());
  std::string in, out, id, dtype_name, label;
  int64_t device = 0;
  FlagSet f("buffers " + action);
  if (action == "upload" || env.help) {
    f.String("in", &in, "FILE.npy", "upload: the array to upload");
    f.String("dtype", &dtype_name, "DTYPE",
             "upload: element type (floats: bf16 (default), fp32, fp64; uint8: uint8 (default), fp8_e4m3fn, "
             "fp8_e4m3fnuz, fp8_e5m2, e8m0, fp4_e2m1 (packed); ints: int32, int64)");
    f.String("label", &label, "LABEL", "upload: a label for the buffer");
    f.Int("device", &device, "upload: device index (default 0)");
  }
  if (action == "download" || action == "free" || env.help) f.String("id", &id, "ID", "download/free: buffer id");
  if (action == "download" || env.help) f.String("out", &out, "FILE.npy", "download: where to write the array");
  if (env.help) {
    PrintUsage("kernelctl buffers list|upload|download|free [flags]", about, f);
    return 0;
  }
  if (action != "list" && action != "upload" && action != "download" && action != "free") {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    "buffers: expected list, upload, download or free, got \"", action, "\"")),
                2);
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  if ((action == "download" || action == "free") && id.empty()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("buffers ", action, ": missing required flag --id")), 2);
  }
  if (action == "download" && out.empty()) {
    return Fail(absl::InvalidArgumentError("buffers download: missing required flag --out"), 2);
  }
  if (action == "upload" && in.empty()) {
    return Fail(absl::InvalidArgumentError("buffers upload: missing required flag --in"), 2);
  }
  NpyAccept accept = Accept("the upload", DType::kBf16, DType::kUint8, DType::kInvalid);
  if (!dtype_name.empty()) {
    auto dt = ParseDType(dtype_name);
    if (!dt.ok()) return Fail(dt.status(), 2);
    accept = NpyAccept();
    accept.what = absl::StrCat("--dtype=", dtype_name);
    switch (*dt) {
      case DType::kBf16: case DType::kFp32: case DType::kFp64: accept.float_as = *dt; break;
      case DType::kInt32: case DType::kInt64: accept.int_as = *dt; break;
      case DType::kUint8: case DType::kFp8E4M3Fn: case DType::kFp8E4M3Fnuz: case DType::kFp8E5M2:
      case DType::kE8M0: case DType::kFp4E2M1: accept.uint8_as = *dt; break;
      default:
        return Fail(absl::InvalidArgumentError(absl::StrCat("buffers upload: cannot upload as ", dtype_name)), 2);
    }
  }
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  if (action == "list") {
    auto list = (*client)->ListBuffers();
    if (!list.ok()) return Fail(list.status(), 1);
    for (const auto& b : *list) PrintBuffer(b);
    return 0;
  }
  if (action == "upload") {
    absl::StatusOr<NpyArray> a = ReadNpyFile(in);
    if (!a.ok()) return Fail(a.status(), 1);
    if (dtype_name.empty() && a->kind == 'i') accept.int_as = a->itemsize == 4 ? DType::kInt32 : DType::kInt64;
    absl::StatusOr<HostTensor> t = NpyToTensor(*a, accept, in);
    if (!t.ok()) return Fail(t.status(), 1);
    auto info = (*client)->UploadBuffer(*t, label, static_cast<int>(device));
    if (!info.ok()) return Fail(info.status(), 1);
    PrintBuffer(*info);
    return 0;
  }
  if (action == "download") {
    auto t = (*client)->DownloadBuffer(id);
    if (!t.ok()) return Fail(t.status(), 1);
    if (absl::Status st = WriteNpyTensor(out, *t); !st.ok()) return Fail(st, 1);
    std::cout << "out: " << t->desc().DebugString() << " -> " << out << "\n";
    return 0;
  }
  absl::Status st = (*client)->FreeBuffer(id);
  if (!st.ok()) return Fail(st, 1);
  std::cout << "freed " << id << "\n";
  return 0;
}

// ------------------------------------------------------------ attention

int CmdAttention(Env& env, const std::vector<std::string>& args) {
  FlagSet f("attention");
  std::string q, k, v, layout = "bhsd", round = "rtne";
  bool causal = false, report = false;
  std::optional<double> scale;
  int64_t device = 0;
  OutFlags out;
  f.String("q", &q, "FILE.npy", "query [B,Hq,Sq,D] (bhsd) or [B,Sq,Hq,D] (bshd); floats, rounded to bf16", true);
  f.String("k", &k, "FILE.npy", "keys [B,Hkv,Skv,D] or [B,Skv,Hkv,D]", true);
  f.String("v", &v, "FILE.npy", "values, shaped like k", true);
  out.Define(f);
  f.Bool("causal", &causal, "causal mask, bottom-right aligned");
  f.String("layout", &layout, "bhsd|bshd", "tensor layout (default bhsd)");
  f.String("round", &round, "rtne|rtna|rtz", "rounding of the output to bf16 (default rtne)");
  f.Double("scale", &scale, "softmax scale (default 1/sqrt(D))");
  f.Bool("report-error", &report, "also compute the error against the fp64 oracle");
  f.Int("device", &device, "device index (default 0)");
  if (env.help) {
    PrintUsage("kernelctl attention --q=q.npy --k=k.npy --v=v.npy --out=o.npy [flags]",
               "bf16 multi-head attention forward (GQA when Hq is a multiple of Hkv).", f);
    return 0;
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  if (absl::Status st = out.Check("attention"); !st.ok()) return Fail(st, 2);
  AttentionArgs a;
  auto l = ParseLayout(layout);
  if (!l.ok()) return Fail(l.status(), 2);
  auto r = ParseRounding(round);
  if (!r.ok()) return Fail(r.status(), 2);
  a.layout = *l;
  a.rounding = *r;
  a.causal = causal;
  a.softmax_scale = scale;
  a.report_error = report;
  a.output = out.Options();
  a.device = static_cast<int>(device);
  for (auto [path, arg, what] : {std::make_tuple(&q, &a.q, "q"), std::make_tuple(&k, &a.k, "k"),
                                 std::make_tuple(&v, &a.v, "v")}) {
    auto t = LoadArg(*path, Accept(what, DType::kBf16));
    if (!t.ok()) return Fail(t.status(), 1);
    *arg = std::move(*t);
  }
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  return Finish((*client)->Attention(a), out.out);
}

int CmdFp8Attention(Env& env, const std::vector<std::string>& args) {
  FlagSet f("fp8-attention");
  std::string q, k, v, layout = "bhsd", round = "rtne", p_mode = "exact", format = "e4m3fn", descale_mode = "tensor";
  std::string qd, kd, vd;
  bool causal = true, report = false, split = false, hadamard = false;
  std::optional<double> scale;
  int64_t device = 0;
  OutFlags out;
  f.String("q", &q, "FILE.npy",
           "query [B,H,Sq,Dqk]: floats (the server quantizes them) or uint8 FP8 codes of --format", true);
  f.String("k", &k, "FILE.npy", "keys [B,Hkv,Skv,Dqk]", true);
  f.String("v", &v, "FILE.npy", "values [B,Hkv,Skv,Dv]", true);
  out.Define(f);
  f.Bool("causal", &causal, "causal mask (default true; --no-causal or --causal=false turns it off)");
  f.String("p-mode", &p_mode, "exact|lean|naive", "quantization of P (default exact)");
  f.Bool("hadamard", &hadamard, "rotate Q and K with a Hadamard transform before quantizing (float inputs)");
  f.String("format", &format, "e4m3fn|e4m3fnuz", "FP8 format (default e4m3fn)");
  f.String("descale-mode", &descale_mode, "tensor|head", "descale granularity (default tensor)");
  f.String("q-descale", &qd, "FILE.npy", "fp32 descale of uint8 q: [1] or [B,H]");
  f.String("k-descale", &kd, "FILE.npy", "fp32 descale of uint8 k");
  f.String("v-descale", &vd, "FILE.npy", "fp32 descale of uint8 v");
  f.String("layout", &layout, "bhsd|bshd", "tensor layout (default bhsd)");
  f.String("round", &round, "rtne|rtna|rtz", "output rounding (default rtne)");
  f.Double("scale", &scale, "softmax scale (default 1/sqrt(Dqk))");
  f.Bool("report-error", &report, "error against fp64 attention on the same quantized inputs");
  f.Bool("report-split", &split, "also split the error into input quantization, P quantization and the rest");
  f.Int("device", &device, "device index (default 0)");
  if (env.help) {
    PrintUsage("kernelctl fp8-attention --q=q.npy --k=k.npy --v=v.npy --out=o.npy [flags]",
               "FP8 attention with block-scaled P (ZYFA). (d_qk, d_v) = (128, 128) or (192, 128).", f);
    return 0;
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  if (absl::Status st = out.Check("fp8-attention"); !st.ok()) return Fail(st, 2);
  Fp8AttentionArgs a;
  auto l = ParseLayout(layout);
  if (!l.ok()) return Fail(l.status(), 2);
  auto r = ParseRounding(round);
  if (!r.ok()) return Fail(r.status(), 2);
  auto fmt = ParseFormat("format", format);
  if (!fmt.ok()) return Fail(fmt.status(), 2);
  if (p_mode == "exact") {
    a.p_mode = PMode::kExact;
  } else if (p_mode == "lean") {
    a.p_mode = PMode::kLean;
  } else if (p_mode == "naive") {
    a.p_mode = PMode::kNaive;
  } else {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--p-mode must be exact, lean or naive, not \"", p_mode, "\"")), 2);
  }
  if (descale_mode == "tensor") {
    a.descale_mode = DescaleMode::kPerTensor;
  } else if (descale_mode == "head") {
    a.descale_mode = DescaleMode::kPerHead;
  } else {
    return Fail(absl::InvalidArgumentError(
                    absl::StrCat("--descale-mode must be tensor or head, not \"", descale_mode, "\"")), 2);
  }
  a.layout = *l;
  a.rounding = *r;
  a.format = *fmt;
  a.causal = causal;
  a.hadamard = hadamard;
  a.softmax_scale = scale;
  a.report_error = report || split;
  a.report_error_split = split;
  a.output = out.Options();
  a.device = static_cast<int>(device);
  const DType fp8 = a.format == Fp8Format::kE4M3Fn ? DType::kFp8E4M3Fn : DType::kFp8E4M3Fnuz;
  for (auto [path, arg, what] : {std::make_tuple(&q, &a.q, "q"), std::make_tuple(&k, &a.k, "k"),
                                 std::make_tuple(&v, &a.v, "v")}) {
    auto t = LoadArg(*path, Accept(what, DType::kBf16, fp8));
    if (!t.ok()) return Fail(t.status(), 1);
    *arg = std::move(*t);
  }
  // FP8 code inputs need their descales and float inputs take none (the server quantizes them): a flag
  // missing or extra is a usage error here, where the inputs' types are known (not for buffer: inputs).
  const TensorArg* loaded[3] = {&a.q, &a.k, &a.v};
  bool fp8_codes = false, floats = false;
  for (const TensorArg* t : loaded) {
    if (t->host() == nullptr) continue;
    (t->host()->dtype() == fp8 ? fp8_codes : floats) = true;
  }
  const char* descale_flags[3] = {"--q-descale", "--k-descale", "--v-descale"};
  const std::string* descale_paths[3] = {&qd, &kd, &vd};
  for (int i = 0; i < 3; ++i) {
    if (fp8_codes && !floats && descale_paths[i]->empty()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("fp8-attention with uint8 FP8 code inputs: missing required "
                                                          "flag ", descale_flags[i], " (fp32 [1] or [B,H])")),
                  2);
    }
    if (floats && !fp8_codes && !descale_paths[i]->empty()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("fp8-attention: ", descale_flags[i],
                                                          " is only for uint8 FP8 code inputs; float inputs are "
                                                          "quantized by the server with descales it computes")),
                  2);
    }
  }
  for (auto [path, arg, what] : {std::make_tuple(&qd, &a.q_descale, "q_descale"),
                                 std::make_tuple(&kd, &a.k_descale, "k_descale"),
                                 std::make_tuple(&vd, &a.v_descale, "v_descale")}) {
    if (path->empty()) continue;
    auto t = LoadArg(*path, Accept(what, DType::kFp32));
    if (!t.ok()) return Fail(t.status(), 1);
    *arg = std::move(*t);
  }
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  return Finish((*client)->Fp8Attention(a), out.out);
}

// The index tensors of a decode call on a pool: --seq-lens, --kv-indices,
// --kv-indptr (required where `required`) and the optional --q-lens.
struct PageTableFlags {
  std::string seq_lens, kv_indices, kv_indptr, q_lens;
  void Define(FlagSet& f, bool required) {
    f.String("seq-lens", &seq_lens, "FILE.npy",
             required ? "int [B] tokens per request, the new ones included" : "int [B] tokens per request (required with --pool)",
             required);
    f.String("kv-indices", &kv_indices, "FILE.npy", "int pool slots (page 1) or pages, flat over requests", required);
    f.String("kv-indptr", &kv_indptr, "FILE.npy", "int [B+1] offsets into --kv-indices", required);
    f.String("q-lens", &q_lens, "FILE.npy", "int [B] ragged new-token counts, each 1..q_len");
  }
};

template <typename Args>
absl::Status LoadPageTables(const PageTableFlags& t, Args* a) {
  for (auto [path, arg, what] :
       {std::make_tuple(&t.seq_lens, &a->seq_lens, "seq_lens"), std::make_tuple(&t.kv_indices, &a->kv_indices, "kv_indices"),
        std::make_tuple(&t.kv_indptr, &a->kv_indptr, "kv_indptr"), std::make_tuple(&t.q_lens, &a->q_lens, "q_lens")}) {
    if (path->empty()) continue;
    KS_ASSIGN_OR_RETURN(*arg, LoadArg(*path, IndexAccept(what)));
  }
  return absl::OkStatus();
}

// ----------------------------------------------------------- mla-decode

int CmdMlaDecode(Env& env, const std::vector<std::string>& args) {
  FlagSet f("mla-decode");
  std::string q_lat, q_pe, kv, pool, kv_format, round = "rtne";
  std::optional<double> scale, kv_scale;
  int64_t num_splits = 0, device = 0;
  bool report = false;
  OutFlags out;
  PageTableFlags tables;
  f.String("q-lat", &q_lat, "FILE.npy", "latent queries [B,q_len,H,512] (floats, rounded to bf16)", true);
  f.String("q-pe", &q_pe, "FILE.npy", "rope queries [B,q_len,H,64]", true);
  f.String("kv", &kv, "FILE.npy", "contiguous KV [B,S,576] as uint8 FP8 codes (needs --kv-format)");
  f.String("kv-format", &kv_format, "e4m3fn|e4m3fnuz", "format of the --kv codes");
  f.String("pool", &pool, "POOL_ID", "use this KV pool instead of --kv");
  out.Define(f);
  f.Double("scale", &scale, "softmax scale (default 1/sqrt(576))");
  f.Double("kv-scale", &kv_scale, "dequantization scale of contiguous --kv (default 1; a pool has its own)");
  tables.Define(f, false);
  f.Int("num-splits", &num_splits, "KV splits (0: the backend chooses)");
  f.String("round", &round, "rtne|rtna|rtz", "output rounding (default rtne)");
  f.Bool("report-error", &report, "also compute the error against the fp64 oracle");
  f.Int("device", &device, "device index (default 0)");
  if (env.help) {
    PrintUsage("kernelctl mla-decode --q-lat=ql.npy --q-pe=qp.npy (--kv=kv.npy --kv-format=e4m3fn | --pool=ID "
               "--seq-lens=.. --kv-indices=.. --kv-indptr=..) --out=o.npy [flags]",
               "MLA absorbed decode (bf16 queries, FP8 KV rows of 576).", f);
    return 0;
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  if (absl::Status st = out.Check("mla-decode"); !st.ok()) return Fail(st, 2);
  if (kv.empty() == pool.empty()) {
    return Fail(absl::InvalidArgumentError("mla-decode: give exactly one of --kv or --pool"), 2);
  }
  // A pool needs its page tables; a contiguous --kv is indexed by position (--seq-lens may still shorten
  // each request), so the page tables are pool-only.
  for (auto [value, flag] : {std::make_pair(&tables.seq_lens, "--seq-lens"),
                             std::make_pair(&tables.kv_indices, "--kv-indices"),
                             std::make_pair(&tables.kv_indptr, "--kv-indptr")}) {
    if (!pool.empty() && value->empty()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("mla-decode --pool: missing required flag ", flag)), 2);
    }
  }
  if (!kv.empty() && !(tables.kv_indices.empty() && tables.kv_indptr.empty())) {
    return Fail(absl::InvalidArgumentError("mla-decode: --kv-indices and --kv-indptr are for --pool only"), 2);
  }
  MlaDecodeArgs a;
  auto r = ParseRounding(round);
  if (!r.ok()) return Fail(r.status(), 2);
  a.rounding = *r;
  a.softmax_scale = scale;
  a.kv_scale = kv_scale.value_or(0);
  a.num_splits = static_cast<int>(num_splits);
  a.report_error = report;
  a.pool_id = pool;
  a.output = out.Options();
  a.device = static_cast<int>(device);
  DType kv_dtype = DType::kInvalid;
  if (!kv_format.empty()) {
    auto fmt = ParseFormat("kv-format", kv_format);
    if (!fmt.ok()) return Fail(fmt.status(), 2);
    kv_dtype = *fmt == Fp8Format::kE4M3Fn ? DType::kFp8E4M3Fn : DType::kFp8E4M3Fnuz;
  }
  for (auto [path, arg, what] : {std::make_tuple(&q_lat, &a.q_lat, "q_lat"), std::make_tuple(&q_pe, &a.q_pe, "q_pe")}) {
    auto t = LoadArg(*path, Accept(what, DType::kBf16));
    if (!t.ok()) return Fail(t.status(), 1);
    *arg = std::move(*t);
  }
  if (!kv.empty()) {
    if (kv_dtype == DType::kInvalid && !absl::StartsWith(kv, kBufferPrefix)) {
      return Fail(absl::InvalidArgumentError("mla-decode: uint8 --kv codes need --kv-format=e4m3fn|e4m3fnuz"), 2);
    }
    auto t = LoadArg(kv, Accept("kv", DType::kInvalid, kv_dtype));
    if (!t.ok()) return Fail(t.status(), 1);
    a.kv = std::move(*t);
  }
  if (absl::Status st = LoadPageTables(tables, &a); !st.ok()) return Fail(st, 1);
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  return Finish((*client)->MlaDecode(a), out.out);
}

// ---------------------------------------------------------------- decode

int CmdDecode(Env& env, const std::vector<std::string>& args) {
  FlagSet f("decode");
  std::string q, pool, round = "rtne";
  std::optional<double> scale;
  int64_t device = 0;
  bool report = false;
  OutFlags out;
  PageTableFlags tables;
  f.String("q", &q, "FILE.npy", "queries of the new tokens [B,q_len,Hq,D] (floats, rounded to bf16)", true);
  f.String("pool", &pool, "POOL_ID", "a per-head KV pool (pool create --kind=per-head)", true);
  out.Define(f);
  tables.Define(f, true);
  f.Double("scale", &scale, "softmax scale (default 1/sqrt(D))");
  f.String("round", &round, "rtne|rtna|rtz", "output rounding (default rtne)");
  f.Bool("report-error", &report, "also compute the error against the fp64 oracle");
  f.Int("device", &device, "device index (default 0)");
  if (env.help) {
    PrintUsage("kernelctl decode --q=q.npy --pool=ID --seq-lens=s.npy --kv-indices=i.npy --kv-indptr=p.npy "
               "--out=o.npy [flags]",
               "Decode attention over a per-head KV pool: each request's new tokens (the last q_lens[b] of its\n"
               "seq_lens[b]) attend causally to its cached keys, GQA when Hq is a multiple of the pool's heads.",
               f);
    return 0;
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  if (absl::Status st = out.Check("decode"); !st.ok()) return Fail(st, 2);
  DecodeAttentionArgs a;
  auto r = ParseRounding(round);
  if (!r.ok()) return Fail(r.status(), 2);
  a.rounding = *r;
  a.softmax_scale = scale;
  a.report_error = report;
  a.pool_id = pool;
  a.output = out.Options();
  a.device = static_cast<int>(device);
  auto t = LoadArg(q, Accept("q", DType::kBf16));
  if (!t.ok()) return Fail(t.status(), 1);
  a.q = std::move(*t);
  if (absl::Status st = LoadPageTables(tables, &a); !st.ok()) return Fail(st, 1);
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  return Finish((*client)->DecodeAttention(a), out.out);
}

// ------------------------------------------------------------------ moe

int CmdMoe(Env& env, const std::vector<std::string>& args) {
  FlagSet f("moe");
  std::string x, ids, weights, w13, w13s, w2, w2s, stage = "layer", round = "rtne";
  bool swiglu = false, weighted = false, report = false;
  int64_t device = 0;
  OutFlags out;
  f.String("x", &x, "FILE.npy", "gateup/layer: tokens [T,K]; down: activations [T*top_k,I] (floats)", true);
  f.String("topk-ids", &ids, "FILE.npy", "int [T,top_k] expert ids", true);
  f.String("topk-weights", &weights, "FILE.npy", "float [T,top_k] routing weights (down --weighted-sum, layer)");
  f.String("w13", &w13, "FILE.npy", "uint8 [E,2I,K/2] packed FP4 gate/up weights");
  f.String("w13-scales", &w13s, "FILE.npy", "uint8 [E,2I,K/32] E8M0 scales");
  f.String("w2", &w2, "FILE.npy", "uint8 [E,N,I/2] packed FP4 down weights");
  f.String("w2-scales", &w2s, "FILE.npy", "uint8 [E,N,I/32] E8M0 scales");
  f.String("stage", &stage, "gateup|down|layer", "which stage to run (default layer)");
  f.Bool("swiglu", &swiglu, "gateup: fused silu(gate)*up epilogue");
  f.Bool("weighted-sum", &weighted, "down: weight by topk_weights and sum per token");
  out.Define(f);
  f.String("round", &round, "rtne|rtna|rtz", "output rounding (default rtne)");
  f.Bool("report-error", &report, "also compute the error against the fp64 oracle");
  f.Int("device", &device, "device index (default 0)");
  if (env.help) {
    PrintUsage("kernelctl moe --stage=gateup|down|layer --x=x.npy --topk-ids=ids.npy [weights] --out=o.npy",
               "MXFP4 mixture of experts. Packed FP4 arrays are uint8 with the last dim halved (element 2i in\n"
               "the low nibble of byte i); scales are uint8 E8M0 exponents, one per 32 elements along K.",
               f);
    return 0;
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  if (absl::Status st = out.Check("moe"); !st.ok()) return Fail(st, 2);
  MoeArgs a;
  if (stage == "gateup") {
    a.stage = MoeStage::kGateUp;
  } else if (stage == "down") {
    a.stage = MoeStage::kDown;
  } else if (stage == "layer") {
    a.stage = MoeStage::kLayer;
  } else {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--stage must be gateup, down or layer, not \"", stage, "\"")), 2);
  }
  // Each stage's weights are flags that only that stage needs: missing ones are usage errors here, not a
  // server INVALID_ARGUMENT after the inputs were read and sent.
  std::vector<std::pair<const std::string*, const char*>> needed;
  if (a.stage != MoeStage::kDown) needed.insert(needed.end(), {{&w13, "--w13"}, {&w13s, "--w13-scales"}});
  if (a.stage != MoeStage::kGateUp) needed.insert(needed.end(), {{&w2, "--w2"}, {&w2s, "--w2-scales"}});
  if (a.stage == MoeStage::kLayer || (a.stage == MoeStage::kDown && weighted)) {
    needed.push_back({&weights, "--topk-weights"});
  }
  for (const auto& [value, flag] : needed) {
    if (value->empty()) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("moe --stage=", stage, weighted ? " --weighted-sum" : "",
                                                          ": missing required flag ", flag)),
                  2);
    }
  }
  auto r = ParseRounding(round);
  if (!r.ok()) return Fail(r.status(), 2);
  a.rounding = *r;
  a.swiglu = swiglu;
  a.weighted_sum = weighted;
  a.report_error = report;
  a.output = out.Options();
  a.device = static_cast<int>(device);
  struct In {
    std::string* path;
    TensorArg* arg;
    NpyAccept accept;
  };
  const In inputs[] = {
      {&x, &a.x, Accept("x", DType::kBf16)},
      {&ids, &a.topk_ids, IndexAccept("topk_ids")},
      {&weights, &a.topk_weights, Accept("topk_weights", DType::kFp32)},
      {&w13, &a.w13, Accept("w13", DType::kInvalid, DType::kFp4E2M1)},
      {&w13s, &a.w13_scales, Accept("w13_scales", DType::kInvalid, DType::kE8M0)},
      {&w2, &a.w2, Accept("w2", DType::kInvalid, DType::kFp4E2M1)},
      {&w2s, &a.w2_scales, Accept("w2_scales", DType::kInvalid, DType::kE8M0)},
  };
  for (const In& in : inputs) {
    if (in.path->empty()) continue;
    auto t = LoadArg(*in.path, in.accept);
    if (!t.ok()) return Fail(t.status(), 1);
    *in.arg = std::move(*t);
  }
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  return Finish((*client)->Moe(a), out.out);
}

// ----------------------------------------------------------------- pools

void PrintPool(const v1::PoolInfo& p) {
  absl::PrintF(
      "%s kind=%s slots=%d page_size=%d dtype=%s row_elements=%d heads=%d head_dim=%d kv_scale=%g size_bytes=%d "
      "rows_written=%d device=%d label=%s\n",
      p.id(), v1::PoolKind_Name(p.kind()), p.num_slots(), p.page_size(), DTypeName(static_cast<DType>(p.dtype())),
      p.row_elements(), p.num_heads(), p.head_dim(), p.kv_scale(), p.size_bytes(), p.rows_written(), p.device(),
      p.label());
}

int CmdPool(Env& env, const std::vector<std::string>& all_args) {
  const std::string about =
      "Server-resident KV pools.\n"
      "  create --kind=mla|per-head --slots=N [--page-size=P] [--dtype=D] [--heads=H --head-dim=D] [--kv-scale=F]\n"
      "  write  --pool=ID --rows=rows.npy --slot-ids=slots.npy [--chunk-rows=N]\n"
      "  read   --pool=ID --out=rows.npy (--slot-ids=slots.npy | --start=S --count=N)\n"
      "  stats  --pool=ID\n"
      "  delete --pool=ID\n"
      "  list\n"
      "Rows of an FP8 pool are uint8 codes [n,row_elements]; of a bf16 pool floats (rounded to bf16).\n"
      "Per-head rows may be [n,2,heads,head_dim]; they are flattened to [n,row_elements].";
  std::string action = all_args.empty() ? "" : all_args[0];
  std::vector<std::string> args(all_args.begin() + (all_args.empty() ? 0 : 1), all_args.end());
  const bool any = env.help;
  std::string kind = "mla", dtype_name, label, pool, rows, slot_ids, out;
  int64_t slots = 0, page_size = 1, heads = 0, head_dim = 0, device = 0, chunk_rows = 0, start = 0, count = 0;
  std::optional<double> kv_scale;
  FlagSet f("pool " + action);
  if (action == "create" || any) {
    f.String("kind", &kind, "mla|per-head", "create: pool kind (default mla: fused 576-wide FP8 rows)");
    f.Int("slots", &slots, "create: number of rows (a multiple of the page size)");
    f.Int("page-size", &page_size, "create: rows per page (default 1)");
    f.String("dtype", &dtype_name, "DTYPE", "create: fp8_e4m3fn (default), fp8_e4m3fnuz, or bf16 (per-head)");
    f.Int("heads", &heads, "create: per-head pools: number of KV heads");
    f.Int("head-dim", &head_dim, "create: per-head pools: head dimension");
    f.Double("kv-scale", &kv_scale, "create: dequantization scale (default 1)");
    f.String("label", &label, "LABEL", "create: a label");
    f.Int("device", &device, "create: device index (default 0)");
  }
  if (action == "write" || action == "read" || action == "stats" || action == "delete" || any) {
    f.String("pool", &pool, "ID", "write/read/stats/delete: the pool id");
  }
  if (action == "write" || any) {
    f.String("rows", &rows, "FILE.npy", "write: rows to write");
    f.Int("chunk-rows", &chunk_rows, "write: rows per streamed message (default: 1 MiB worth)");
  }
  if (action == "write" || action == "read" || any) {
    f.String("slot-ids", &slot_ids, "FILE.npy", "write/read: int [n] slot of each row");
  }
  if (action == "read" || any) {
    f.Int("start", &start, "read: first slot of a range");
    f.Int("count", &count, "read: number of slots in the range");
    f.String("out", &out, "FILE.npy", "read: where to write the rows");
  }
  if (env.help) {
    PrintUsage("kernelctl pool create|write|read|stats|delete|list [flags]", about, f);
    return 0;
  }
  static const char* kActions[] = {"create", "write", "read", "stats", "delete", "list"};
  if (std::find(std::begin(kActions), std::end(kActions), action) == std::end(kActions)) {
    return Fail(absl::InvalidArgumentError(
                    absl::StrCat("pool: expected create, write, read, stats, delete or list, got \"", action, "\"")),
                2);
  }
  if (auto rc = ParseOrFail(f, args)) return *rc;
  auto usage = [&](const std::string& msg) { return Fail(absl::InvalidArgumentError("pool " + action + ": " + msg), 2); };
  if (action != "create" && action != "list" && pool.empty()) return usage("missing required flag --pool");
  if (action == "write" && (rows.empty() || slot_ids.empty())) return usage("needs --rows and --slot-ids");
  if (action == "read" && out.empty()) return usage("missing required flag --out");
  if (action == "read" && slot_ids.empty() && !f.IsSet("count")) return usage("needs --slot-ids or --start/--count");
  PoolSpec spec;
  if (action == "create") {
    if (!f.IsSet("slots")) return usage("missing required flag --slots");
    if (kind == "mla") {
      spec.kind = v1::MLA_FUSED;
    } else if (kind == "per-head") {
      spec.kind = v1::PER_HEAD_KV;
    } else {
      return usage(absl::StrCat("--kind must be mla or per-head, not \"", kind, "\""));
    }
    if (!dtype_name.empty()) {
      auto dt = ParseDType(dtype_name);
      if (!dt.ok()) return Fail(dt.status(), 2);
      spec.dtype = *dt;
    }
    spec.num_slots = slots;
    spec.page_size = static_cast<int>(page_size);
    spec.num_heads = static_cast<int>(heads);
    spec.head_dim = static_cast<int>(head_dim);
    spec.kv_scale = kv_scale.value_or(0);
    spec.label = label;
    spec.device = static_cast<int>(device);
  }
  auto client = env.GetClient();
  if (!client.ok()) return Fail(client.status(), 1);
  Client& c = **client;
  if (action == "create") {
    auto info = c.CreatePool(spec);
    if (!info.ok()) return Fail(info.status(), 1);
    PrintPool(*info);
    return 0;
  }
  if (action == "list") {
    auto list = c.ListPools();
    if (!list.ok()) return Fail(list.status(), 1);
    for (const auto& p : *list) PrintPool(p);
    return 0;
  }
  if (action == "stats") {
    auto info = c.PoolStats(pool);
    if (!info.ok()) return Fail(info.status(), 1);
    PrintPool(*info);
    return 0;
  }
  if (action == "delete") {
    absl::Status st = c.DeletePool(pool);
    if (!st.ok()) return Fail(st, 1);
    std::cout << "deleted " << pool << "\n";
    return 0;
  }
  HostTensor slot_tensor;
  if (!slot_ids.empty()) {
    auto t = ReadNpyTensor(slot_ids, IndexAccept("slot ids"));
    if (!t.ok()) return Fail(t.status(), 1);
    slot_tensor = std::move(*t);
  }
  if (action == "read") {
    auto t = slot_ids.empty() ? c.ReadPoolRange(pool, start, count) : c.ReadPool(pool, slot_tensor);
    if (!t.ok()) return Fail(t.status(), 1);
    if (absl::Status st = WriteNpyTensor(out, *t); !st.ok()) return Fail(st, 1);
    std::cout << "out: " << t->desc().DebugString() << " -> " << out << "\n";
    return 0;
  }
  // write: the pool's dtype decides how the rows file is read.
  auto info = c.PoolStats(pool);
  if (!info.ok()) return Fail(info.status(), 1);
  const DType pool_dtype = static_cast<DType>(info->dtype());
  NpyAccept accept = IsFp8(pool_dtype) ? Accept("rows of an FP8 pool", DType::kInvalid, pool_dtype)
                                       : Accept("rows of a bf16 pool", pool_dtype);
  auto row_tensor = ReadNpyTensor(rows, accept);
  if (!row_tensor.ok()) return Fail(row_tensor.status(), 1);
  if (row_tensor->shape().size() > 2) {
    const int64_t n = row_tensor->shape()[0];
    const int64_t per_row = n > 0 ? row_tensor->num_elements() / n : 0;
    *row_tensor = HostTensor(TensorDesc{row_tensor->dtype(), {n, per_row}}, std::move(row_tensor->storage()));
  }
  auto written = c.WritePool(pool, slot_tensor, *row_tensor, chunk_rows);
  if (!written.ok()) return Fail(written.status(), 1);
  PrintPool(*written);
  return 0;
}

// ------------------------------------------------------------------ main

const std::vector<Command>& Commands() {
  static const auto* commands = [] {
    auto* c = new std::vector<Command>{
      {"devices", "list devices and their state", CmdDevices},
      {"health", "grpc.health.v1 check", CmdHealth},
      {"drain", "admin: drain a device or return it to service", CmdDrain},
      {"probe", "admin: run a device's health probe now (returns an unhealthy device to service)", CmdProbe},
      {"buffers", "list, upload, download and free server buffers", CmdBuffers},
      {"attention", "bf16 attention forward", CmdAttention},
      {"fp8-attention", "FP8 attention (ZYFA block-scaled P)", CmdFp8Attention},
      {"mla-decode", "MLA absorbed decode (bf16 Q, FP8 KV)", CmdMlaDecode},
      {"decode", "decode attention over a per-head KV pool (GQA, paged)", CmdDecode},
      {"moe", "MXFP4 MoE gate/up, down or the whole layer", CmdMoe},
      {"pool", "create, write, read, inspect and delete KV pools", CmdPool},
  };
    // Benchmark jobs live in kernelctl_bench.cc.
    for (const auto& [name, summary] : BenchSubcommands()) {
      c->push_back({name, summary, [name = name](Env& env, const std::vector<std::string>& args) {
                      return RunBenchSubcommand(name, args, env.options, env.help);
                    }});
    }
    return c;
  }();
  return *commands;
}

void PrintMainUsage(std::ostream& os) {
  os << "usage: kernelctl [--server=HOST:PORT] [--timeout=SECONDS] [--token=TOKEN] [--max-message-mb=N]\n"
        "                 SUBCOMMAND [flags]\n\n"
        "global flags:\n"
        "  --server=HOST:PORT   server address (default $KERNELSERVE_SERVER or 127.0.0.1:50051);\n"
        "                       A,B,...: devices, health and jobs list run on each server in turn\n"
        "  --timeout=SECONDS    deadline of each call (default 60)\n"
        "  --token=TOKEN        bearer token (default $KERNELSERVE_TOKEN)\n"
        "  --tls-ca=FILE        TLS: PEM CA that signed the server certificate (turns TLS on)\n"
        "  --tls-cert=FILE      mTLS: PEM client certificate (with --tls-key)\n"
        "  --tls-key=FILE       mTLS: PEM client private key\n"
        "  --lb=round_robin     spread calls over every address of a dns:/// name (stateless calls only:\n"
        "                       buffers and pools live on the node that made them)\n"
        "  --max-message-mb=N   largest gRPC message (default 64); larger tensors travel as buffers\n\n"
        "subcommands:\n";
  for (const Command& c : Commands()) os << absl::StrFormat("  %-14s %s\n", c.name, c.summary);
  os << "  help [CMD]     this text, or a subcommand's flags\n\n"
        "Inputs are .npy files (or buffer:ID); outputs are written as float32 .npy holding the exact bf16 values.\n";
}

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  Env env;
  if (const char* s = std::getenv("KERNELSERVE_SERVER"); s && *s) env.options.target = s;
  if (const char* t = std::getenv("KERNELSERVE_TOKEN"); t && *t) env.options.bearer_token = t;
  // Global flags come before the subcommand.
  size_t i = 0;
  std::vector<std::string> global;
  while (i < args.size() && absl::StartsWith(args[i], "-")) global.push_back(args[i++]);
  FlagSet g("kernelctl");
  std::string server, token, tls_ca, tls_cert, tls_key, lb;
  std::optional<double> timeout;
  int64_t max_mb = 0;
  bool help_flag = false;
  g.String("server", &server, "HOST:PORT", "server address");
  g.Double("timeout", &timeout, "deadline in seconds");
  g.String("token", &token, "TOKEN", "bearer token");
  for (const char* sep : {"-", "_"}) {  // --tls-ca and --tls_ca
    g.String(absl::StrCat("tls", sep, "ca"), &tls_ca, "FILE", "PEM CA of the server certificate");
    g.String(absl::StrCat("tls", sep, "cert"), &tls_cert, "FILE", "PEM client certificate (mTLS)");
    g.String(absl::StrCat("tls", sep, "key"), &tls_key, "FILE", "PEM client key (mTLS)");
  }
  g.String("lb", &lb, "POLICY", "gRPC load-balancing policy (round_robin)");
  g.Int("max-message-mb", &max_mb, "largest gRPC message");
  g.Bool("help", &help_flag, "usage");
  if (absl::Status st = g.Parse(global); !st.ok()) {
    Fail(st, 2);
    PrintMainUsage(std::cerr);
    return 2;
  }
  if (help_flag) {
    PrintMainUsage(std::cout);
    return 0;
  }
  if (!server.empty()) env.options.target = server;
  if (!token.empty()) env.options.bearer_token = token;
  if (!tls_ca.empty() || !tls_cert.empty() || !tls_key.empty()) {
    auto creds = security::ChannelCredentialsFromFiles({tls_ca, tls_cert, tls_key});
    if (!creds.ok()) return Fail(creds.status(), 2);
    env.options.credentials = *creds;
  }
  if (!lb.empty() && lb != "round_robin" && lb != "pick_first") {
    return Fail(absl::InvalidArgumentError("--lb must be round_robin or pick_first"), 2);
  }
  env.options.load_balancing = lb;
  if (timeout) {
    if (!(*timeout > 0)) return Fail(absl::InvalidArgumentError("--timeout must be positive"), 2);
    env.options.default_timeout = absl::Seconds(*timeout);
  }
  if (g.IsSet("max-message-mb")) {
    if (max_mb <= 0 || max_mb > 2047) return Fail(absl::InvalidArgumentError("--max-message-mb must be in 1..2047"), 2);
    env.options.max_message_mb = static_cast<int>(max_mb);
  }
  if (i >= args.size()) {
    std::cerr << "error: INVALID_ARGUMENT: no subcommand given\n";
    PrintMainUsage(std::cerr);
    return 2;
  }
  const std::string name = args[i++];
  std::vector<std::string> rest(args.begin() + i, args.end());
  if (name == "help") {
    if (rest.empty()) {
      PrintMainUsage(std::cout);
      return 0;
    }
    const Command* c = FindCommand(rest[0]);
    if (c == nullptr) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("unknown subcommand \"", rest[0], "\"; try 'kernelctl help'")), 2);
    }
    env.help = true;
    return c->run(env, {});
  }
  const Command* c = FindCommand(name);
  if (c == nullptr) {
    Fail(absl::InvalidArgumentError(absl::StrCat("unknown subcommand \"", name, "\"")), 2);
    PrintMainUsage(std::cerr);
    return 2;
  }
  if (!rest.empty() && (rest[0] == "--help" || rest[0] == "-h")) {
    env.help = true;
    return c->run(env, {});
  }
  // A fleet: --server=A,B,... runs the read-only listings on each server in
  // turn under a "== A ==" header; the exit status is the worst one. (An
  // "ipv4:a,b" / "ipv6:" gRPC target is one balanced channel, not a list.)
  const std::string& target = env.options.target;
  if (absl::StrContains(target, ',') && !absl::StartsWith(target, "ipv4:") &&
      !absl::StartsWith(target, "ipv6:")) {
    const bool listing = name == "devices" || name == "health" ||
                         (name == "jobs" && (rest.empty() || rest[0] == "list" || rest[0] == "variants"));
    if (!listing) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
                      "several --server addresses work with devices, health and jobs list only; "
                      "run \"", name, "\" against one server")),
                  2);
    }
    int worst = 0;
    for (absl::string_view one : absl::StrSplit(target, ',', absl::SkipEmpty())) {
      std::cout << "== " << one << " ==\n" << std::flush;
      Env node;
      node.options = env.options;
      node.options.target = std::string(one);
      worst = std::max(worst, c->run(node, rest));
      std::cout << std::flush;
    }
    return worst;
  }
  return c->run(env, rest);
}

}  // namespace
}  // namespace kernelctl
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::kernelctl::Main(argc, argv); }
