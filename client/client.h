// C++ client library for kernelserve (DESIGN §3).
//
//   ClientOptions opts;
//   opts.target = "gpu-node-3:50051";
//   KS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(opts));
//   AttentionArgs args;
//   args.q = q; args.k = k; args.v = v;  // HostTensors (bf16), or TensorArg::Buffer(id)
//   args.causal = true;
//   KS_ASSIGN_OR_RETURN(OpResult r, client->Attention(args));
//   // r.out is the bf16 output; r.error the error report when requested.
//
// Every call has a deadline (ClientOptions::default_timeout, or CallOptions).
// Host tensors larger than ClientOptions::upload_threshold_bytes are uploaded
// as server buffers in chunks before an op and freed after it, and the op's
// output then comes back through a buffer too, so no single gRPC message
// carries a large tensor. Idempotent calls (Devices, Health, ListBuffers,
// DownloadBuffer, ReadPool, PoolStats, ListPools) are retried on UNAVAILABLE
// with exponential backoff within their deadline; calls that create or change
// server state (uploads, ops, pool writes, frees, deletes) are never retried.
// gRPC status codes and messages are kept as absl::Status codes and messages.
#ifndef KERNELSERVE_CLIENT_CLIENT_H_
#define KERNELSERVE_CLIENT_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/api/error_report.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernelserve/v1/device.pb.h"
#include "kernelserve/v1/pool.pb.h"
#include "kernelserve/v1/tensor.pb.h"

namespace grpc {
class Channel;
class ChannelCredentials;
}  // namespace grpc

namespace kernelserve {

struct ClientOptions {
  std::string target = "127.0.0.1:50051";  // "host:port", "dns:///name:port", ...
  absl::Duration default_timeout = absl::Seconds(60);
  int max_message_mb = 64;                  // send and receive limit per message
  int64_t upload_threshold_bytes = 1 << 20;  // host tensors above this go as buffers
  int64_t chunk_bytes = 1 << 20;             // upload / download / pool-write chunk size
  // Retries of idempotent calls on UNAVAILABLE (attempts after the first).
  int max_retries = 4;
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // Sent as "authorization: Bearer <token>" when not empty.
  std::string bearer_token;
  // nullptr: plaintext (loopback and trusted networks). TLS / mTLS from PEM
  // files: security::ChannelCredentialsFromFiles (//server/security:tls).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // gRPC load-balancing policy; "round_robin" with a "dns:///name:port" target
  // spreads calls over every address of the name. Buffers and pools live on
  // the node that created them, so use it for calls with inline tensors only.
  std::string load_balancing;  // empty: gRPC's default (pick_first)
  // Kernel calls (Attention, Fp8Attention, MlaDecode, Moe, DecodeAttention)
  // as messages on one long-lived KernelService.Session stream, opened by
  // the first call, instead of one unary RPC each: a small call's round trip
  // is about half as long over loopback. Calls then take turns (one kernel
  // call of this Client on the wire at a time: use a Client per thread for
  // calls in parallel); a call whose deadline passes ends the stream, and the
  // next call opens another. Errors are the unary calls' (code and message).
  bool kernel_session = false;
  // With kernel_session and a server on this host (loopback TCP, this
  // process's user or root serving): the session's calls go through a
  // shared-memory ring of this many bytes each way (common/shm_ring.h), a
  // small call's round trip a few futex wake-ups instead of gRPC messages.
  // Where the server refuses the ring (another host or user, a ring over
  // --max_message_mb) the calls stay on the stream. A call whose request or
  // response does not fit is RESOURCE_EXHAUSTED: pass large tensors as
  // buffers. 0: over the stream.
  uint32_t kernel_session_ring_bytes = 0;
  // Buffer uploads of at least this many bytes (UploadBuffer, and large op
  // inputs' temporary buffers), and buffer downloads (DownloadBuffer, large
  // op outputs: their size is known only from the server's answer), to a
  // server at a loopback address (127.0.0.0/8, [::1], localhost), go through
  // a POSIX shared-memory object of this process's (tensor.proto's
  // SharedMemoryRegion) instead of the stream: one memcpy on each side
  // instead of the loopback socket. The server takes it only from a client
  // on its host whose user owns the object. One object, up to 256 MiB, is
  // kept for the next transfer. Where the server refuses (another user,
  // not over loopback TCP) or predates it, the call goes over the stream and
  // so do this Client's later transfers. 0: always over the stream.
  int64_t shared_memory_transfer_min_bytes = 1 << 20;
};

// Per-call overrides.
struct CallOptions {
  absl::Duration timeout = absl::ZeroDuration();  // zero: ClientOptions::default_timeout
};

// An op input: a host tensor (sent inline, or uploaded automatically when
// large) or a server-resident buffer. A TensorArg built from an lvalue
// HostTensor only points at it: keep the tensor alive for the call.
class TensorArg {
 public:
  TensorArg() = default;  // absent
  TensorArg(const HostTensor& t) : host_(&t) {}  // NOLINT: implicit by design
  TensorArg(HostTensor&& t)                      // NOLINT
      : owned_(std::make_shared<HostTensor>(std::move(t))), host_(owned_.get()) {}
  static TensorArg Buffer(std::string id) {
    TensorArg a;
    a.buffer_id_ = std::move(id);
    return a;
  }

  bool present() const { return host_ != nullptr || !buffer_id_.empty(); }
  const HostTensor* host() const { return host_; }
  const std::string& buffer_id() const { return buffer_id_; }

 private:
  std::shared_ptr<HostTensor> owned_;
  const HostTensor* host_ = nullptr;
  std::string buffer_id_;
};

// Where an op's output goes. By default it comes back to the caller (inline,
// or through a temporary buffer when large); with to_buffer it stays on the
// server and OpResult::out_buffer_id names it.
struct OutputOptions {
  bool to_buffer = false;
  std::string label;
};

struct CallInfo {
  std::string backend;
  int device = 0;
  double queue_ms = 0;  // server: waiting for the device worker
  double run_ms = 0;    // server: the op, transfers to and from the device included
  // Measured here, the wall time of the whole call split by phase: uploads of
  // large inputs (automatic temporary buffers), the op's RPC (its inline
  // tensors' transfer, queue_ms and run_ms inside it), and the download of an
  // output that came back through a temporary buffer.
  double upload_ms = 0;
  double rpc_ms = 0;
  double download_ms = 0;
  double wall_ms = 0;
};

struct OpResult {
  HostTensor out;             // empty when the output stayed in a buffer
  std::string out_buffer_id;  // set when OutputOptions::to_buffer
  std::optional<ErrorReport> error;  // when report_error was requested
  CallInfo info;
};

struct AttentionArgs {
  TensorArg q, k, v;  // bf16
  Layout layout = Layout::kBhsd;
  bool causal = false;
  std::optional<double> softmax_scale;
  Rounding rounding = Rounding::kRtne;
  bool report_error = false;
  OutputOptions output;
  int device = 0;
};

struct Fp8AttentionArgs {
  TensorArg q, k, v;  // all bf16, or all FP8 codes of `format` with descales
  TensorArg q_descale, k_descale, v_descale;  // fp32 [1] or [B,H]; FP8 inputs only
  Layout layout = Layout::kBhsd;
  bool causal = true;
  std::optional<double> softmax_scale;
  Fp8Format format = Fp8Format::kE4M3Fn;
  PMode p_mode = PMode::kExact;
  bool hadamard = false;
  DescaleMode descale_mode = DescaleMode::kPerTensor;
  Rounding rounding = Rounding::kRtne;
  bool report_error = false;
  bool report_error_split = false;
  OutputOptions output;
  int device = 0;
};

struct MlaDecodeArgs {
  TensorArg q_lat, q_pe;  // bf16 [B,q_len,H,512], [B,q_len,H,64]
  TensorArg kv;           // contiguous fp8 [B,S,576], or leave absent and name a pool
  std::string pool_id;
  std::optional<double> softmax_scale;
  double kv_scale = 0;  // contiguous only; 0 means 1
  TensorArg seq_lens, kv_indices, kv_indptr, q_lens;  // int32
  int num_splits = 0;
  Rounding rounding = Rounding::kRtne;
  bool report_error = false;
  OutputOptions output;
  int device = 0;
};

// Decode attention over a PER_HEAD_KV pool (kernels/api/ops.h,
// DecodeAttentionParams): new tokens' queries against the pool's rows, read
// where they live through the page tables.
struct DecodeAttentionArgs {
  TensorArg q;  // bf16 [B,q_len,Hq,D], D the pool's head_dim
  std::string pool_id;
  TensorArg seq_lens, kv_indices, kv_indptr;  // int32 [B], [n], [B+1]
  TensorArg q_lens;                           // optional int32 [B], each 1..q_len
  std::optional<double> softmax_scale;        // default 1/sqrt(D)
  Rounding rounding = Rounding::kRtne;
  bool report_error = false;
  OutputOptions output;
  int device = 0;
};

struct MoeArgs {
  MoeStage stage = MoeStage::kLayer;
  TensorArg x;             // gateup/layer [T,K] bf16; down [T*top_k,I] bf16
  TensorArg topk_ids;      // [T,top_k] int32
  TensorArg topk_weights;  // [T,top_k] fp32
  TensorArg w13, w13_scales, w2, w2_scales;  // packed fp4_e2m1 and e8m0
  bool swiglu = false;
  bool weighted_sum = false;
  Rounding rounding = Rounding::kRtne;
  bool report_error = false;
  OutputOptions output;
  int device = 0;
};

struct PoolSpec {
  v1::PoolKind kind = v1::MLA_FUSED;
  int64_t num_slots = 0;
  int page_size = 1;
  DType dtype = DType::kFp8E4M3Fn;
  int num_heads = 0;  // per-head pools
  int head_dim = 0;
  double kv_scale = 0;  // 0 means 1
  std::string label;
  int device = 0;
};

enum class HealthState { kUnknown, kServing, kNotServing };
std::string HealthStateName(HealthState s);

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const { return options_; }

  // ------------------------------------------------------------ devices
  absl::StatusOr<v1::ListDevicesResponse> Devices(const CallOptions& call = {});
  // grpc.health.v1 Check; `service` "" is the whole server.
  absl::StatusOr<HealthState> Health(const std::string& service = "", const CallOptions& call = {});
  // Admin only: drain device `index` (new work refused) or, with undrain, return it to service.
  absl::StatusOr<v1::Device> DrainDevice(int index, bool undrain, const std::string& reason = "",
                                         const CallOptions& call = {});
  // Admin only: run device `index`'s health probe now; a pass returns an unhealthy device to service.
  absl::StatusOr<v1::ProbeDeviceResponse> ProbeDevice(int index, const CallOptions& call = {});

  // ------------------------------------------------------------ buffers
  // Uploads in chunks of ClientOptions::chunk_bytes (client streaming).
  absl::StatusOr<v1::BufferInfo> UploadBuffer(const HostTensor& t, const std::string& label = "",
                                              int device = 0, const CallOptions& call = {});
  absl::StatusOr<HostTensor> DownloadBuffer(const std::string& id, const CallOptions& call = {});
  absl::Status FreeBuffer(const std::string& id, const CallOptions& call = {});
  absl::StatusOr<std::vector<v1::BufferInfo>> ListBuffers(const CallOptions& call = {});

  // ---------------------------------------------------------------- ops
  absl::StatusOr<OpResult> Attention(const AttentionArgs& args, const CallOptions& call = {});
  absl::StatusOr<OpResult> Fp8Attention(const Fp8AttentionArgs& args, const CallOptions& call = {});
  absl::StatusOr<OpResult> MlaDecode(const MlaDecodeArgs& args, const CallOptions& call = {});
  absl::StatusOr<OpResult> Moe(const MoeArgs& args, const CallOptions& call = {});
  absl::StatusOr<OpResult> DecodeAttention(const DecodeAttentionArgs& args, const CallOptions& call = {});

  // -------------------------------------------------------------- pools
  absl::StatusOr<v1::PoolInfo> CreatePool(const PoolSpec& spec, const CallOptions& call = {});
  // Streams rows [n, row_elements] (pool dtype) into `slots` [n] (int32 or
  // int64), `rows_per_chunk` rows per message (0: as many as fit chunk_bytes).
  absl::StatusOr<v1::PoolInfo> WritePool(const std::string& pool_id, const HostTensor& slots,
                                         const HostTensor& rows, int64_t rows_per_chunk = 0,
                                         const CallOptions& call = {});
  // Reads the listed slots (int32/int64 [n]) back as [n, row_elements].
  absl::StatusOr<HostTensor> ReadPool(const std::string& pool_id, const HostTensor& slots,
                                      const CallOptions& call = {});
  // Reads rows [start, start + count).
  absl::StatusOr<HostTensor> ReadPoolRange(const std::string& pool_id, int64_t start, int64_t count,
                                           const CallOptions& call = {});
  absl::StatusOr<v1::PoolInfo> PoolStats(const std::string& pool_id, const CallOptions& call = {});
  absl::Status DeletePool(const std::string& pool_id, const CallOptions& call = {});
  absl::StatusOr<std::vector<v1::PoolInfo>> ListPools(const CallOptions& call = {});

  // Buffers the client uploaded on its own and could not free (e.g. the
  // server went away mid-call); exposed for tests and diagnostics.
  int64_t leaked_temp_buffers() const { return leaked_temp_buffers_; }
  // KernelService.Session streams this client has opened (kernel_session);
  // a failed call leaves its stream open, a broken stream is replaced.
  int64_t kernel_sessions_opened() const;
  // Whether the open session's calls go through a shared-memory ring.
  bool kernel_session_ring_attached() const;
  // Whether buffer transfers may still go through shared memory
  // (shared_memory_transfer_min_bytes, a loopback target, not refused yet).
  bool shared_memory_transfers() const;

  struct Impl;

 private:
  Client(const ClientOptions& options, std::unique_ptr<Impl> impl);

  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
  int64_t leaked_temp_buffers_ = 0;
};

// Conversions between kernels/api tensors and proto tensors (exposed for tools).
v1::Tensor ToProtoTensor(const HostTensor& t);
absl::StatusOr<HostTensor> FromProtoTensor(const v1::Tensor& t);
std::string ErrorReportString(const ErrorReport& e);
std::string CallInfoString(const CallInfo& info);
// "wall_ms=..: upload_ms=.. queue_ms=.. run_ms=.. transfer_ms=.. download_ms=..": where a call's time went.
std::string WallSplitString(const CallInfo& info);

}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_CLIENT_H_
