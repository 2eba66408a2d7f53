#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/api/ops.h"
#include "kernels/api/status_macros.h"
#include "server/call_log.h"
#include "server/ids.h"
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
    pool->row_elements = 2 * pool->num_heads * pool->head_dim;
  }
  pool->dtype = dtype;
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
    // A new pool reads back as zeros.
    std::vector<uint8_t> zeros(static_cast<size_t>(std::min(size, kZeroFillBytes)), 0);
    for (int64_t off = 0; off < size; off += kZeroFillBytes) {
      const int64_t n = std::min(kZeroFillBytes, size - off);
      KS_RETURN_IF_ERROR(backend.CopyToDevice(pool->device, static_cast<uint8_t*>(pool->memory->data()) + off,
                                              zeros.data(), static_cast<size_t>(n)));
    }
    return absl::OkStatus();
  }));
  pool->created_unix_ms = absl::ToUnixMillis(absl::Now());
  state->registry().AddPool(pool);
  FillInfo(*pool, info);
  return absl::OkStatus();
}

// Slot indices of an int32 or int64 [n] tensor, each checked against the pool.
absl::StatusOr<std::vector<int64_t>> ParseSlots(absl::string_view field, const pb::Tensor& t,
                                                const Pool& pool) {
  KS_ASSIGN_OR_RETURN(const TensorDesc desc, CheckTensor(field, t));
  if (desc.dtype != DType::kInt32 && desc.dtype != DType::kInt64) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".dtype: expected int32 or int64, got ", DTypeName(desc.dtype)));
  }
  if (desc.rank() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: expected [n], got ", ShapeString(desc.shape)));
  }
  const int64_t n = desc.dim(0);
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (desc.dtype == DType::kInt32) {
      int32_t v;
      std::memcpy(&v, t.data().data() + 4 * i, 4);
      slots[i] = v;
    } else {
      std::memcpy(&slots[i], t.data().data() + 8 * i, 8);
    }
    if (slots[i] < 0 || slots[i] >= pool.num_slots) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "]: slot ", slots[i],
                                                     " out of range [0, ", pool.num_slots, ")"));
    }
  }
  return slots;
}

// Runs of consecutive slots, so rows move in as few copies as possible.
template <typename Fn>
absl::Status ForEachRun(const std::vector<int64_t>& slots, Fn fn) {
  size_t i = 0;
  while (i < slots.size()) {
    size_t j = i + 1;
    while (j < slots.size() && slots[j] == slots[j - 1] + 1) ++j;
    KS_RETURN_IF_ERROR(fn(static_cast<int64_t>(i), slots[i], static_cast<int64_t>(j - i)));
    i = j;
  }
  return absl::OkStatus();
}

absl::Status DoWrite(ServerState* state, grpc::ServerContext* ctx,
                     grpc::ServerReader<pb::WritePoolChunk>* reader, pb::WritePoolResponse* resp,
                     CallLog* log) {
  const std::string tenant = state->TenantOf(ctx);
  std::shared_ptr<Pool> pool;
  pb::WritePoolChunk chunk;
  int64_t written = 0;
  int64_t index = 0;
  while (reader->Read(&chunk)) {
    if (index == 0) {
      if (chunk.pool_id().empty()) {
        return absl::InvalidArgumentError("pool_id: the first message must name the pool");
      }
      KS_ASSIGN_OR_RETURN(pool, state->registry().GetPool("pool_id", chunk.pool_id(), tenant));
    } else if (!chunk.pool_id().empty() && chunk.pool_id() != pool->id) {
      return absl::InvalidArgumentError(absl::StrCat("pool_id: message ", index, " names pool \"",
                                                     chunk.pool_id(), "\", the stream writes \"",
                                                     pool->id, "\""));
    }
    KS_RETURN_IF_ERROR(state->CheckDevice("device", pool->device));
    // Validate the whole message before writing any of it.
    KS_ASSIGN_OR_RETURN(const std::vector<int64_t> slots, ParseSlots("slots", chunk.slots(), *pool));
    KS_ASSIGN_OR_RETURN(const TensorDesc rows, CheckTensor("rows", chunk.rows()));
    if (rows.dtype != pool->dtype) {
      return absl::InvalidArgumentError(absl::StrCat("rows.dtype: expected ", DTypeName(pool->dtype),
                                                     " (the pool's), got ", DTypeName(rows.dtype)));
    }
    const int64_t n = static_cast<int64_t>(slots.size());
    if (rows.rank() != 2 || rows.dim(0) != n || rows.dim(1) != pool->row_elements) {
      return absl::InvalidArgumentError(absl::StrCat("rows.shape: expected [", n, ",",
                                                     pool->row_elements, "] (slots x row width), got ",
                                                     ShapeString(rows.shape)));
    }
    log->AddBytesIn(static_cast<int64_t>(chunk.rows().data().size()));
    const int64_t row_bytes = pool->row_bytes();
    const char* src = chunk.rows().data().data();
    Backend& backend = state->backend();
    uint8_t* base = static_cast<uint8_t*>(pool->memory->data());
    KS_RETURN_IF_ERROR(state->RunOnDevice(pool->device, ctx, [&]() -> absl::Status {
      return ForEachRun(slots, [&](int64_t first, int64_t slot, int64_t count) {
        return backend.CopyToDevice(pool->device, base + slot * row_bytes, src + first * row_bytes,
                                    static_cast<size_t>(count * row_bytes));
      });
    }));
    pool->rows_written += n;
    written += n;
    ++index;
  }
  if (index == 0) return absl::InvalidArgumentError("pool_id: the stream was empty");
  resp->set_rows_written(written);
  FillInfo(*pool, resp->mutable_pool());
  return absl::OkStatus();
}

absl::Status DoRead(ServerState* state, grpc::ServerContext* ctx, const pb::ReadPoolRequest& req,
                    grpc::ServerWriter<pb::ReadPoolChunk>* writer, CallLog* log) {
  KS_ASSIGN_OR_RETURN(std::shared_ptr<Pool> pool,
                      state->registry().GetPool("pool_id", req.pool_id(), state->TenantOf(ctx)));
  KS_RETURN_IF_ERROR(state->CheckDevice("device", pool->device));
  std::vector<int64_t> slots;
  if (req.has_slots()) {
    if (req.start() != 0 || req.count() != 0) {
      return absl::InvalidArgumentError("slots: give either slots or start/count, not both");
    }
    KS_ASSIGN_OR_RETURN(slots, ParseSlots("slots", req.slots(), *pool));
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
    slots.resize(static_cast<size_t>(req.count()));
    for (int64_t i = 0; i < req.count(); ++i) slots[i] = req.start() + i;
  }
  if (req.chunk_rows() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_rows: expected >= 0 (0: server default), got ", req.chunk_rows()));
  }
  const int64_t row_bytes = pool->row_bytes();
  const int64_t max_rows = std::max<int64_t>(1, state->max_payload_bytes() / row_bytes);
  int64_t chunk_rows = req.chunk_rows() == 0 ? std::max<int64_t>(1, kDefaultReadChunkBytes / row_bytes)
                                             : req.chunk_rows();
  chunk_rows = std::min(chunk_rows, max_rows);
  const int64_t n = static_cast<int64_t>(slots.size());
  std::string host(static_cast<size_t>(n * row_bytes), '\0');
  const uint8_t* base = static_cast<const uint8_t*>(pool->memory->data());
  Backend& backend = state->backend();
  KS_RETURN_IF_ERROR(state->RunOnDevice(pool->device, ctx, [&]() -> absl::Status {
    return ForEachRun(slots, [&](int64_t first, int64_t slot, int64_t count) {
      return backend.CopyToHost(pool->device, host.data() + first * row_bytes, base + slot * row_bytes,
                                static_cast<size_t>(count * row_bytes));
    });
  }));
  for (int64_t r = 0; r < n; r += chunk_rows) {
    const int64_t m = std::min(chunk_rows, n - r);
    pb::ReadPoolChunk out;
    if (r == 0) FillInfo(*pool, out.mutable_pool());
    DescToProto(TensorDesc{pool->dtype, {m, pool->row_elements}}, out.mutable_rows());
    out.mutable_rows()->set_data(host.data() + r * row_bytes, static_cast<size_t>(m * row_bytes));
    if (!writer->Write(out)) return absl::CancelledError("read: the client went away");
    log->AddBytesOut(m * row_bytes);
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status PoolServiceImpl::Create(grpc::ServerContext* ctx, const pb::CreatePoolRequest* req,
                                     pb::PoolInfo* info) {
  CallLog log("PoolService.Create", ctx, &state_->calls());
  auto admission = state_->Admit(ctx);  // token, rate limits
  if (!admission.ok()) return log.Done(admission.status());
  return log.Done(DoCreate(state_, ctx, *req, info));
}

grpc::Status PoolServiceImpl::Write(grpc::ServerContext* ctx,
                                    grpc::ServerReader<pb::WritePoolChunk>* reader,
                                    pb::WritePoolResponse* resp) {
  CallLog log("PoolService.Write", ctx, &state_->calls());
  auto admission = state_->Admit(ctx, /*stream=*/true);  // token, rate, stream limits
  if (!admission.ok()) return log.Done(admission.status());
  return log.Done(DoWrite(state_, ctx, reader, resp, &log));
}

grpc::Status PoolServiceImpl::Read(grpc::ServerContext* ctx, const pb::ReadPoolRequest* req,
                                   grpc::ServerWriter<pb::ReadPoolChunk>* writer) {
  CallLog log("PoolService.Read", ctx, &state_->calls());
  auto admission = state_->Admit(ctx, /*stream=*/true);  // token, rate, stream limits
  if (!admission.ok()) return log.Done(admission.status());
  return log.Done(DoRead(state_, ctx, *req, writer, &log));
}

grpc::Status PoolServiceImpl::Stats(grpc::ServerContext* ctx, const pb::PoolStatsRequest* req,
                                    pb::PoolInfo* info) {
  CallLog log("PoolService.Stats", ctx, &state_->calls());
  auto admission = state_->Admit(ctx);  // token, rate limits
  if (!admission.ok()) return log.Done(admission.status());
  auto pool = state_->registry().GetPool("pool_id", req->pool_id(), state_->TenantOf(ctx));
  if (pool.ok()) FillInfo(**pool, info);
  return log.Done(pool.status());
}

grpc::Status PoolServiceImpl::Delete(grpc::ServerContext* ctx, const pb::DeletePoolRequest* req,
                                     pb::DeletePoolResponse* resp) {
  CallLog log("PoolService.Delete", ctx, &state_->calls());
  auto admission = state_->Admit(ctx);  // token, rate limits
  if (!admission.ok()) return log.Done(admission.status());
  return log.Done(state_->registry().RemovePool("pool_id", req->pool_id(), state_->TenantOf(ctx)));
}

grpc::Status PoolServiceImpl::List(grpc::ServerContext* ctx, const pb::ListPoolsRequest* req,
                                   pb::ListPoolsResponse* resp) {
  CallLog log("PoolService.List", ctx, &state_->calls());
  auto admission = state_->Admit(ctx);  // token, rate limits
  if (!admission.ok()) return log.Done(admission.status());
  for (const auto& p : state_->registry().ListPools(state_->TenantOf(ctx))) {
    FillInfo(*p, resp->add_pools());
  }
  return log.Done(absl::OkStatus());
}

}  // namespace kernelserve
