#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/call_log.h"
#include "server/ids.h"
#include "server/input_checks.h"
#include "server/services.h"
#include "server/tensor_proto.h"

namespace kernelserve {
namespace {

constexpr int64_t kDefaultChunkBytes = 1 << 20;
constexpr int64_t kUploadBatchBytes = 64 << 20;
// Under glibc's 32 MiB mmap ceiling (TuneHostAllocator), so the staging area
// comes from the heap and is not faulted in afresh by every download.
constexpr int64_t kDownloadBatchBytes = 16 << 20;

void FillInfo(const Buffer& b, pb::BufferInfo* info) {
  info->set_id(b.id);
  info->set_dtype(static_cast<pb::DType>(b.desc.dtype));
  info->clear_shape();
  for (int64_t d : b.desc.shape) info->add_shape(d);
  info->set_size_bytes(b.desc.num_bytes());
  info->set_device(b.device);
  info->set_label(b.label);
  info->set_created_unix_ms(b.created_unix_ms);
}

absl::Status DoUpload(ServerState* state, grpc::ServerContext* ctx, DecodingReader<pb::UploadChunk>* reader,
                      pb::BufferInfo* info, CallLog* log) {
  pb::UploadChunk chunk;
  if (!reader->Read(&chunk)) {
    KS_RETURN_IF_ERROR(reader->status());
    return absl::InvalidArgumentError("header: the stream was empty; the first message must carry the header");
  }
  if (!chunk.has_header()) {
    return absl::InvalidArgumentError("header: the first message must carry the header");
  }
  const pb::UploadHeader& h = chunk.header();
  KS_ASSIGN_OR_RETURN(const TensorDesc desc, DescFromProto("header", h.dtype(), h.shape()));
  KS_RETURN_IF_ERROR(CheckLength("header.label", h.label()));
  KS_RETURN_IF_ERROR(state->CheckDevice("header.device", h.device()));
  const int device = h.device();
  const std::string tenant = state->TenantOf(ctx);
  const int64_t total = desc.num_bytes();
  const std::string what = absl::StrCat("buffer ", desc.DebugString());
  // Reserve before receiving, so an oversized upload fails at its header.
  KS_ASSIGN_OR_RETURN(Reservation staging_hold,
                      state->accountant().Reserve(device, tenant, total, what));

  auto buffer = std::make_shared<Buffer>();
  buffer->id = NewId("buf");
  buffer->owner = tenant;
  buffer->label = h.label();
  buffer->device = device;
  buffer->desc = desc;

  buffer->reservation = std::move(staging_hold);
  // Chunks are kept as received (moved out of the messages, not copied) and
  // go to the device in batches of kUploadBatchBytes, one worker task each:
  // one copy per byte and bounded host memory, whatever the buffer's size.
  // Flushed chunks' strings are handed back to the message before later
  // reads, so the parser fills memory already faulted in instead of a fresh
  // allocation per chunk. (Copying a batch on its own thread while the next
  // is read was tried: no measurable gain, bench/NOTES.md.) What the batch
  // holds is charged to the memory limit; when that has no room, each chunk
  // goes to the device straight from its message instead.
  Backend& backend = state->backend();
  std::vector<std::string> pending, spare;
  Reservation staging;
  int64_t held = 0;  // capacity of the strings in `pending` and `spare`
  int64_t pending_bytes = 0;
  int64_t received = 0;  // bytes read so far
  int64_t flushed = 0;   // bytes already on the device
  // Copies the pending chunks, then `direct` (a chunk not kept), to the device.
  auto flush = [&](absl::string_view direct = {}) -> absl::Status {
    if (pending.empty() && direct.empty() && buffer->memory != nullptr) return absl::OkStatus();
    KS_RETURN_IF_ERROR(state->RunOnDevice(device, ctx, [&]() -> absl::Status {
      if (buffer->memory == nullptr) {
        KS_ASSIGN_OR_RETURN(buffer->memory, state->AllocateReserved(device, total, what));
      }
      auto* dst = static_cast<uint8_t*>(buffer->memory->data());
      for (absl::string_view p : pending) {
        KS_RETURN_IF_ERROR(backend.CopyToDevice(device, dst + flushed, p.data(), p.size()));
        flushed += static_cast<int64_t>(p.size());
      }
      if (!direct.empty()) {
        KS_RETURN_IF_ERROR(backend.CopyToDevice(device, dst + flushed, direct.data(), direct.size()));
        flushed += static_cast<int64_t>(direct.size());
      }
      return absl::OkStatus();
    }));
    for (std::string& p : pending) spare.push_back(std::move(p));
    pending.clear();
    pending_bytes = 0;
    return absl::OkStatus();
  };
  // Keeps the message's chunk in the batch if the memory limit has room for it.
  auto keep = [&](std::string* data) -> bool {
    const int64_t need = held + static_cast<int64_t>(data->capacity());
    if (need > staging.bytes() &&
        !state->ChargeHost(device, tenant, need - staging.bytes(), "upload staging", &staging).ok()) {
      return false;
    }
    held = need;
    pending_bytes += static_cast<int64_t>(data->size());
    pending.push_back(std::move(*data));
    return true;
  };
  auto recycle = [&] {
    if (spare.empty()) return;
    held -= static_cast<int64_t>(spare.back().capacity());
    chunk.mutable_data()->swap(spare.back());
    spare.pop_back();
  };
  int64_t index = 0;
  do {
    if (index > 0 && chunk.has_header()) {
      return absl::InvalidArgumentError(
          absl::StrCat("header: only the first message may carry the header (message ", index, ")"));
    }
    const int64_t n = static_cast<int64_t>(chunk.data().size());
    log->AddBytesIn(n);
    if (received + n > total) {
      return absl::InvalidArgumentError(absl::StrCat("data: expected ", total, " bytes (",
                                                     desc.DebugString(), "), got more (", received + n,
                                                     " by message ", index, ")"));
    }
    received += n;
    if (n > 0 && !keep(chunk.mutable_data())) {
      KS_RETURN_IF_ERROR(flush(chunk.data()));
      spare.clear();
      held = 0;
      staging.Release();
    }
    chunk.Clear();
    if (pending_bytes >= kUploadBatchBytes) KS_RETURN_IF_ERROR(flush());
    recycle();
    ++index;
  } while (reader->Read(&chunk));
  KS_RETURN_IF_ERROR(reader->status());
  if (ctx->IsCancelled()) return absl::CancelledError("upload cancelled by the client");
  if (received != total) {
    return absl::InvalidArgumentError(absl::StrCat("data: ", ByteCountMismatch(desc, received)));
  }
  KS_RETURN_IF_ERROR(flush());
  buffer->created_unix_ms = absl::ToUnixMillis(absl::Now());
  state->registry().AddBuffer(buffer);
  FillInfo(*buffer, info);
  return absl::OkStatus();
}

absl::Status DoDownload(ServerState* state, grpc::ServerContext* ctx, const pb::DownloadRequest& req,
                        grpc::ServerWriter<pb::DownloadChunk>* writer, CallLog* log) {
  if (req.chunk_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes: expected >= 0 (0: 1 MiB), got ", req.chunk_bytes()));
  }
  KS_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                      state->registry().GetBuffer("buffer_id", req.buffer_id(), state->TenantOf(ctx)));
  int64_t chunk = req.chunk_bytes() == 0 ? kDefaultChunkBytes : req.chunk_bytes();
  chunk = std::min(chunk, state->max_payload_bytes());
  const int64_t total = buffer->desc.num_bytes();
  // Device to host in batches of whole chunks through one reused staging
  // area, charged to the memory limit, so pages are touched once; without
  // room for it each chunk is copied straight into its message.
  int64_t batch = std::min(total, std::max<int64_t>(chunk, kDownloadBatchBytes / chunk * chunk));
  Reservation staging;
  const bool staged = batch > chunk && state->ChargeHost(buffer->device, buffer->owner, batch,
                                                         "download staging", &staging).ok();
  if (!staged) batch = chunk;
  std::string host(staged ? static_cast<size_t>(batch) : 0, '\0');
  const auto* src = static_cast<const uint8_t*>(buffer->memory->data());
  pb::DownloadChunk out;  // reused: its data string keeps its capacity
  for (int64_t base = 0; base < total; base += batch) {
    const int64_t m = std::min(batch, total - base);
    if (!staged) out.mutable_data()->resize(static_cast<size_t>(m));
    char* dst = staged ? host.data() : out.mutable_data()->data();
    KS_RETURN_IF_ERROR(state->RunOnDevice(buffer->device, ctx, [&]() -> absl::Status {
      return state->backend().CopyToHost(buffer->device, dst, src + base, static_cast<size_t>(m));
    }));
    for (int64_t off = 0; off < m; off += chunk) {
      if (base + off == 0) {
        FillInfo(*buffer, out.mutable_info());
      } else {
        out.clear_info();
      }
      const int64_t n = std::min(chunk, m - off);
      out.set_offset(base + off);
      if (staged) out.mutable_data()->assign(host.data() + off, static_cast<size_t>(n));
      if (!writer->Write(out)) return absl::CancelledError("download: the client went away");
      log->AddBytesOut(n);
    }
  }
  return absl::OkStatus();
}

}  // namespace

BufferServiceImpl::BufferServiceImpl(ServerState* state) : state_(state) {
  constexpr int kUploadMethod = 0;  // its position in tensor.proto's BufferService
  MarkMethodStreamed(kUploadMethod, DecodingHandler(this, &BufferServiceImpl::Upload));
}

grpc::Status BufferServiceImpl::Upload(grpc::ServerContext* ctx, DecodingReader<pb::UploadChunk>* reader,
                                       pb::BufferInfo* info) {
  return state_->Serve("BufferService.Upload", ctx, /*stream=*/true,
                       [&](CallLog* log) { return DoUpload(state_, ctx, reader, info, log); });
}

grpc::Status BufferServiceImpl::Download(grpc::ServerContext* ctx, const pb::DownloadRequest* req,
                                         grpc::ServerWriter<pb::DownloadChunk>* writer) {
  return state_->Serve("BufferService.Download", ctx, /*stream=*/true,
                       [&](CallLog* log) { return DoDownload(state_, ctx, *req, writer, log); });
}

grpc::Status BufferServiceImpl::Free(grpc::ServerContext* ctx, const pb::FreeBufferRequest* req,
                                     pb::FreeBufferResponse* resp) {
  return state_->Serve("BufferService.Free", ctx, /*stream=*/false, [&](CallLog*) {
    return state_->registry().RemoveBuffer("buffer_id", req->buffer_id(), state_->TenantOf(ctx));
  });
}

grpc::Status BufferServiceImpl::List(grpc::ServerContext* ctx, const pb::ListBuffersRequest* req,
                                     pb::ListBuffersResponse* resp) {
  return state_->Serve("BufferService.List", ctx, /*stream=*/false, [&](CallLog*) {
    ListInto(state_->registry().ListBuffers(state_->TenantOf(ctx)), state_->max_payload_bytes(), resp,
             &pb::ListBuffersResponse::add_buffers, &FillInfo);
    return absl::OkStatus();
  });
}

}  // namespace kernelserve
