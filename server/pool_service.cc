#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "kernels/api/ops.h"
#include "server/call_log.h"
#include "server/ids.h"
#include "server/input_checks.h"
#include "server/services.h"
#include "server/tensor_proto.h"

namespace kernelserve {
namespace {

constexpr int64_t kDefaultReadChunkBytes = 1 << 20;
constexpr int64_t kZeroFillBytes = 16 << 20;

void FillInfo(const Pool& p, pb::PoolInfo* info) {
  info->set_id(p.id);
  info->set_kind(static_cast<pb::PoolKind>(p.kind));
  info->set_num_slots(p.num_slots);
  info->set_page_size(static_cast<int32_t>(p.page_size));
  info->set_dtype(static_cast<pb::DType>(p.dtype));
  info->set_row_elements(p.row_elements);
  info->set_num_heads(static_cast<int32_t>(p.num_heads));
  info->set_head_dim(static_cast<int32_t>(p.head_dim));
  info->set_kv_scale(p.kv_scale);
  info->set_size_bytes(p.size_bytes());
  info->set_rows_written(p.rows_written.load());
  info->set_device(p.device);
  info->set_label(p.label);
  info->set_created_unix_ms(p.created_unix_ms);
}

absl::Status DoCreate(ServerState* state, grpc::ServerContext* ctx, const pb::CreatePoolRequest& req,
                      pb::PoolInfo* info) {
  auto pool = std::make_shared<Pool>();
  if (req.kind() != pb::MLA_FUSED && req.kind() != pb::PER_HEAD_KV) {
    return absl::InvalidArgumentError(
        absl::StrCat("kind: expected MLA_FUSED or PER_HEAD_KV, got ", static_cast<int>(req.kind())));
  }
  pool->kind = static_cast<PoolKind>(req.kind());
  pool->page_size = req.page_size() == 0 ? 1 : req.page_size();
  if (pool->page_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: expected >= 1 (0 means 1), got ", req.page_size()));
  }
  if (req.num_slots() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_slots: expected > 0, got ", req.num_slots()));
  }
  if (req.num_slots() % pool->page_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_slots: expected a multiple of page_size ",
                                                   pool->page_size, ", got ", req.num_slots()));
  }
  pool->num_slots = req.num_slots();
  const int dt = req.dtype();
  const DType dtype = static_cast<DType>(dt);
  if (pool->kind == PoolKind::kMlaFused) {
    if (dtype != DType::kFp8E4M3Fn && dtype != DType::kFp8E4M3Fnuz) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype: MLA_FUSED pools hold fp8_e4m3fn or fp8_e4m3fnuz rows, got ",
          IsValidDType(dt) ? DTypeName(dtype) : absl::StrCat("unknown dtype value ", dt)));
    }
    if (req.num_heads() != 0 || req.head_dim() != 0) {
      return absl::InvalidArgumentError(
          "num_heads, head_dim: PER_HEAD_KV only; MLA_FUSED rows are 576 wide");
    }
    pool->row_elements = kMlaRowDim;
  } else {
    if (dtype != DType::kBf16 && !IsFp8(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype: PER_HEAD_KV pools hold bf16 or fp8 rows, got ",
          IsValidDType(dt) ? DTypeName(dtype) : absl::StrCat("unknown dtype value ", dt)));
    }
    if (req.num_heads() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("num_heads: expected > 0, got ", req.num_heads()));
    }
    if (req.head_dim() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("head_dim: expected > 0, got ", req.head_dim()));
    }
    pool->num_heads = req.num_heads();
    pool->head_dim = req.head_dim();
    // Under 2^63 for any int32 heads and dims; the row-size check below bounds it.
    pool->row_elements = 2 * pool->num_heads * pool->head_dim;
  }
  pool->dtype = dtype;
  // Rows travel whole in Write and Read messages, so a row must fit in one.
  const double row_bytes = static_cast<double>(pool->row_elements) * DTypeBits(dtype) / 8;
  if (row_bytes > static_cast<double>(state->max_payload_bytes())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_heads, head_dim: a row of 2 x ", pool->num_heads, " x ", pool->head_dim, " ", DTypeName(dtype),
        " is ", row_bytes, " bytes, over the ", state->max_payload_bytes(),
        " bytes a message may carry (--max_message_mb)"));
  }
  KS_RETURN_IF_ERROR(CheckLength("label", req.label()));
  pool->kv_scale = req.kv_scale() == 0 ? 1.0 : req.kv_scale();
  if (!std::isfinite(pool->kv_scale) || pool->kv_scale <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_scale: expected a finite value > 0 (0 means 1), got ", req.kv_scale()));
  }
  KS_RETURN_IF_ERROR(state->CheckDevice("device", req.device()));
  pool->device = req.device();
  const int64_t size = NumBytes(dtype, NumElements({pool->num_slots, pool->row_elements}));
  if (size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_slots: ", pool->num_slots, " rows of ", pool->row_elements, " overflow int64"));
  }
  pool->id = NewId("pool");
  pool->owner = state->TenantOf(ctx);
  pool->label = req.label();
  const std::string what = absl::StrCat("pool ", DTypeName(dtype), "[", pool->num_slots, ",",
                                        pool->row_elements, "]");
  Backend& backend = state->backend();
  KS_RETURN_IF_ERROR(state->RunOnDevice(pool->device, ctx, [&]() -> absl::Status {
    KS_RETURN_IF_ERROR(state->Allocate(pool->device, pool->owner, size, what, &pool->reservation,
                                       &pool->memory));
    // A new pool reads back as zeros, copied from one zero block that every
    // create shares (a block per call would be host memory no limit counts).
    static const std::vector<uint8_t>* const kZeros = new std::vector<uint8_t>(kZeroFillBytes, 0);
    for (int64_t off = 0; off < size; off += kZeroFillBytes) {
      const int64_t n = std::min(kZeroFillBytes, size - off);
      KS_RETURN_IF_ERROR(backend.CopyToDevice(pool->device, static_cast<uint8_t*>(pool->memory->data()) + off,
                                              kZeros->data(), static_cast<size_t>(n)));
    }
    return absl::OkStatus();
  }));
  pool->created_unix_ms = absl::ToUnixMillis(absl::Now());
  state->registry().AddPool(pool);
  FillInfo(*pool, info);
  return absl::OkStatus();
}

// The slots a read or write names: the values of an int32 or int64 [n]
// tensor (not owned; each checked against the pool when built) or the range
// [start, start + count). Never materialised: a read of 2^20 slots costs no
// more host memory than a read of one chunk.
class SlotList {
 public:
  static absl::StatusOr<SlotList> FromTensor(absl::string_view field, const pb::Tensor& t, const Pool& pool) {
    KS_ASSIGN_OR_RETURN(const TensorDesc desc, CheckTensor(field, t));
    if (desc.dtype != DType::kInt32 && desc.dtype != DType::kInt64) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".dtype: expected int32 or int64, got ", DTypeName(desc.dtype)));
    }
    if (desc.rank() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape: expected [n], got ", ShapeString(desc.shape)));
    }
    SlotList list;
    list.data_ = t.data().data();
    list.wide_ = desc.dtype == DType::kInt64;
    list.size_ = desc.dim(0);
    for (int64_t i = 0; i < list.size_; ++i) {
      const int64_t slot = list[i];
      if (slot < 0 || slot >= pool.num_slots) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, "[", i, "]: slot ", slot, " out of range [0, ", pool.num_slots, ")"));
      }
    }
    return list;
  }
  static SlotList Range(int64_t start, int64_t count) {
    SlotList list;
    list.start_ = start;
    list.size_ = count;
    return list;
  }

  int64_t size() const { return size_; }
  int64_t operator[](int64_t i) const {
    if (data_ == nullptr) return start_ + i;
    if (wide_) {
      int64_t v;
      std::memcpy(&v, data_ + 8 * i, 8);
      return v;
    }
    int32_t v;
    std::memcpy(&v, data_ + 4 * i, 4);
    return v;
  }

  // fn(first, slot, count) for each run of consecutive slots among entries
  // [begin, end), so rows move in as few copies as possible.
  template <typename Fn>
  absl::Status ForEachRun(int64_t begin, int64_t end, Fn fn) const {
    int64_t i = begin;
    while (i < end) {
      int64_t j = i + 1;
      while (j < end && (*this)[j] == (*this)[j - 1] + 1) ++j;
      KS_RETURN_IF_ERROR(fn(i, (*this)[i], j - i));
      i = j;
    }
    return absl::OkStatus();
  }

 private:
  const char* data_ = nullptr;
  bool wide_ = false;
  int64_t start_ = 0;
  int64_t size_ = 0;
};

// One validated message of a write stream, held until the stream ends: its
// slots and rows moved out of the message.
struct StagedRows {
  pb::Tensor slots;
  std::string rows;
};

// The stream is staged whole (charged to the device's memory limit) and
// written in one device task at its end: a bad message anywhere, a client
// that goes away or a memory refusal leaves the pool as it was.
absl::Status DoWrite(ServerState* state, grpc::ServerContext* ctx, DecodingReader<pb::WritePoolChunk>* reader,
                     pb::WritePoolResponse* resp, CallLog* log) {
  const std::string tenant = state->TenantOf(ctx);
  std::shared_ptr<Pool> pool;
  pb::WritePoolChunk chunk;
  std::vector<StagedRows> staged;
  Reservation staging;
  int64_t written = 0;
  int64_t index = 0;
  // Errors name the message; nothing of the stream was written.
  auto in_message = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(s.message(), " (message ", index,
                                               " of the write stream; nothing was written)"));
  };
  while (reader->Read(&chunk)) {
    if (index == 0) {
      if (chunk.pool_id().empty()) {
        return absl::InvalidArgumentError("pool_id: the first message must name the pool");
      }
      KS_ASSIGN_OR_RETURN(pool, state->registry().GetPool("pool_id", chunk.pool_id(), tenant));
      KS_RETURN_IF_ERROR(state->CheckDevice("device", pool->device));
    } else if (!chunk.pool_id().empty() && chunk.pool_id() != pool->id) {
      return in_message(absl::InvalidArgumentError(absl::StrCat(
          "pool_id: names pool ", QuoteClientText(chunk.pool_id()), ", the stream writes \"", pool->id, "\"")));
    }
    auto slots = SlotList::FromTensor("slots", chunk.slots(), *pool);
    if (!slots.ok()) return in_message(slots.status());
    auto rows = CheckTensor("rows", chunk.rows());
    if (!rows.ok()) return in_message(rows.status());
    if (rows->dtype != pool->dtype) {
      return in_message(absl::InvalidArgumentError(absl::StrCat(
          "rows.dtype: expected ", DTypeName(pool->dtype), " (the pool's), got ", DTypeName(rows->dtype))));
    }
    const int64_t n = slots->size();
    if (rows->rank() != 2 || rows->dim(0) != n || rows->dim(1) != pool->row_elements) {
      return in_message(absl::InvalidArgumentError(
          absl::StrCat("rows.shape: expected [", n, ",", pool->row_elements, "] (slots x row width), got ",
                       ShapeString(rows->shape))));
    }
    if (state->reject_nonfinite()) {
      absl::Status finite = CheckFinite("rows", *rows, chunk.rows().data().data(), 0, rows->num_elements());
      if (!finite.ok()) return in_message(finite);
    }
    const int64_t bytes = static_cast<int64_t>(chunk.rows().data().size() + chunk.slots().data().size());
    log->AddBytesIn(bytes);
    absl::Status charged = state->ChargeHost(pool->device, tenant, bytes,
                                             absl::StrCat("pool write staging (message ", index, ")"), &staging);
    if (!charged.ok()) return in_message(charged);
    StagedRows s;
    s.slots = std::move(*chunk.mutable_slots());
    s.rows = std::move(*chunk.mutable_rows()->mutable_data());
    staged.push_back(std::move(s));
    written += n;
    chunk.Clear();
    ++index;
  }
  if (!reader->status().ok()) {
    return absl::Status(reader->status().code(), absl::StrCat(reader->status().message(), "; nothing was written"));
  }
  if (index == 0) return absl::InvalidArgumentError("pool_id: the stream was empty");
  if (ctx->IsCancelled()) return absl::CancelledError("pool write cancelled by the client; nothing was written");
  KS_RETURN_IF_ERROR(state->CheckDevice("device", pool->device));
  const int64_t row_bytes = pool->row_bytes();
  Backend& backend = state->backend();
  uint8_t* base = static_cast<uint8_t*>(pool->memory->data());
  KS_RETURN_IF_ERROR(state->RunOnDevice(pool->device, ctx, [&]() -> absl::Status {
    for (const StagedRows& s : staged) {
      // Validated when staged (the views into the message moved with its bytes).
      KS_ASSIGN_OR_RETURN(const SlotList slots, SlotList::FromTensor("slots", s.slots, *pool));
      const char* src = s.rows.data();
      KS_RETURN_IF_ERROR(slots.ForEachRun(0, slots.size(), [&](int64_t first, int64_t slot, int64_t count) {
        return backend.CopyToDevice(pool->device, base + slot * row_bytes, src + first * row_bytes,
                                    static_cast<size_t>(count * row_bytes));
      }));
    }
    return absl::OkStatus();
  }));
  pool->rows_written += written;
  resp->set_rows_written(written);
  FillInfo(*pool, resp->mutable_pool());
  return absl::OkStatus();
}

// Streams the rows chunk by chunk, each copied from the pool straight into
// the message that carries it: host memory is one message whatever the
// number of slots.
absl::Status DoRead(ServerState* state, grpc::ServerContext* ctx, const pb::ReadPoolRequest& req,
                    grpc::ServerWriter<pb::ReadPoolChunk>* writer, CallLog* log) {
  KS_ASSIGN_OR_RETURN(std::shared_ptr<Pool> pool,
                      state->registry().GetPool("pool_id", req.pool_id(), state->TenantOf(ctx)));
  KS_RETURN_IF_ERROR(state->CheckDevice("device", pool->device));
  SlotList slots;
  if (req.has_slots()) {
    if (req.start() != 0 || req.count() != 0) {
      return absl::InvalidArgumentError("slots: give either slots or start/count, not both");
    }
    KS_ASSIGN_OR_RETURN(slots, SlotList::FromTensor("slots", req.slots(), *pool));
  } else {
    if (req.start() < 0 || req.start() >= pool->num_slots) {
      return absl::InvalidArgumentError(absl::StrCat("start: expected a slot in [0, ", pool->num_slots,
                                                     "), got ", req.start()));
    }
    if (req.count() <= 0 || req.count() > pool->num_slots - req.start()) {
      return absl::InvalidArgumentError(absl::StrCat("count: expected 1..", pool->num_slots - req.start(),
                                                     " (rows from start to the pool's end), got ",
                                                     req.count()));
    }
    slots = SlotList::Range(req.start(), req.count());
  }
  if (req.chunk_rows() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_rows: expected >= 0 (0: server default), got ", req.chunk_rows()));
  }
  const int64_t row_bytes = pool->row_bytes();
  const int64_t max_rows = state->max_payload_bytes() / row_bytes;
  if (max_rows < 1) {
    return absl::ResourceExhaustedError(absl::StrCat("pool ", pool->id, ": a row is ", row_bytes,
                                                     " bytes, over the ", state->max_payload_bytes(),
                                                     " bytes a message may carry (--max_message_mb)"));
  }
  int64_t chunk_rows = req.chunk_rows() == 0 ? std::max<int64_t>(1, kDefaultReadChunkBytes / row_bytes)
                                             : req.chunk_rows();
  chunk_rows = std::min(chunk_rows, max_rows);
  const int64_t n = slots.size();
  const uint8_t* base = static_cast<const uint8_t*>(pool->memory->data());
  Backend& backend = state->backend();
  pb::ReadPoolChunk out;  // reused: its data string keeps its capacity
  for (int64_t r = 0; r < n; r += chunk_rows) {
    const int64_t m = std::min(chunk_rows, n - r);
    if (r == 0) {
      FillInfo(*pool, out.mutable_pool());
    } else {
      out.clear_pool();
    }
    DescToProto(TensorDesc{pool->dtype, {m, pool->row_elements}}, out.mutable_rows());
    std::string* data = out.mutable_rows()->mutable_data();
    data->resize(static_cast<size_t>(m * row_bytes));
    KS_RETURN_IF_ERROR(state->RunOnDevice(pool->device, ctx, [&]() -> absl::Status {
      return slots.ForEachRun(r, r + m, [&](int64_t first, int64_t slot, int64_t count) {
        return backend.CopyToHost(pool->device, data->data() + (first - r) * row_bytes, base + slot * row_bytes,
                                  static_cast<size_t>(count * row_bytes));
      });
    }));
    if (!writer->Write(out)) return absl::CancelledError("read: the client went away");
    log->AddBytesOut(m * row_bytes);
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status PoolServiceImpl::Create(grpc::ServerContext* ctx, const pb::CreatePoolRequest* req,
                                     pb::PoolInfo* info) {
  return state_->Serve("PoolService.Create", ctx, /*stream=*/false,
                       [&](CallLog*) { return DoCreate(state_, ctx, *req, info); });
}

PoolServiceImpl::PoolServiceImpl(ServerState* state) : state_(state) {
  constexpr int kWriteMethod = 1;  // its position in pool.proto's PoolService
  MarkMethodStreamed(kWriteMethod, DecodingHandler(this, &PoolServiceImpl::Write));
}

grpc::Status PoolServiceImpl::Write(grpc::ServerContext* ctx, DecodingReader<pb::WritePoolChunk>* reader,
                                    pb::WritePoolResponse* resp) {
  return state_->Serve("PoolService.Write", ctx, /*stream=*/true,
                       [&](CallLog* log) { return DoWrite(state_, ctx, reader, resp, log); });
}

grpc::Status PoolServiceImpl::Read(grpc::ServerContext* ctx, const pb::ReadPoolRequest* req,
                                   grpc::ServerWriter<pb::ReadPoolChunk>* writer) {
  return state_->Serve("PoolService.Read", ctx, /*stream=*/true,
                       [&](CallLog* log) { return DoRead(state_, ctx, *req, writer, log); });
}

grpc::Status PoolServiceImpl::Stats(grpc::ServerContext* ctx, const pb::PoolStatsRequest* req,
                                    pb::PoolInfo* info) {
  return state_->Serve("PoolService.Stats", ctx, /*stream=*/false, [&](CallLog*) -> absl::Status {
    KS_ASSIGN_OR_RETURN(auto pool, state_->registry().GetPool("pool_id", req->pool_id(), state_->TenantOf(ctx)));
    FillInfo(*pool, info);
    return absl::OkStatus();
  });
}

grpc::Status PoolServiceImpl::Delete(grpc::ServerContext* ctx, const pb::DeletePoolRequest* req,
                                     pb::DeletePoolResponse* resp) {
  return state_->Serve("PoolService.Delete", ctx, /*stream=*/false, [&](CallLog*) {
    return state_->registry().RemovePool("pool_id", req->pool_id(), state_->TenantOf(ctx));
  });
}

grpc::Status PoolServiceImpl::List(grpc::ServerContext* ctx, const pb::ListPoolsRequest* req,
                                   pb::ListPoolsResponse* resp) {
  return state_->Serve("PoolService.List", ctx, /*stream=*/false, [&](CallLog*) {
    ListInto(state_->registry().ListPools(state_->TenantOf(ctx)), state_->max_payload_bytes(), resp,
             &pb::ListPoolsResponse::add_pools, &FillInfo);
    return absl::OkStatus();
  });
}

}  // namespace kernelserve
