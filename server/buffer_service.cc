#include <algorithm>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_wire.h"
#include "common/huge_pages.h"
#include "common/shm_region.h"
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
// A device upload's staging block: each is one host-to-device copy, which
// runs while the handler gathers the next block.
constexpr int64_t kStagingBatchBytes = 8 << 20;
// Uploads up to this size gather into plain heap memory (no device task to
// pin blocks before the first byte is read: one copy at the end).
constexpr int64_t kHeapGatherBytes = 1 << 20;
// A download's device-to-host batch: whole chunks, one staging block each.
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

// The buffer's device memory, allocated (from its reservation) on the first
// device task of the upload that needs it.
absl::Status EnsureMemory(ServerState* state, Buffer* buffer, const std::string& what) {
  if (buffer->memory != nullptr) return absl::OkStatus();
  KS_ASSIGN_OR_RETURN(buffer->memory,
                      state->AllocateReserved(buffer->device, buffer->desc.num_bytes(), what));
  return absl::OkStatus();
}

// An upload to device memory that is not host memory. A copy from pageable
// memory is synchronous and has a fixed cost per call, and the transport's
// slices are small (tens of KiB): copied one by one they run far below the
// link's speed. Instead the received bytes are gathered (memcpy on the
// handler thread) into page-locked staging blocks (Backend::AllocateStaging)
// and each full block goes to the device in one asynchronous copy, a worker
// task, while the handler fills the other block.
class StagedUpload {
 public:
  StagedUpload(ServerState* state, grpc::ServerContext* ctx, Buffer* buffer, std::string what)
      : state_(state), ctx_(ctx), buffer_(buffer), what_(std::move(what)),
        total_(buffer->desc.num_bytes()), batch_(std::min(total_, kStagingBatchBytes)) {}

  // Host bytes the blocks take, to charge before Start.
  int64_t host_bytes() const { return total_ <= kHeapGatherBytes ? total_ : blocks() * batch_; }

  // Allocates the blocks (and, for a large upload, the buffer's memory).
  absl::Status Start() {
    if (total_ <= kHeapGatherBytes) {
      heap_.resize(static_cast<size_t>(total_));
      block_data_.push_back(heap_.data());
      return absl::OkStatus();
    }
    return state_->RunOnDevice(buffer_->device, ctx_, [&]() -> absl::Status {
      KS_RETURN_IF_ERROR(EnsureMemory(state_, buffer_, what_));
      for (int i = 0; i < blocks(); ++i) {
        KS_ASSIGN_OR_RETURN(std::unique_ptr<StagingMemory> block,
                            state_->backend().AllocateStaging(buffer_->device, static_cast<size_t>(batch_)));
        block_data_.push_back(static_cast<char*>(block->data()));
        blocks_.push_back(std::move(block));
      }
      return absl::OkStatus();
    });
  }

  // Gathers `bytes` (never past the buffer's size: the caller checks), sending each full block.
  absl::Status Add(absl::string_view bytes) {
    return Fill(static_cast<int64_t>(bytes.size()), [&](char* dst, int64_t at, int64_t k) {
      std::memcpy(dst, bytes.data() + at, static_cast<size_t>(k));
      return absl::OkStatus();
    });
  }

  // Gathers `n` bytes that read(dst, at, k) puts at dst (bytes [at, at + k)
  // of the n), sending each full block.
  absl::Status Fill(int64_t n, const std::function<absl::Status(char* dst, int64_t at, int64_t k)>& read) {
    for (int64_t at = 0; at < n;) {
      const int64_t k = std::min(n - at, batch_ - fill_);
      KS_RETURN_IF_ERROR(read(block_data_[current_] + fill_, at, k));
      fill_ += k;
      at += k;
      if (fill_ == batch_ && sent_ + fill_ < total_) KS_RETURN_IF_ERROR(Send(/*last=*/false));
    }
    return absl::OkStatus();
  }

  // Sends the last block and waits for every copy.
  absl::Status Finish() { return Send(/*last=*/true); }

 private:
  int blocks() const { return total_ > batch_ ? 2 : 1; }

  absl::Status Send(bool last) {
    Backend& backend = state_->backend();
    const int device = buffer_->device;
    const char* src = block_data_[current_];
    KS_RETURN_IF_ERROR(state_->RunOnDevice(device, ctx_, [&]() -> absl::Status {
      KS_RETURN_IF_ERROR(EnsureMemory(state_, buffer_, what_));
      // The other block's copy ends before the handler refills that block.
      if (in_flight_) KS_RETURN_IF_ERROR(backend.Synchronize(device));
      auto* dst = static_cast<uint8_t*>(buffer_->memory->data()) + sent_;
      KS_RETURN_IF_ERROR(backend.CopyToDeviceAsync(device, dst, src, static_cast<size_t>(fill_)));
      return last ? backend.Synchronize(device) : absl::OkStatus();
    }));
    sent_ += fill_;
    fill_ = 0;
    in_flight_ = !last;
    current_ = (current_ + 1) % static_cast<int>(block_data_.size());
    return absl::OkStatus();
  }

  ServerState* state_;
  grpc::ServerContext* ctx_;
  Buffer* buffer_;
  const std::string what_;
  const int64_t total_;
  const int64_t batch_;
  // Pinned blocks go back to the backend's cache on destruction; one that a
  // copy queued before an early return still reads is reused only after the
  // device's stream has drained (the backend's AllocateStaging).
  std::vector<std::unique_ptr<StagingMemory>> blocks_;
  std::string heap_;  // the one block of a small upload
  std::vector<char*> block_data_;
  int current_ = 0;
  int64_t fill_ = 0;  // bytes in the current block
  int64_t sent_ = 0;  // bytes whose copy is queued or done
  bool in_flight_ = false;
};

// An upload message, read from its received bytes: the header is parsed by
// protobuf (it is small), the data stays in the received slices.
absl::Status ReadChunk(const grpc::ByteBuffer& raw, int64_t index, wire::WireMessage* chunk) {
  return chunk->Parse(raw, absl::StrCat("request: message ", index,
                                       " of the stream is not a valid protobuf message of the method's request "
                                       "type (UploadChunk)"));
}

// tensor.proto's UploadChunk.
constexpr int kUploadHeaderField = 1, kUploadDataField = 2;

// Message `index` of an upload stream after the first, which alone carries the header.
absl::Status CheckNoLaterHeader(const wire::WireMessage& chunk, int64_t index) {
  if (index > 0 && chunk.Has(kUploadHeaderField)) {
    return absl::InvalidArgumentError(
        absl::StrCat("header: only the first message may carry the header (message ", index, ")"));
  }
  return absl::OkStatus();
}

// The caller's own shared-memory object named in `field` (header.shm,
// shm), opened for `bytes` at its offset: only for a process on this host
// over loopback TCP whose user owns the object, so that no caller can make
// the server read or write another user's memory.
absl::StatusOr<ShmRegion> OpenCallersRegion(grpc::ServerContext* ctx, absl::string_view field,
                                            const pb::SharedMemoryRegion& shm, int64_t bytes, bool writable) {
  const absl::StatusOr<uint32_t> caller = LoopbackPeerUid(ctx->peer());
  if (!caller.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(field, ": shared memory needs a client on this host over "
                                                      "loopback TCP (", caller.status().message(),
                                                      "); send the bytes in the stream instead"));
  }
  return ShmRegion::Open(field, shm.shm_name(), shm.offset(), bytes, writable, [&](uint32_t owner) {
    if (owner == *caller) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(field, ".shm_name: \"", shm.shm_name(), "\" belongs to uid ",
                                                    owner, ", the caller is uid ", *caller,
                                                    " (the server uses only the caller's own shared memory)"));
  });
}

// The rest of an upload stream whose header named shared memory: it must
// carry no data (`first`: the header's message, already read).
absl::Status ExpectNoData(DecodingReader<pb::UploadChunk>* reader, wire::WireMessage* first) {
  grpc::ByteBuffer raw;
  wire::WireMessage* chunk = first;
  for (int64_t index = 0;; ++index) {
    KS_RETURN_IF_ERROR(CheckNoLaterHeader(*chunk, index));
    if (chunk->BytesSize(kUploadDataField) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data: the header named shared memory (header.shm), so the stream must carry no data; message ", index,
          " carries ", chunk->BytesSize(kUploadDataField), " bytes"));
    }
    if (!reader->ReadRaw(&raw)) break;
    KS_RETURN_IF_ERROR(ReadChunk(raw, index + 1, first));
  }
  return reader->status();
}

// The region's bytes into the buffer's memory: read straight into it where
// device memory is host memory, else through page-locked staging blocks
// (StagedUpload), or, without room for those, a chunk-sized window.
absl::Status UploadFromRegion(ServerState* state, grpc::ServerContext* ctx, const ShmRegion& region, Buffer* buffer,
                              const std::string& what) {
  Backend& backend = state->backend();
  const int device = buffer->device;
  const int64_t total = buffer->desc.num_bytes();
  if (total == 0 || backend.Capabilities().device_memory_is_host) {
    return state->RunOnDevice(device, ctx, [&]() -> absl::Status {
      KS_RETURN_IF_ERROR(EnsureMemory(state, buffer, what));
      return region.Read(0, buffer->memory->data(), total);
    });
  }
  auto read = [&](char* dst, int64_t at, int64_t k) { return region.Read(at, dst, k); };
  StagedUpload staged(state, ctx, buffer, what);
  Reservation staging;
  if (state->ChargeHost(device, buffer->owner, staged.host_bytes(), "upload staging", &staging).ok()) {
    KS_RETURN_IF_ERROR(staged.Start());
    KS_RETURN_IF_ERROR(staged.Fill(total, read));
    return staged.Finish();
  }
  std::string window(static_cast<size_t>(std::min(total, kDefaultChunkBytes)), '\0');
  for (int64_t at = 0; at < total;) {
    const int64_t k = std::min(total - at, static_cast<int64_t>(window.size()));
    KS_RETURN_IF_ERROR(read(window.data(), at, k));
    KS_RETURN_IF_ERROR(state->RunOnDevice(device, ctx, [&]() -> absl::Status {
      KS_RETURN_IF_ERROR(EnsureMemory(state, buffer, what));
      return backend.CopyToDevice(device, static_cast<uint8_t*>(buffer->memory->data()) + at, window.data(),
                                  static_cast<size_t>(k));
    }));
    at += k;
  }
  return absl::OkStatus();
}

// A buffer whose bytes are all on the device, registered for its owner.
absl::Status AddUploaded(ServerState* state, const std::shared_ptr<Buffer>& buffer, pb::BufferInfo* info) {
  buffer->created_unix_ms = absl::ToUnixMillis(absl::Now());
  state->registry().AddBuffer(buffer);
  FillInfo(*buffer, info);
  return absl::OkStatus();
}

absl::Status DoUpload(ServerState* state, grpc::ServerContext* ctx, DecodingReader<pb::UploadChunk>* reader,
                      pb::BufferInfo* info, CallLog* log) {
  grpc::ByteBuffer raw;
  wire::WireMessage chunk;
  if (!reader->ReadRaw(&raw)) {
    KS_RETURN_IF_ERROR(reader->status());
    return absl::InvalidArgumentError("header: the stream was empty; the first message must carry the header");
  }
  KS_RETURN_IF_ERROR(ReadChunk(raw, 0, &chunk));
  if (!chunk.Has(kUploadHeaderField)) {
    return absl::InvalidArgumentError("header: the first message must carry the header");
  }
  pb::UploadHeader h;
  if (!h.ParseFromString(chunk.Concatenated(kUploadHeaderField))) {
    return absl::InvalidArgumentError(
        "request: message 0 of the stream: header is not a valid protobuf message of type UploadHeader");
  }
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
  if (h.has_shm()) {
    // The client may still be writing the region: its bytes are read once
    // the stream ends, the buffer's memory faulted in meanwhile.
    KS_ASSIGN_OR_RETURN(const ShmRegion region, OpenCallersRegion(ctx, "header.shm", h.shm(), total, false));
    if (state->backend().Capabilities().device_memory_is_host) {
      KS_RETURN_IF_ERROR(state->RunOnDevice(device, ctx, [&]() -> absl::Status {
        KS_RETURN_IF_ERROR(EnsureMemory(state, buffer.get(), what));
        PrefaultPages(buffer->memory->data(), static_cast<size_t>(total));
        return absl::OkStatus();
      }));
    }
    KS_RETURN_IF_ERROR(ExpectNoData(reader, &chunk));
    if (ctx->IsCancelled()) return absl::CancelledError("upload cancelled by the client");
    KS_RETURN_IF_ERROR(UploadFromRegion(state, ctx, region, buffer.get(), what));
    log->AddBytesIn(total);
    return AddUploaded(state, buffer, info);
  }
  // Device memory that is host memory (cpu): chunks are kept as received
  // (the transport's slices, referenced, never parsed into a protobuf copy)
  // and copied straight into the buffer in batches of kUploadBatchBytes, one
  // worker task each: one copy per byte and bounded host memory, whatever the
  // buffer's size. Other devices: gathered into staging blocks
  // (StagedUpload). What is held (kept chunks, blocks) is charged to the
  // memory limit; when that has no room, each chunk goes to the device
  // straight from its slices instead.
  Backend& backend = state->backend();
  Reservation staging;
  std::optional<StagedUpload> staged;
  if (total > 0 && !backend.Capabilities().device_memory_is_host) {
    staged.emplace(state, ctx, buffer.get(), what);
    if (state->ChargeHost(device, tenant, staged->host_bytes(), "upload staging", &staging).ok()) {
      KS_RETURN_IF_ERROR(staged->Start());
    } else {
      staged.reset();
    }
  }
  std::vector<wire::WireMessage> pending;
  int64_t pending_bytes = 0;
  int64_t received = 0;  // bytes read so far
  int64_t flushed = 0;   // bytes already on the device
  // Copies the pending chunks, then `direct` (a chunk not kept), to the device.
  auto flush = [&](const wire::WireMessage* direct = nullptr) -> absl::Status {
    if (pending.empty() && direct == nullptr && buffer->memory != nullptr) return absl::OkStatus();
    KS_RETURN_IF_ERROR(state->RunOnDevice(device, ctx, [&]() -> absl::Status {
      KS_RETURN_IF_ERROR(EnsureMemory(state, buffer.get(), what));
      auto* dst = static_cast<uint8_t*>(buffer->memory->data());
      auto copy = [&](const wire::WireMessage& m) -> absl::Status {
        for (absl::string_view p : m.Bytes(kUploadDataField)) {
          KS_RETURN_IF_ERROR(backend.CopyToDevice(device, dst + flushed, p.data(), p.size()));
          flushed += static_cast<int64_t>(p.size());
        }
        return absl::OkStatus();
      };
      for (const wire::WireMessage& m : pending) KS_RETURN_IF_ERROR(copy(m));
      if (direct != nullptr) KS_RETURN_IF_ERROR(copy(*direct));
      return absl::OkStatus();
    }));
    pending.clear();
    pending_bytes = 0;
    return absl::OkStatus();
  };
  int64_t index = 0;
  while (true) {
    KS_RETURN_IF_ERROR(CheckNoLaterHeader(chunk, index));
    const int64_t n = chunk.BytesSize(kUploadDataField);
    log->AddBytesIn(n);
    if (received + n > total) {
      return absl::InvalidArgumentError(absl::StrCat("data: expected ", total, " bytes (",
                                                     desc.DebugString(), "), got more (", received + n,
                                                     " by message ", index, ")"));
    }
    received += n;
    if (staged) {
      for (absl::string_view p : chunk.Bytes(kUploadDataField)) KS_RETURN_IF_ERROR(staged->Add(p));
    } else if (n > 0) {
      // Kept in the batch if the memory limit has room for it.
      const int64_t need = pending_bytes + n;
      if (need <= staging.bytes() ||
          state->ChargeHost(device, tenant, need - staging.bytes(), "upload staging", &staging).ok()) {
        pending_bytes = need;
        pending.push_back(std::move(chunk));
      } else {
        KS_RETURN_IF_ERROR(flush(&chunk));
        staging.Release();
      }
    }
    if (pending_bytes >= kUploadBatchBytes) KS_RETURN_IF_ERROR(flush());
    ++index;
    if (!reader->ReadRaw(&raw)) break;
    KS_RETURN_IF_ERROR(ReadChunk(raw, index, &chunk));
  }
  KS_RETURN_IF_ERROR(reader->status());
  if (ctx->IsCancelled()) return absl::CancelledError("upload cancelled by the client");
  if (received != total) {
    return absl::InvalidArgumentError(absl::StrCat("data: ", ByteCountMismatch(desc, received)));
  }
  KS_RETURN_IF_ERROR(staged ? staged->Finish() : flush());
  return AddUploaded(state, buffer, info);
}

// A download through shared memory's one message: the buffer's info, no
// data. Sent before the bytes are written, so that the client prepares its
// destination (faults its pages in) meanwhile; the bytes are in the region
// once the call ends OK.
absl::Status SendShmInfo(const Buffer& buffer, grpc::ServerSplitStreamer<grpc::ByteBuffer, grpc::ByteBuffer>* writer) {
  pb::DownloadChunk answer;
  FillInfo(buffer, answer.mutable_info());
  grpc::ByteBuffer out;
  bool own = false;
  if (!grpc::SerializationTraits<pb::DownloadChunk>::Serialize(answer, &out, &own).ok() || !writer->Write(out)) {
    return absl::CancelledError("download: the client went away");
  }
  return absl::OkStatus();
}

// Writes the chunks of a download: each is its message's other fields
// (serialized by protobuf, small) followed by a slice of one host staging
// area that the device's bytes were copied into, sent as is (one copy per
// byte: device to staging; the generated serializer would copy the chunk
// into the message and the message into gRPC's buffer).
absl::Status DoDownload(ServerState* state, grpc::ServerContext* ctx, const pb::DownloadRequest& req,
                        grpc::ServerSplitStreamer<grpc::ByteBuffer, grpc::ByteBuffer>* writer, CallLog* log) {
  constexpr int kDataField = 3;  // tensor.proto's DownloadChunk
  if (req.chunk_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes: expected >= 0 (0: 1 MiB), got ", req.chunk_bytes()));
  }
  KS_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                      state->registry().GetBuffer("buffer_id", req.buffer_id(), state->TenantOf(ctx)));
  int64_t chunk = req.chunk_bytes() == 0 ? kDefaultChunkBytes : req.chunk_bytes();
  chunk = std::min(chunk, state->max_payload_bytes());
  const int64_t total = buffer->desc.num_bytes();
  Backend& backend = state->backend();
  const auto* src = static_cast<const uint8_t*>(buffer->memory->data());
  // Through the caller's shared memory: the bytes go into the region (on a
  // device whose memory is host memory, straight from the buffer; else in
  // batches through staging blocks, as below) and one message says so.
  std::optional<ShmRegion> region;
  if (req.has_shm()) {
    // The size a region must have, for a client that offered a smaller one.
    ctx->AddTrailingMetadata(kShmBufferBytesTrailer, std::to_string(total));
    KS_ASSIGN_OR_RETURN(region, OpenCallersRegion(ctx, "shm", req.shm(), total, /*writable=*/true));
    KS_RETURN_IF_ERROR(SendShmInfo(*buffer, writer));
    if (backend.Capabilities().device_memory_is_host) {
      KS_RETURN_IF_ERROR(state->RunOnDevice(buffer->device, ctx, [&] { return region->Write(0, src, total); }));
      log->AddBytesOut(total);
      return absl::OkStatus();
    }
  }
  // Device to host in batches of whole chunks, charged to the memory limit;
  // without room for a batch, one chunk at a time. A batch's area is a
  // refcounted gRPC slice that its chunks' messages reference, released
  // when the transport is done with the last of them.
  int64_t batch = std::min(total, std::max<int64_t>(chunk, kDownloadBatchBytes / chunk * chunk));
  // Two batches in flight when there are two and the memory limit allows:
  // batch i + 1's device-to-host copy runs on the device's worker while
  // batch i's chunks are written.
  bool overlap = total > batch;
  Reservation staging;
  if (overlap && !state->ChargeHost(buffer->device, buffer->owner, 2 * batch, "download staging", &staging).ok()) {
    overlap = false;
  }
  if (!overlap && batch > chunk &&
      !state->ChargeHost(buffer->device, buffer->owner, batch, "download staging", &staging).ok()) {
    batch = chunk;
  }
  // A batch lands in a staging block of the backend's (page-locked on GPU
  // backends: a copy into pageable memory goes through the driver's small
  // bounce buffers; reused host blocks on the cpu backend: fresh pages fault
  // on every batch), which the slice then owns: the block goes back to the
  // backend's cache when the transport releases the slice.
  auto fetch = [&, batch](int64_t base) -> absl::StatusOr<grpc::Slice> {
    const int64_t m = std::min(batch, total - base);
    std::unique_ptr<StagingMemory> block;
    KS_RETURN_IF_ERROR(state->RunOnDevice(buffer->device, ctx, [&]() -> absl::Status {
      KS_ASSIGN_OR_RETURN(block, backend.AllocateStaging(buffer->device, static_cast<size_t>(m)));
      return backend.CopyToHost(buffer->device, block->data(), src + base, static_cast<size_t>(m));
    }));
    void* data = block->data();
    return grpc::Slice(data, static_cast<size_t>(m), [](void* b) { delete static_cast<StagingMemory*>(b); },
                       block.release());
  };
  pb::DownloadChunk fields;  // the message's fields other than its data
  absl::StatusOr<grpc::Slice> current = total > 0 ? fetch(0) : grpc::Slice();
  // Declared after `current`: on an early return its destructor waits for
  // the copy in flight before the references it holds go.
  std::future<absl::StatusOr<grpc::Slice>> next;
  for (int64_t base = 0; base < total; base += batch) {
    const bool more = base + batch < total;
    if (overlap && more) next = std::async(std::launch::async, fetch, base + batch);
    KS_RETURN_IF_ERROR(current.status());
    const grpc::Slice& host = *current;
    const auto m = static_cast<int64_t>(host.size());
    if (region) {
      KS_RETURN_IF_ERROR(region->Write(base, host.begin(), m));
      log->AddBytesOut(m);
    }
    for (int64_t off = 0; off < m && !region; off += chunk) {
      if (base + off == 0) {
        FillInfo(*buffer, fields.mutable_info());
      } else {
        fields.clear_info();
      }
      const int64_t n = std::min(chunk, m - off);
      fields.set_offset(base + off);
      grpc::ByteBuffer out = wire::WithBytesField(fields.SerializeAsString(), kDataField,
                                                  host.sub(static_cast<size_t>(off), static_cast<size_t>(off + n)));
      if (!writer->Write(out)) return absl::CancelledError("download: the client went away");
      log->AddBytesOut(n);
    }
    if (more) current = overlap ? next.get() : fetch(base + batch);
  }
  return absl::OkStatus();
}

}  // namespace

BufferServiceImpl::BufferServiceImpl(ServerState* state) : state_(state) {
  constexpr int kUploadMethod = 0;  // its position in tensor.proto's BufferService
  MarkMethodStreamed(kUploadMethod, DecodingHandler(this, &BufferServiceImpl::Upload));
  constexpr int kDownloadMethod = 1;
  MarkMethodStreamed(kDownloadMethod,
                     new grpc::internal::SplitServerStreamingHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                         [this](grpc::ServerContext* ctx,
                                grpc::ServerSplitStreamer<grpc::ByteBuffer, grpc::ByteBuffer>* stream) {
                           return Download(ctx, stream);
                         }));
}

grpc::Status BufferServiceImpl::Upload(grpc::ServerContext* ctx, DecodingReader<pb::UploadChunk>* reader,
                                       pb::BufferInfo* info) {
  return state_->Serve("BufferService.Upload", ctx, /*stream=*/true,
                       [&](CallLog* log) { return DoUpload(state_, ctx, reader, info, log); });
}

grpc::Status BufferServiceImpl::Download(grpc::ServerContext* ctx,
                                         grpc::ServerSplitStreamer<grpc::ByteBuffer, grpc::ByteBuffer>* stream) {
  return state_->Serve("BufferService.Download", ctx, /*stream=*/true, [&](CallLog* log) -> absl::Status {
    grpc::ByteBuffer raw;
    pb::DownloadRequest req;
    if (!stream->Read(&raw) || !grpc::SerializationTraits<pb::DownloadRequest>::Deserialize(&raw, &req).ok()) {
      return absl::InvalidArgumentError("request: not a valid protobuf message of the method's request type");
    }
    return DoDownload(state_, ctx, req, stream, log);
  });
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
