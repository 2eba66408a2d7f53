#include "client/client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/kernel_session.h"
#include "common/grpc_wire.h"
#include "common/huge_pages.h"
#include "common/shm_region.h"
#include "common/status_macros.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/pool.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/status_mapping.h"

namespace kernelserve {

struct Client::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::DeviceService::Stub> devices;
  std::unique_ptr<v1::BufferService::Stub> buffers;
  std::unique_ptr<v1::KernelService::Stub> kernels;
  std::unique_ptr<v1::PoolService::Stub> pools;
  std::unique_ptr<grpc::GenericStub> generic;
  std::unique_ptr<KernelSession> session;  // ClientOptions::kernel_session
  // ClientOptions::shared_memory_transfer_min_bytes: whether buffer transfers
  // may go through shared memory (cleared for good once the server refuses),
  // and the region kept for the next one.
  std::atomic<bool> shm{false};
  absl::Mutex shm_mu;
  std::optional<ShmRegion> shm_kept ABSL_GUARDED_BY(shm_mu);
};

namespace {

// Cleanup of temporary buffers gets its own deadline so it still runs after
// the call itself ran out of time.
constexpr absl::Duration kCleanupTimeout = absl::Seconds(10);

int64_t ResolveChunk(int64_t chunk) { return chunk > 0 ? chunk : (1 << 20); }

v1::Rounding ToProto(Rounding r) { return static_cast<v1::Rounding>(static_cast<int>(r)); }
v1::Layout ToProto(Layout l) { return static_cast<v1::Layout>(static_cast<int>(l)); }
v1::Fp8Format ToProto(Fp8Format f) { return static_cast<v1::Fp8Format>(static_cast<int>(f)); }
v1::PMode ToProto(PMode m) { return static_cast<v1::PMode>(static_cast<int>(m)); }
v1::DescaleMode ToProto(DescaleMode m) { return static_cast<v1::DescaleMode>(static_cast<int>(m)); }
v1::MoeStage ToProto(MoeStage s) { return static_cast<v1::MoeStage>(static_cast<int>(s)); }

ErrorReport FromProto(const v1::ErrorReport& e) {
  ErrorReport r;
  r.rel_rms = e.rel_rms();
  r.max_abs = e.max_abs();
  r.nonfinite = e.nonfinite();
  r.has_split = e.has_split();
  r.input_quant = e.input_quant();
  r.p_quant = e.p_quant();
  r.rest = e.rest();
  return r;
}

CallInfo FromProto(const v1::CallInfo& c) {
  CallInfo i;
  i.backend = c.backend();
  i.device = c.device();
  i.queue_ms = c.queue_ms();
  i.run_ms = c.run_ms();
  return i;
}

}  // namespace

// ------------------------------------------------------------ conversions

v1::Tensor ToProtoTensor(const HostTensor& t) {
  v1::Tensor p;
  p.set_dtype(static_cast<v1::DType>(static_cast<int>(t.dtype())));
  for (int64_t d : t.shape()) p.add_shape(d);
  p.set_data(reinterpret_cast<const char*>(t.bytes()), static_cast<size_t>(t.num_bytes()));
  return p;
}

absl::StatusOr<HostTensor> FromProtoTensor(const v1::Tensor& t) {
  if (!IsValidDType(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("tensor has an invalid dtype ", t.dtype()));
  }
  TensorDesc desc{static_cast<DType>(t.dtype()), Shape(t.shape().begin(), t.shape().end())};
  const int64_t need = desc.num_bytes();
  if (need < 0 || static_cast<size_t>(need) != t.data().size()) {
    return absl::DataLossError(absl::StrCat("tensor ", desc.DebugString(), " carries ", t.data().size(),
                                            " bytes, expected ", need));
  }
  std::vector<uint8_t> bytes(t.data().begin(), t.data().end());
  return HostTensor(std::move(desc), std::move(bytes));
}

std::string ErrorReportString(const ErrorReport& e) {
  std::string s = absl::StrFormat("rel_rms=%.6g max_abs=%.6g nonfinite=%d", e.rel_rms, e.max_abs, e.nonfinite);
  if (e.has_split) {
    absl::StrAppendFormat(&s, " input_quant=%.6g p_quant=%.6g rest=%.6g", e.input_quant, e.p_quant, e.rest);
  }
  return s;
}

std::string CallInfoString(const CallInfo& i) {
  return absl::StrFormat("backend=%s device=%d queue_ms=%.3f run_ms=%.3f", i.backend, i.device, i.queue_ms,
                         i.run_ms);
}

std::string WallSplitString(const CallInfo& i) {
  // The RPC holds the server's queue and run time; what is left of it is the
  // transfer of inline tensors, (de)serialization and the network.
  return absl::StrFormat(
      "wall_ms=%.3f: upload_ms=%.3f queue_ms=%.3f run_ms=%.3f transfer_ms=%.3f download_ms=%.3f", i.wall_ms,
      i.upload_ms, i.queue_ms, i.run_ms, std::max(0.0, i.rpc_ms - i.queue_ms - i.run_ms), i.download_ms);
}

std::string HealthStateName(HealthState s) {
  switch (s) {
    case HealthState::kServing: return "SERVING";
    case HealthState::kNotServing: return "NOT_SERVING";
    default: return "UNKNOWN";
  }
}

// ------------------------------------------------------------------ core

namespace {

// Whether a channel target names this host by a loopback address:
// "127.x.x.x:PORT", "[::1]:PORT", "localhost:PORT", with or without a
// "dns:///", "ipv4:" or "ipv6:" scheme.
bool IsLoopbackTarget(absl::string_view target) {
  for (absl::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&target, scheme)) break;
  }
  absl::string_view host = target;
  if (absl::ConsumePrefix(&host, "[")) {
    host = host.substr(0, host.find(']'));
  } else if (host != "::1" && host.rfind(':') != absl::string_view::npos) {
    host = host.substr(0, host.rfind(':'));
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace

Client::Client(const ClientOptions& options, std::unique_ptr<Impl> impl)
    : options_(options), impl_(std::move(impl)) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("client: empty target");
  if (options.max_message_mb <= 0 || options.max_message_mb > 2047) {
    return absl::InvalidArgumentError("client: max_message_mb must be in 1..2047");
  }
  if (options.default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("client: default_timeout must be positive");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_mb << 20);
  args.SetMaxSendMessageSize(options.max_message_mb << 20);
  // Reconnect on the client's own retry schedule rather than gRPC's 1 s+ default.
  const int backoff_ms = static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(options.initial_backoff)));
  const int max_backoff_ms = static_cast<int>(std::max<int64_t>(backoff_ms, absl::ToInt64Milliseconds(options.max_backoff)));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, backoff_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, backoff_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_backoff_ms);
  // The client retries idempotent calls itself; gRPC's own retries would hide that.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  if (!options.load_balancing.empty()) args.SetLoadBalancingPolicyName(options.load_balancing);
  std::shared_ptr<grpc::ChannelCredentials> creds =
      options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  auto impl = std::make_unique<Impl>();
  impl->channel = grpc::CreateCustomChannel(options.target, creds, args);
  if (!impl->channel) return absl::InternalError(absl::StrCat("client: cannot create a channel to ", options.target));
  impl->devices = v1::DeviceService::NewStub(impl->channel);
  impl->buffers = v1::BufferService::NewStub(impl->channel);
  impl->kernels = v1::KernelService::NewStub(impl->channel);
  impl->pools = v1::PoolService::NewStub(impl->channel);
  impl->generic = std::make_unique<grpc::GenericStub>(impl->channel);
  impl->shm = options.shared_memory_transfer_min_bytes > 0 && IsLoopbackTarget(options.target);
  if (options.kernel_session) {
    impl->session = std::make_unique<KernelSession>(impl->kernels.get(), options.bearer_token,
                                                    options.kernel_session_ring_bytes);
  }
  return std::unique_ptr<Client>(new Client(options, std::move(impl)));
}

namespace {

struct CallCtx {
  absl::Time deadline;
  const ClientOptions* options;

  std::unique_ptr<grpc::ClientContext> NewContext() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(deadline));
    if (!options->bearer_token.empty()) {
      ctx->AddMetadata("authorization", absl::StrCat("Bearer ", options->bearer_token));
    }
    return ctx;
  }
};

CallCtx MakeCtx(const ClientOptions& o, const CallOptions& call) {
  const absl::Duration t = call.timeout > absl::ZeroDuration() ? call.timeout : o.default_timeout;
  return CallCtx{absl::Now() + t, &o};
}

// Runs `attempt` (one RPC with a fresh context) and retries it on UNAVAILABLE
// with exponential backoff while the deadline allows. Idempotent calls only.
absl::Status WithRetry(const CallCtx& c, const std::function<grpc::Status(grpc::ClientContext*)>& attempt) {
  absl::Duration backoff = c.options->initial_backoff;
  for (int i = 0;; ++i) {
    auto ctx = c.NewContext();
    grpc::Status s = attempt(ctx.get());
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || i >= c.options->max_retries ||
        absl::Now() + backoff >= c.deadline) {
      return FromGrpcStatus(s);
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, c.options->max_backoff);
  }
}

absl::Status Once(const CallCtx& c, const std::function<grpc::Status(grpc::ClientContext*)>& attempt) {
  auto ctx = c.NewContext();
  return FromGrpcStatus(attempt(ctx.get()));
}

// A kernel call: its unary RPC, or with ClientOptions::kernel_session a
// message on the session (`slot` / `result`: the request's and response's
// fields of the session's oneof). `req` is spent either way.
template <typename Req, typename Resp>
absl::Status KernelCall(Client::Impl& impl, const CallCtx& c, Req* req, Resp* resp,
                        grpc::Status (v1::KernelService::Stub::*unary)(grpc::ClientContext*, const Req&, Resp*),
                        Req* (v1::SessionRequest::*slot)(), Resp* (v1::SessionResponse::*result)()) {
  if (impl.session == nullptr) {
    return Once(c, [&](grpc::ClientContext* ctx) { return (impl.kernels.get()->*unary)(ctx, *req, resp); });
  }
  v1::SessionRequest sreq;
  *(sreq.*slot)() = std::move(*req);
  KS_ASSIGN_OR_RETURN(v1::SessionResponse sresp, impl.session->Call(&sreq, c.deadline));
  *resp = std::move(*(sresp.*result)());
  return absl::OkStatus();
}

// ---- buffer helpers shared by the public calls and the ops' temporaries.

// Counts gRPC's references to the caller's memory that an upload's
// messages point at, so that the upload returns only once none is left.
class PayloadRefs {
 public:
  // A slice of `data` that is not copied; released through this object.
  grpc::Slice Slice(const uint8_t* data, size_t n) {
    absl::MutexLock lock(&mu_);
    ++live_;
    return grpc::Slice(const_cast<uint8_t*>(data), n, &PayloadRefs::Release, this);
  }
  void WaitForNone() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](int* live) { return *live == 0; }, &live_));
  }

 private:
  static void Release(void* self) {
    auto* refs = static_cast<PayloadRefs*>(self);
    absl::MutexLock lock(&refs->mu_);
    --refs->live_;
  }
  absl::Mutex mu_;
  int live_ = 0;
};

// ---- transfers through shared memory (shared_memory_transfer_min_bytes).

// The largest region kept for the next transfer: what it holds stays in the
// host's memory (/dev/shm) while this Client lives.
constexpr int64_t kMaxKeptRegionBytes = 256 << 20;

// A region of at least `bytes`: the one kept from the last transfer (its
// pages already faulted in, which on a fresh object cost more than the copy
// itself), or a fresh one.
absl::StatusOr<ShmRegion> TakeRegion(Client::Impl& impl, int64_t bytes) {
  {
    absl::MutexLock lock(&impl.shm_mu);
    if (impl.shm_kept.has_value() && impl.shm_kept->size() >= bytes) {
      ShmRegion r = std::move(*impl.shm_kept);
      impl.shm_kept.reset();
      return r;
    }
  }
  return ShmRegion::Create(bytes);
}

// Keeps a region for the next transfer, only after a call that succeeded (a
// failed one may have left the server still reading or writing it).
void KeepRegion(Client::Impl& impl, ShmRegion region) {
  if (region.size() > kMaxKeptRegionBytes) return;
  absl::MutexLock lock(&impl.shm_mu);
  if (!impl.shm_kept.has_value() || impl.shm_kept->size() < region.size()) impl.shm_kept = std::move(region);
}

// Whether `s`, a transfer's answer, says the server takes no shared memory
// from this client: another host or user (its FAILED_PRECONDITION,
// PERMISSION_DENIED or NOT_FOUND naming the shm field), or a server that
// predates the field (it saw an upload without data). This Client's
// transfers then go over the stream.
bool ShmRefused(Client::Impl& impl, const absl::Status& s) {
  const bool about_shm = absl::StrContains(s.message(), "shm");
  bool refused = false;
  switch (s.code()) {
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kNotFound:
      refused = about_shm;
      break;
    case absl::StatusCode::kInvalidArgument:
      refused = !about_shm && absl::StartsWith(s.message(), "data: ");
      break;
    default:
      break;
  }
  if (refused) impl.shm = false;
  return refused;
}

// An upload through shared memory: the tensor copied into a region, the
// stream one header naming it. nullopt: send it over the stream instead.
std::optional<absl::StatusOr<v1::BufferInfo>> UploadThroughShm(Client::Impl& impl, const CallCtx& c,
                                                               const HostTensor& t, v1::UploadHeader h) {
  if (!impl.shm.load() || t.num_bytes() < c.options->shared_memory_transfer_min_bytes) return std::nullopt;
  absl::StatusOr<ShmRegion> region = TakeRegion(impl, t.num_bytes());
  if (!region.ok()) {
    impl.shm = false;  // this host has no shared memory to give
    return std::nullopt;
  }
  h.mutable_shm()->set_shm_name(region->name());
  v1::UploadChunk message;
  *message.mutable_header() = std::move(h);
  v1::BufferInfo info;
  auto ctx = c.NewContext();
  std::unique_ptr<grpc::ClientWriter<v1::UploadChunk>> writer = impl.buffers->Upload(ctx.get(), &info);
  // The header first: the server prepares the buffer's memory while the
  // bytes are copied in, and reads them once the stream ends.
  writer->Write(message);
  std::memcpy(region->data(), t.bytes(), static_cast<size_t>(t.num_bytes()));
  writer->WritesDone();
  const absl::Status s = FromGrpcStatus(writer->Finish());
  if (s.ok()) {
    KeepRegion(impl, std::move(*region));
    return info;
  }
  if (ShmRefused(impl, s)) return std::nullopt;
  return s;
}

// One download attempt into `region`: the tensor, or the server's status
// with *needed set from its kShmBufferBytesTrailer. *streamed: the server
// sent data instead (it predates the field); the call was cancelled.
grpc::Status DownloadIntoRegion(Client::Impl& impl, grpc::ClientContext* ctx, const std::string& id,
                                const ShmRegion& region, HostTensor* out, int64_t* needed, bool* streamed) {
  v1::DownloadRequest req;
  req.set_buffer_id(id);
  req.mutable_shm()->set_shm_name(region.name());
  std::unique_ptr<grpc::ClientReader<v1::DownloadChunk>> reader = impl.buffers->Download(ctx, req);
  v1::DownloadChunk chunk;
  std::optional<TensorDesc> desc;
  std::vector<uint8_t> bytes;
  while (reader->Read(&chunk)) {
    const v1::BufferInfo& info = chunk.info();
    const TensorDesc got{static_cast<DType>(info.dtype()), Shape(info.shape().begin(), info.shape().end())};
    const int64_t n = chunk.has_info() ? got.num_bytes() : -1;
    if (desc.has_value() || !chunk.data().empty() || n < 0 || n > region.size()) {
      *streamed = true;  // data chunks (or nothing this client can use): an older server's answer
      ctx->TryCancel();
      reader->Finish();
      return grpc::Status::OK;
    }
    desc = got;
    // The destination's pages faulted in while the server writes the region.
    bytes.reserve(static_cast<size_t>(n));
    AdviseHugePages(bytes.data(), static_cast<size_t>(n));
    PrefaultPages(bytes.data(), static_cast<size_t>(n));
  }
  const grpc::Status s = reader->Finish();
  for (const auto& [key, value] : ctx->GetServerTrailingMetadata()) {
    if (key == kShmBufferBytesTrailer) (void)absl::SimpleAtoi(absl::string_view(value.data(), value.size()), needed);
  }
  if (!s.ok()) return s;
  if (!desc.has_value()) {
    *streamed = true;  // no answer at all: an older server's for a 0-byte buffer
    return s;
  }
  bytes.insert(bytes.end(), region.data(), region.data() + desc->num_bytes());
  *out = HostTensor(std::move(*desc), std::move(bytes));
  return grpc::Status::OK;
}

// A download through shared memory: the kept region (or a fresh one of
// shared_memory_transfer_min_bytes) offered first, one of the buffer's
// size when the server says that one is too small. nullopt: download it
// over the stream instead.
std::optional<absl::StatusOr<HostTensor>> DownloadThroughShm(Client::Impl& impl, const CallCtx& c,
                                                             const std::string& id) {
  int64_t want = c.options->shared_memory_transfer_min_bytes;
  for (int attempt = 0; impl.shm.load() && attempt < 2; ++attempt) {
    absl::StatusOr<ShmRegion> region = TakeRegion(impl, want);
    if (!region.ok()) break;
    HostTensor out;
    int64_t needed = -1;
    bool streamed = false;
    const absl::Status s = WithRetry(c, [&](grpc::ClientContext* ctx) {
      return DownloadIntoRegion(impl, ctx, id, *region, &out, &needed, &streamed);
    });
    if (streamed) break;
    if (s.ok()) {
      KeepRegion(impl, std::move(*region));
      return out;
    }
    if (s.code() == absl::StatusCode::kInvalidArgument && needed > region->size()) {
      want = needed;
      continue;
    }
    if (ShmRefused(impl, s)) return std::nullopt;
    return s;
  }
  impl.shm = false;
  return std::nullopt;
}

// Each message is the header's bytes (first message only) and the chunk's
// bytes referenced in the caller's tensor, in UploadChunk's wire format.
absl::StatusOr<v1::BufferInfo> DoUpload(Client::Impl& impl, const CallCtx& c, const HostTensor& t,
                                        const std::string& label, int device) {
  constexpr int kHeaderField = 1, kDataField = 2;  // tensor.proto's UploadChunk
  const int64_t need = t.desc().num_bytes();
  if (need < 0 || need != t.num_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("upload: tensor ", t.desc().DebugString(), " holds ",
                                                   t.num_bytes(), " bytes, expected ", need));
  }
  v1::UploadHeader h;
  h.set_dtype(static_cast<v1::DType>(static_cast<int>(t.dtype())));
  for (int64_t d : t.shape()) h.add_shape(d);
  h.set_label(label);
  h.set_device(device);
  if (auto shm = UploadThroughShm(impl, c, t, h)) return *std::move(shm);
  std::string header;
  wire::AppendLengthPrefix(kHeaderField, h.ByteSizeLong(), &header);
  h.AppendToString(&header);

  PayloadRefs refs;  // outlives the call and everything gRPC kept of it
  grpc::ByteBuffer response;
  grpc::Status s;
  {
    auto ctx = c.NewContext();
    static const grpc::internal::RpcMethod kUpload("/kernelserve.v1.BufferService/Upload",
                                                   grpc::internal::RpcMethod::CLIENT_STREAMING);
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(impl.channel.get(), kUpload, ctx.get(),
                                                                       &response));
    const int64_t chunk = ResolveChunk(c.options->chunk_bytes);
    int64_t off = 0;
    bool first = true;
    bool ok = true;
    while (ok && (first || off < t.num_bytes())) {
      const int64_t n = std::min(chunk, t.num_bytes() - off);
      grpc::ByteBuffer msg = wire::WithBytesField(first ? header : std::string(), kDataField,
                                                  refs.Slice(t.bytes() + off, static_cast<size_t>(n)));
      first = false;
      off += n;
      ok = writer->Write(msg);
    }
    writer->WritesDone();
    s = writer->Finish();
  }
  refs.WaitForNone();
  if (!s.ok()) return FromGrpcStatus(s);
  v1::BufferInfo info;
  if (!grpc::SerializationTraits<v1::BufferInfo>::Deserialize(&response, &info).ok()) {
    return absl::DataLossError("upload: the server's response is not a BufferInfo");
  }
  return info;
}

absl::StatusOr<HostTensor> DoDownload(Client::Impl& impl, const CallCtx& c, const std::string& id) {
  if (impl.shm.load()) {
    if (auto shm = DownloadThroughShm(impl, c, id)) return *std::move(shm);
  }
  HostTensor result;
  absl::Status st = WithRetry(c, [&](grpc::ClientContext* ctx) -> grpc::Status {
    v1::DownloadRequest req;
    req.set_buffer_id(id);
    req.set_chunk_bytes(ResolveChunk(c.options->chunk_bytes));
    // Read as raw messages, so each chunk's bytes are copied once, from
    // the received slices into the result.
    constexpr int kInfoField = 1, kOffsetField = 2, kDataField = 3;  // tensor.proto's DownloadChunk
    static const grpc::internal::RpcMethod kDownload("/kernelserve.v1.BufferService/Download",
                                                     grpc::internal::RpcMethod::SERVER_STREAMING);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(impl.channel.get(), kDownload, ctx, req));
    grpc::ByteBuffer raw;
    wire::WireMessage chunk;
    bool have_info = false;
    TensorDesc desc;
    std::vector<uint8_t> bytes;
    int64_t expected = 0, received = 0;
    while (reader->Read(&raw)) {
      absl::Status parsed = chunk.Parse(raw, "download: a chunk is not a DownloadChunk");
      if (!parsed.ok()) {
        ctx->TryCancel();
        reader->Finish();
        return grpc::Status(grpc::StatusCode::DATA_LOSS, std::string(parsed.message()));
      }
      if (!have_info) {
        v1::BufferInfo info;
        if (!chunk.Has(kInfoField) || !info.ParseFromString(chunk.Concatenated(kInfoField))) {
          ctx->TryCancel();
          reader->Finish();
          return grpc::Status(grpc::StatusCode::DATA_LOSS, "download: first chunk lacks the buffer info");
        }
        desc = TensorDesc{static_cast<DType>(info.dtype()), Shape(info.shape().begin(), info.shape().end())};
        expected = desc.num_bytes();
        if (expected < 0) {
          ctx->TryCancel();
          reader->Finish();
          return grpc::Status(grpc::StatusCode::DATA_LOSS, "download: buffer info has an invalid shape");
        }
        // Reserved, not resized: the chunks arrive in order and are
        // appended, so each page is written once (no zero fill first). A
        // fresh destination's page faults cost more than the copy into it:
        // in huge pages, 512 times fewer.
        bytes.reserve(static_cast<size_t>(expected));
        AdviseHugePages(bytes.data(), static_cast<size_t>(expected));
        have_info = true;
      }
      const auto off = static_cast<int64_t>(chunk.Varint(kOffsetField));
      const int64_t n = chunk.BytesSize(kDataField);
      if (off < 0 || off + n > expected) {
        ctx->TryCancel();
        reader->Finish();
        return grpc::Status(grpc::StatusCode::DATA_LOSS,
                            absl::StrCat("download: chunk at offset ", off, " of ", n, " bytes overruns ", expected));
      }
      if (off != static_cast<int64_t>(bytes.size()) && static_cast<int64_t>(bytes.size()) < off + n) {
        bytes.resize(static_cast<size_t>(off + n));
      }
      int64_t at = off;
      for (absl::string_view p : chunk.Bytes(kDataField)) {
        const auto* src = reinterpret_cast<const uint8_t*>(p.data());
        if (at == static_cast<int64_t>(bytes.size())) {
          bytes.insert(bytes.end(), src, src + p.size());
        } else {
          std::memcpy(bytes.data() + at, src, p.size());
        }
        at += static_cast<int64_t>(p.size());
      }
      received += n;
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) return s;
    if (!have_info) return grpc::Status(grpc::StatusCode::DATA_LOSS, "download: the server sent no chunks");
    if (received != expected || static_cast<int64_t>(bytes.size()) != expected) {
      return grpc::Status(grpc::StatusCode::DATA_LOSS,
                          absl::StrCat("download: received ", received, " of ", expected, " bytes"));
    }
    result = HostTensor(std::move(desc), std::move(bytes));
    return grpc::Status::OK;
  });
  if (!st.ok()) return st;
  return result;
}

absl::Status DoFree(Client::Impl& impl, const CallCtx& c, const std::string& id) {
  return Once(c, [&](grpc::ClientContext* ctx) {
    v1::FreeBufferRequest req;
    req.set_buffer_id(id);
    v1::FreeBufferResponse resp;
    return impl.buffers->Free(ctx, req, &resp);
  });
}

// Temporary buffers of one op call, freed when it goes out of scope.
class TempBuffers {
 public:
  TempBuffers(Client::Impl& impl, const ClientOptions& o, int64_t* leaked)
      : impl_(impl), options_(o), leaked_(leaked), start_(absl::Now()) {}
  ~TempBuffers() {
    for (const std::string& id : ids_) {
      CallCtx c{absl::Now() + kCleanupTimeout, &options_};
      if (!DoFree(impl_, c, id).ok()) ++*leaked_;
    }
  }
  void Add(std::string id) { ids_.push_back(std::move(id)); }
  bool empty() const { return ids_.empty(); }
  // The call's wall-time phases (CallInfo): the op's clock starts with it.
  absl::Time start() const { return start_; }
  absl::Duration upload;

 private:
  Client::Impl& impl_;
  const ClientOptions& options_;
  int64_t* leaked_;
  std::vector<std::string> ids_;
  absl::Time start_;
};

// Fills `ref` from `arg`: buffer id, inline tensor, or an automatic upload.
absl::Status SetRef(Client::Impl& impl, const CallCtx& c, const TensorArg& arg, int device,
                    TempBuffers& temps, v1::TensorRef* ref, bool* uploaded) {
  if (!arg.buffer_id().empty()) {
    ref->set_buffer_id(arg.buffer_id());
    return absl::OkStatus();
  }
  const HostTensor* t = arg.host();
  if (t == nullptr) return absl::OkStatus();
  if (t->num_bytes() > c.options->upload_threshold_bytes) {
    const absl::Time start = absl::Now();
    KS_ASSIGN_OR_RETURN(v1::BufferInfo info, DoUpload(impl, c, *t, "kernelserve-client-temp", device));
    temps.upload += absl::Now() - start;
    temps.Add(info.id());
    ref->set_buffer_id(info.id());
    *uploaded = true;
    return absl::OkStatus();
  }
  *ref->mutable_tensor() = ToProtoTensor(*t);
  return absl::OkStatus();
}

// Collects an op's output: inline tensor, the caller's buffer, or a
// temporary buffer to download and free.
absl::StatusOr<OpResult> FinishOp(Client::Impl& impl, const CallCtx& c, const OutputOptions& out_opts,
                                  bool output_via_temp, const v1::TensorRef& out, bool has_error,
                                  const v1::ErrorReport& error, const v1::CallInfo& info,
                                  TempBuffers& temps) {
  OpResult r;
  if (has_error) r.error = FromProto(error);
  r.info = FromProto(info);
  const absl::Time rpc_done = absl::Now();
  r.info.upload_ms = absl::ToDoubleMilliseconds(temps.upload);
  r.info.rpc_ms = absl::ToDoubleMilliseconds(rpc_done - temps.start() - temps.upload);
  auto finish = [&]() {
    r.info.wall_ms = absl::ToDoubleMilliseconds(absl::Now() - temps.start());
    r.info.download_ms = absl::ToDoubleMilliseconds(absl::Now() - rpc_done);
  };
  if (out.has_tensor()) {
    KS_ASSIGN_OR_RETURN(r.out, FromProtoTensor(out.tensor()));
    finish();
    return r;
  }
  if (out.buffer_id().empty()) return absl::DataLossError("op response carries no output");
  if (out_opts.to_buffer) {
    r.out_buffer_id = out.buffer_id();
    finish();
    return r;
  }
  if (output_via_temp) temps.Add(out.buffer_id());
  KS_ASSIGN_OR_RETURN(r.out, DoDownload(impl, c, out.buffer_id()));
  finish();
  return r;
}

int64_t HostBytes(const TensorArg& a) { return a.host() ? a.host()->num_bytes() : 0; }

// The fields every op request shares (rounding, report_error, device, output).
// Returns whether the output comes back through a temporary buffer: when
// `large` (an input went as a buffer, or the output is over the threshold)
// and the caller did not keep it in a buffer of its own.
template <typename Args, typename Req>
bool SetCommonFields(const Args& a, bool large, Req* req) {
  req->set_rounding(ToProto(a.rounding));
  req->set_report_error(a.report_error);
  req->set_device(a.device);
  const bool via_temp = !a.output.to_buffer && large;
  req->mutable_output()->set_to_buffer(a.output.to_buffer || via_temp);
  req->mutable_output()->set_label(a.output.label);
  return via_temp;
}

// The index tensors of a decode call on a pool, those present.
template <typename Args, typename Req>
absl::Status SetPageTables(Client::Impl& impl, const CallCtx& c, const Args& a, TempBuffers& temps, Req* req,
                           bool* uploaded) {
  const std::pair<const TensorArg*, v1::TensorRef*> refs[] = {
      {&a.seq_lens, req->mutable_seq_lens()},
      {&a.kv_indices, req->mutable_kv_indices()},
      {&a.kv_indptr, req->mutable_kv_indptr()},
      {&a.q_lens, req->mutable_q_lens()},
  };
  for (const auto& [arg, ref] : refs) {
    if (arg->present()) KS_RETURN_IF_ERROR(SetRef(impl, c, *arg, a.device, temps, ref, uploaded));
  }
  if (!a.q_lens.present()) req->clear_q_lens();
  if (!a.seq_lens.present()) req->clear_seq_lens();
  if (!a.kv_indices.present()) req->clear_kv_indices();
  if (!a.kv_indptr.present()) req->clear_kv_indptr();
  return absl::OkStatus();
}


}  // namespace

// --------------------------------------------------------------- devices

absl::StatusOr<v1::ListDevicesResponse> Client::Devices(const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  v1::ListDevicesResponse resp;
  KS_RETURN_IF_ERROR(WithRetry(c, [&](grpc::ClientContext* ctx) {
    resp.Clear();
    return impl_->devices->List(ctx, v1::ListDevicesRequest(), &resp);
  }));
  return resp;
}

absl::StatusOr<v1::Device> Client::DrainDevice(int index, bool undrain, const std::string& reason,
                                               const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  v1::DrainDeviceRequest req;
  req.set_index(index);
  req.set_undrain(undrain);
  req.set_reason(reason);
  v1::Device resp;
  KS_RETURN_IF_ERROR(Once(c, [&](grpc::ClientContext* ctx) { return impl_->devices->Drain(ctx, req, &resp); }));
  return resp;
}

absl::StatusOr<v1::ProbeDeviceResponse> Client::ProbeDevice(int index, const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  v1::ProbeDeviceRequest req;
  req.set_index(index);
  v1::ProbeDeviceResponse resp;
  KS_RETURN_IF_ERROR(Once(c, [&](grpc::ClientContext* ctx) { return impl_->devices->Probe(ctx, req, &resp); }));
  return resp;
}

absl::StatusOr<HealthState> Client::Health(const std::string& service, const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  // grpc.health.v1.HealthCheckRequest{service = 1} / HealthCheckResponse{status = 1},
  // encoded by hand so the client needs no copy of health.proto.
  std::string req_bytes;
  if (!service.empty()) {
    req_bytes.push_back(0x0A);
    size_t n = service.size();
    while (n >= 0x80) {
      req_bytes.push_back(static_cast<char>((n & 0x7F) | 0x80));
      n >>= 7;
    }
    req_bytes.push_back(static_cast<char>(n));
    req_bytes += service;
  }
  grpc::ByteBuffer resp;
  KS_RETURN_IF_ERROR(WithRetry(c, [&](grpc::ClientContext* ctx) {
    grpc::Slice slice(req_bytes);
    grpc::ByteBuffer req(&slice, 1);
    absl::Notification done;
    grpc::Status status;
    impl_->generic->UnaryCall(ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &req, &resp,
                              [&](grpc::Status s) {
                                status = std::move(s);
                                done.Notify();
                              });
    done.WaitForNotification();
    return status;
  }));
  std::vector<grpc::Slice> slices;
  if (!resp.Dump(&slices).ok()) return absl::DataLossError("health: unreadable response");
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // Field 1, varint: 0 UNKNOWN, 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN.
  int status = 0;
  if (bytes.size() >= 2 && bytes[0] == 0x08) status = static_cast<uint8_t>(bytes[1]);
  if (status == 1) return HealthState::kServing;
  if (status == 2) return HealthState::kNotServing;
  return HealthState::kUnknown;
}

// --------------------------------------------------------------- buffers

absl::StatusOr<v1::BufferInfo> Client::UploadBuffer(const HostTensor& t, const std::string& label, int device,
                                                    const CallOptions& call) {
  return DoUpload(*impl_, MakeCtx(options_, call), t, label, device);
}

absl::StatusOr<HostTensor> Client::DownloadBuffer(const std::string& id, const CallOptions& call) {
  return DoDownload(*impl_, MakeCtx(options_, call), id);
}

absl::Status Client::FreeBuffer(const std::string& id, const CallOptions& call) {
  return DoFree(*impl_, MakeCtx(options_, call), id);
}

absl::StatusOr<std::vector<v1::BufferInfo>> Client::ListBuffers(const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  v1::ListBuffersResponse resp;
  KS_RETURN_IF_ERROR(WithRetry(c, [&](grpc::ClientContext* ctx) {
    resp.Clear();
    return impl_->buffers->List(ctx, v1::ListBuffersRequest(), &resp);
  }));
  return std::vector<v1::BufferInfo>(resp.buffers().begin(), resp.buffers().end());
}

bool Client::shared_memory_transfers() const { return impl_->shm.load(); }

bool Client::kernel_session_ring_attached() const {
  return impl_->session != nullptr && impl_->session->ring_attached();
}

int64_t Client::kernel_sessions_opened() const {
  return impl_->session != nullptr ? impl_->session->streams_opened() : 0;
}

// ------------------------------------------------------------------- ops

absl::StatusOr<OpResult> Client::Attention(const AttentionArgs& a, const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  TempBuffers temps(*impl_, options_, &leaked_temp_buffers_);
  v1::AttentionRequest req;
  bool uploaded = false;
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.q, a.device, temps, req.mutable_q(), &uploaded));
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.k, a.device, temps, req.mutable_k(), &uploaded));
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.v, a.device, temps, req.mutable_v(), &uploaded));
  req.set_layout(ToProto(a.layout));
  req.set_causal(a.causal);
  if (a.softmax_scale) req.set_softmax_scale(*a.softmax_scale);
  // The output is shaped like q (bf16).
  const bool via_temp = SetCommonFields(a, uploaded || HostBytes(a.q) > options_.upload_threshold_bytes, &req);
  v1::AttentionResponse resp;
  KS_RETURN_IF_ERROR(KernelCall(*impl_, c, &req, &resp, &v1::KernelService::Stub::Attention,
                                &v1::SessionRequest::mutable_attention, &v1::SessionResponse::mutable_attention));
  return FinishOp(*impl_, c, a.output, via_temp, resp.out(), resp.has_error() && a.report_error, resp.error(),
                  resp.info(), temps);
}

absl::StatusOr<OpResult> Client::Fp8Attention(const Fp8AttentionArgs& a, const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  TempBuffers temps(*impl_, options_, &leaked_temp_buffers_);
  v1::Fp8AttentionRequest req;
  bool uploaded = false;
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.q, a.device, temps, req.mutable_q(), &uploaded));
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.k, a.device, temps, req.mutable_k(), &uploaded));
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.v, a.device, temps, req.mutable_v(), &uploaded));
  if (a.q_descale.present()) {
    KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.q_descale, a.device, temps, req.mutable_q_descale(), &uploaded));
  }
  if (a.k_descale.present()) {
    KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.k_descale, a.device, temps, req.mutable_k_descale(), &uploaded));
  }
  if (a.v_descale.present()) {
    KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.v_descale, a.device, temps, req.mutable_v_descale(), &uploaded));
  }
  req.set_layout(ToProto(a.layout));
  req.set_causal(a.causal);
  if (a.softmax_scale) req.set_softmax_scale(*a.softmax_scale);
  req.set_format(ToProto(a.format));
  req.set_p_mode(ToProto(a.p_mode));
  req.set_hadamard(a.hadamard);
  req.set_descale_mode(ToProto(a.descale_mode));
  req.set_rounding(ToProto(a.rounding));
  req.set_report_error(a.report_error || a.report_error_split);
  req.set_report_error_split(a.report_error_split);
  req.set_device(a.device);
  // Output is bf16 shaped like q with Dv <= Dqk: at most 2 bytes per q element.
  const int64_t q_elems = a.q.host() ? a.q.host()->num_elements() : 0;
  const bool via_temp = !a.output.to_buffer && (uploaded || 2 * q_elems > options_.upload_threshold_bytes);
  req.mutable_output()->set_to_buffer(a.output.to_buffer || via_temp);
  req.mutable_output()->set_label(a.output.label);
  v1::Fp8AttentionResponse resp;
  KS_RETURN_IF_ERROR(KernelCall(*impl_, c, &req, &resp, &v1::KernelService::Stub::Fp8Attention,
                                &v1::SessionRequest::mutable_fp8_attention,
                                &v1::SessionResponse::mutable_fp8_attention));
  return FinishOp(*impl_, c, a.output, via_temp, resp.out(),
                  resp.has_error() && (a.report_error || a.report_error_split), resp.error(), resp.info(), temps);
}


absl::StatusOr<OpResult> Client::MlaDecode(const MlaDecodeArgs& a, const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  TempBuffers temps(*impl_, options_, &leaked_temp_buffers_);
  v1::MlaDecodeRequest req;
  bool uploaded = false;
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.q_lat, a.device, temps, req.mutable_q_lat(), &uploaded));
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.q_pe, a.device, temps, req.mutable_q_pe(), &uploaded));
  if (a.kv.present()) KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.kv, a.device, temps, req.mutable_kv(), &uploaded));
  req.set_pool_id(a.pool_id);
  if (a.softmax_scale) req.set_softmax_scale(*a.softmax_scale);
  req.set_kv_scale(a.kv_scale);
  KS_RETURN_IF_ERROR(SetPageTables(*impl_, c, a, temps, &req, &uploaded));
  req.set_num_splits(a.num_splits);
  // o_lat has q_lat's shape and dtype.
  const bool via_temp = SetCommonFields(a, uploaded || HostBytes(a.q_lat) > options_.upload_threshold_bytes, &req);
  v1::MlaDecodeResponse resp;
  KS_RETURN_IF_ERROR(KernelCall(*impl_, c, &req, &resp, &v1::KernelService::Stub::MlaDecode,
                                &v1::SessionRequest::mutable_mla_decode, &v1::SessionResponse::mutable_mla_decode));
  return FinishOp(*impl_, c, a.output, via_temp, resp.out(), resp.has_error() && a.report_error, resp.error(),
                  resp.info(), temps);
}

absl::StatusOr<OpResult> Client::DecodeAttention(const DecodeAttentionArgs& a, const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  TempBuffers temps(*impl_, options_, &leaked_temp_buffers_);
  v1::DecodeAttentionRequest req;
  bool uploaded = false;
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.q, a.device, temps, req.mutable_q(), &uploaded));
  req.set_pool_id(a.pool_id);
  KS_RETURN_IF_ERROR(SetPageTables(*impl_, c, a, temps, &req, &uploaded));
  if (a.softmax_scale) req.set_softmax_scale(*a.softmax_scale);
  // The output has q's shape and dtype.
  const bool via_temp = SetCommonFields(a, uploaded || HostBytes(a.q) > options_.upload_threshold_bytes, &req);
  v1::DecodeAttentionResponse resp;
  KS_RETURN_IF_ERROR(KernelCall(*impl_, c, &req, &resp, &v1::KernelService::Stub::DecodeAttention,
                                &v1::SessionRequest::mutable_decode_attention,
                                &v1::SessionResponse::mutable_decode_attention));
  return FinishOp(*impl_, c, a.output, via_temp, resp.out(), resp.has_error() && a.report_error, resp.error(),
                  resp.info(), temps);
}

absl::StatusOr<OpResult> Client::Moe(const MoeArgs& a, const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  TempBuffers temps(*impl_, options_, &leaked_temp_buffers_);
  v1::MoeRequest req;
  bool uploaded = false;
  req.set_stage(ToProto(a.stage));
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.x, a.device, temps, req.mutable_x(), &uploaded));
  KS_RETURN_IF_ERROR(SetRef(*impl_, c, a.topk_ids, a.device, temps, req.mutable_topk_ids(), &uploaded));
  const std::pair<const TensorArg*, v1::TensorRef*> optional_refs[] = {
      {&a.topk_weights, req.mutable_topk_weights()}, {&a.w13, req.mutable_w13()},
      {&a.w13_scales, req.mutable_w13_scales()},     {&a.w2, req.mutable_w2()},
      {&a.w2_scales, req.mutable_w2_scales()},
  };
  for (const auto& [arg, ref] : optional_refs) {
    if (arg->present()) KS_RETURN_IF_ERROR(SetRef(*impl_, c, *arg, a.device, temps, ref, &uploaded));
  }
  // Unused weights must be absent, not empty refs.
  if (!a.topk_weights.present()) req.clear_topk_weights();
  if (!a.w13.present()) req.clear_w13();
  if (!a.w13_scales.present()) req.clear_w13_scales();
  if (!a.w2.present()) req.clear_w2();
  if (!a.w2_scales.present()) req.clear_w2_scales();
  req.set_swiglu(a.swiglu);
  req.set_weighted_sum(a.weighted_sum);
  req.set_rounding(ToProto(a.rounding));
  req.set_report_error(a.report_error);
  req.set_device(a.device);
  // Estimate the output: [pairs or tokens, 2I | I | N] bf16.
  int64_t out_bytes = 0;
  const HostTensor* x = a.x.host();
  const HostTensor* ids = a.topk_ids.host();
  if (x && ids && x->shape().size() == 2 && ids->shape().size() == 2) {
    const int64_t pairs = ids->shape()[0] * ids->shape()[1];
    int64_t width = 0;
    if (a.stage == MoeStage::kGateUp && a.w13.host() && a.w13.host()->shape().size() == 3) {
      width = a.w13.host()->shape()[1] / (a.swiglu ? 2 : 1);
      out_bytes = 2 * pairs * width;
    } else if (a.w2.host() && a.w2.host()->shape().size() == 3) {
      width = a.w2.host()->shape()[1];
      out_bytes = 2 * pairs * width;  // an upper bound for weighted sums
    }
  }
  const bool via_temp = !a.output.to_buffer && (uploaded || out_bytes > options_.upload_threshold_bytes);
  req.mutable_output()->set_to_buffer(a.output.to_buffer || via_temp);
  req.mutable_output()->set_label(a.output.label);
  v1::MoeResponse resp;
  KS_RETURN_IF_ERROR(KernelCall(*impl_, c, &req, &resp, &v1::KernelService::Stub::Moe,
                                &v1::SessionRequest::mutable_moe, &v1::SessionResponse::mutable_moe));
  return FinishOp(*impl_, c, a.output, via_temp, resp.out(), resp.has_error() && a.report_error, resp.error(),
                  resp.info(), temps);
}

// ----------------------------------------------------------------- pools

absl::StatusOr<v1::PoolInfo> Client::CreatePool(const PoolSpec& spec, const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  v1::CreatePoolRequest req;
  req.set_kind(spec.kind);
  req.set_num_slots(spec.num_slots);
  req.set_page_size(spec.page_size);
  req.set_dtype(static_cast<v1::DType>(static_cast<int>(spec.dtype)));
  req.set_num_heads(spec.num_heads);
  req.set_head_dim(spec.head_dim);
  req.set_kv_scale(spec.kv_scale);
  req.set_label(spec.label);
  req.set_device(spec.device);
  v1::PoolInfo info;
  KS_RETURN_IF_ERROR(Once(c, [&](grpc::ClientContext* ctx) { return impl_->pools->Create(ctx, req, &info); }));
  return info;
}

absl::StatusOr<v1::PoolInfo> Client::WritePool(const std::string& pool_id, const HostTensor& slots,
                                               const HostTensor& rows, int64_t rows_per_chunk,
                                               const CallOptions& call) {
  if (slots.shape().size() != 1 || (slots.dtype() != DType::kInt32 && slots.dtype() != DType::kInt64)) {
    return absl::InvalidArgumentError(
        absl::StrCat("write pool: slots must be int32 or int64 [n], got ", slots.desc().DebugString()));
  }
  const int64_t n = slots.shape()[0];
  if (rows.shape().size() < 2 || rows.shape()[0] != n) {
    return absl::InvalidArgumentError(absl::StrCat("write pool: rows must be [", n, ", row_elements], got ",
                                                   rows.desc().DebugString()));
  }
  const int64_t row_elems = rows.num_elements() / std::max<int64_t>(n, 1);
  const int64_t row_bytes = NumBytes(rows.dtype(), row_elems);
  if (row_bytes <= 0 || rows.num_bytes() != row_bytes * n) {
    return absl::InvalidArgumentError(absl::StrCat("write pool: rows ", rows.desc().DebugString(),
                                                   " do not split into whole rows of bytes"));
  }
  if (rows_per_chunk <= 0) rows_per_chunk = std::max<int64_t>(1, ResolveChunk(options_.chunk_bytes) / row_bytes);
  const int64_t slot_bytes = DTypeBits(slots.dtype()) / 8;
  CallCtx c = MakeCtx(options_, call);
  auto ctx = c.NewContext();
  v1::WritePoolResponse resp;
  std::unique_ptr<grpc::ClientWriter<v1::WritePoolChunk>> writer(impl_->pools->Write(ctx.get(), &resp));
  for (int64_t start = 0; start < n || start == 0; start += rows_per_chunk) {
    const int64_t m = std::min(rows_per_chunk, n - start);
    v1::WritePoolChunk msg;
    msg.set_pool_id(pool_id);
    v1::Tensor* s = msg.mutable_slots();
    s->set_dtype(static_cast<v1::DType>(static_cast<int>(slots.dtype())));
    s->add_shape(m);
    s->set_data(reinterpret_cast<const char*>(slots.bytes() + start * slot_bytes), static_cast<size_t>(m * slot_bytes));
    v1::Tensor* r = msg.mutable_rows();
    r->set_dtype(static_cast<v1::DType>(static_cast<int>(rows.dtype())));
    r->add_shape(m);
    r->add_shape(row_elems);  // [n, a, b] rows travel as the [n, row_elements] the service takes
    r->set_data(reinterpret_cast<const char*>(rows.bytes() + start * row_bytes), static_cast<size_t>(m * row_bytes));
    if (!writer->Write(msg)) break;
    if (n == 0) break;
  }
  writer->WritesDone();
  KS_RETURN_IF_ERROR(FromGrpcStatus(writer->Finish()));
  return resp.pool();
}

namespace {

absl::StatusOr<HostTensor> DoReadPool(Client::Impl& impl, const CallCtx& c, const v1::ReadPoolRequest& req) {
  HostTensor result;
  absl::Status st = WithRetry(c, [&](grpc::ClientContext* ctx) -> grpc::Status {
    std::unique_ptr<grpc::ClientReader<v1::ReadPoolChunk>> reader(impl.pools->Read(ctx, req));
    v1::ReadPoolChunk chunk;
    v1::PoolInfo info;
    bool have_info = false;
    std::vector<uint8_t> bytes;
    int64_t rows = 0;
    DType dtype = DType::kInvalid;
    Shape row_shape;
    while (reader->Read(&chunk)) {
      if (chunk.has_pool() && !have_info) {
        info = chunk.pool();
        have_info = true;
      }
      if (!chunk.has_rows()) continue;
      absl::StatusOr<HostTensor> t = FromProtoTensor(chunk.rows());
      if (!t.ok() || t->shape().empty()) {
        ctx->TryCancel();
        reader->Finish();
        return grpc::Status(grpc::StatusCode::DATA_LOSS, "read pool: malformed rows chunk");
      }
      if (dtype == DType::kInvalid) {
        dtype = t->dtype();
        row_shape.assign(t->shape().begin() + 1, t->shape().end());
      }
      rows += t->shape()[0];
      bytes.insert(bytes.end(), t->bytes(), t->bytes() + t->num_bytes());
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) return s;
    if (dtype == DType::kInvalid) {
      dtype = static_cast<DType>(info.dtype());
      row_shape = {info.row_elements()};
    }
    Shape shape = {rows};
    shape.insert(shape.end(), row_shape.begin(), row_shape.end());
    result = HostTensor(TensorDesc{dtype, shape}, std::move(bytes));
    return grpc::Status::OK;
  });
  if (!st.ok()) return st;
  return result;
}

}  // namespace

absl::StatusOr<HostTensor> Client::ReadPool(const std::string& pool_id, const HostTensor& slots,
                                            const CallOptions& call) {
  v1::ReadPoolRequest req;
  req.set_pool_id(pool_id);
  *req.mutable_slots() = ToProtoTensor(slots);
  return DoReadPool(*impl_, MakeCtx(options_, call), req);
}

absl::StatusOr<HostTensor> Client::ReadPoolRange(const std::string& pool_id, int64_t start, int64_t count,
                                                 const CallOptions& call) {
  v1::ReadPoolRequest req;
  req.set_pool_id(pool_id);
  req.set_start(start);
  req.set_count(count);
  return DoReadPool(*impl_, MakeCtx(options_, call), req);
}

absl::StatusOr<v1::PoolInfo> Client::PoolStats(const std::string& pool_id, const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  v1::PoolInfo info;
  KS_RETURN_IF_ERROR(WithRetry(c, [&](grpc::ClientContext* ctx) {
    v1::PoolStatsRequest req;
    req.set_pool_id(pool_id);
    return impl_->pools->Stats(ctx, req, &info);
  }));
  return info;
}

absl::Status Client::DeletePool(const std::string& pool_id, const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  return Once(c, [&](grpc::ClientContext* ctx) {
    v1::DeletePoolRequest req;
    req.set_pool_id(pool_id);
    v1::DeletePoolResponse resp;
    return impl_->pools->Delete(ctx, req, &resp);
  });
}

absl::StatusOr<std::vector<v1::PoolInfo>> Client::ListPools(const CallOptions& call) {
  CallCtx c = MakeCtx(options_, call);
  v1::ListPoolsResponse resp;
  KS_RETURN_IF_ERROR(WithRetry(c, [&](grpc::ClientContext* ctx) {
    resp.Clear();
    return impl_->pools->List(ctx, v1::ListPoolsRequest(), &resp);
  }));
  return std::vector<v1::PoolInfo>(resp.pools().begin(), resp.pools().end());
}

}  // namespace kernelserve
