// Kernel calls: resolve each TensorRef (inline tensor or buffer), validate
// with the op's shared Validate, run on the device worker, return the output
// inline or as a new buffer, and on request the error against the oracle.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/shm_ring.h"
#include "common/status_macros.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/method_handler.h"
#include "kernels/api/error_report.h"
#include "kernels/api/ops.h"
#include "server/call_log.h"
#include "server/ids.h"
#include "server/input_checks.h"
#include "server/services.h"
#include "server/status_mapping.h"
#include "server/tensor_proto.h"

namespace kernelserve {
namespace {

// One tensor argument of a call.
struct Input {
  std::string field;
  bool present = false;
  TensorDesc desc;
  const pb::Tensor* inline_tensor = nullptr;  // points into the request
  std::shared_ptr<Buffer> buffer;
  std::shared_ptr<Pool> pool;
  // Inline data staged on the device (worker thread).
  Reservation staged_reservation;
  std::unique_ptr<DeviceMemory> staged;
  TensorView view;  // device view, valid on the worker once staged
  bool has_host = false;
  HostTensor host;

  const HostTensor* host_or_null() const { return present ? &host : nullptr; }
  const TensorDesc* desc_or_null() const { return present ? &desc : nullptr; }
  TensorView host_view() const { return present ? host.view() : TensorView{}; }
};

// What an op call runs on the worker; see OpCall::Execute.
struct OpHooks {
  std::function<absl::Status()> validate;  // sees descriptors and the host index copies
  std::function<TensorDesc()> out_desc;    // the op's OutputDesc, once validated
  std::function<absl::Status(TensorView&)> run;
  // Bytes the backend allocates for the op that a request knob multiplies
  // (not its inputs and output); empty: none.
  std::function<int64_t()> workspace_bytes;
  // Working set of the fp64 oracle for report_error (its fp64 copies of the
  // inputs and output); empty: none.
  std::function<int64_t()> oracle_bytes;
};

class OpCall {
 public:
  OpCall(ServerState* state, grpc::ServerContext* ctx, CallLog* log)
      : state_(state), ctx_(ctx), log_(log), tenant_(state->TenantOf(ctx)) {}

  int device() const { return device_; }
  const TaskTiming& timing() const { return timing_; }

  absl::Status SetDevice(int device) {
    KS_RETURN_IF_ERROR(state_->CheckDevice("device", device));
    device_ = device;
    return absl::OkStatus();
  }

  // Resolves a TensorRef; an absent optional ref leaves `in` not present.
  absl::Status Resolve(absl::string_view field, const pb::TensorRef& ref, bool required, Input* in) {
    in->field = std::string(field);
    switch (ref.source_case()) {
      case pb::TensorRef::kTensor: {
        KS_ASSIGN_OR_RETURN(in->desc, CheckTensor(field, ref.tensor()));
        in->inline_tensor = &ref.tensor();
        log_->AddBytesIn(static_cast<int64_t>(ref.tensor().data().size()));
        break;
      }
      case pb::TensorRef::kBufferId: {
        KS_ASSIGN_OR_RETURN(in->buffer, state_->registry().GetBuffer(
                                            absl::StrCat(field, ".buffer_id"), ref.buffer_id(), tenant_));
        if (in->buffer->device != device_) {
          return absl::InvalidArgumentError(absl::StrCat(field, ".buffer_id: buffer ", QuoteClientText(ref.buffer_id()),
                                                         " is on device ", in->buffer->device,
                                                         ", the call runs on device ", device_));
        }
        in->desc = in->buffer->desc;
        break;
      }
      default:
        if (required) {
          return absl::InvalidArgumentError(absl::StrCat(field, ": required (a tensor or a buffer_id)"));
        }
        return absl::OkStatus();
    }
    in->present = true;
    inputs_.push_back(in);
    return absl::OkStatus();
  }

  absl::Status ResolvePool(absl::string_view field, const std::string& id, Input* in) {
    in->field = std::string(field);
    KS_ASSIGN_OR_RETURN(in->pool, state_->registry().GetPool(field, id, tenant_));
    if (in->pool->device != device_) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": pool ", QuoteClientText(id), " is on device ",
                                                     in->pool->device, ", the call runs on device ",
                                                     device_));
    }
    in->desc = in->pool->view().desc;
    in->present = true;
    inputs_.push_back(in);
    return absl::OkStatus();
  }

  // Index tensors whose values Validate checks: host copies before Validate.
  void NeedHostBeforeValidate(Input* in) {
    if (in->present) pre_validate_host_.push_back(in);
  }

  // Runs the call on the device worker: the host index copies, `validate`,
  // the memory the call needs charged (inputs staged, output, workspace, and
  // for report_error the host copies and the oracle's working set) before
  // any of it is allocated, the non-finite check, then `run`.
  absl::Status Execute(const pb::OutputSpec& output, bool report_error, const OpHooks& op,
                       pb::TensorRef* out_ref) {
    KS_RETURN_IF_ERROR(CheckLength("output.label", output.label()));
    Backend& backend = state_->backend();
    const int device = device_;
    std::string* inline_out = output.to_buffer() ? nullptr : out_ref->mutable_tensor()->mutable_data();
    std::shared_ptr<Buffer> out_buffer;
    log_->Mark("resolve");
    const bool inline_ok = !backend.Capabilities().device_memory_is_host || InputBytes() <= kInlineCallBytes;
    const DeviceWorker::Placement placement =
        inline_ok ? DeviceWorker::Placement::kInlineWhenIdle : DeviceWorker::Placement::kWorker;
    absl::Status status = state_->RunOnDevice(device, ctx_, [&]() -> absl::Status {
      log_->Mark("queue");
      for (Input* in : pre_validate_host_) {
        KS_RETURN_IF_ERROR(Charge(in->desc.num_bytes(), absl::StrCat("host copy of ", in->field)));
        KS_RETURN_IF_ERROR(FetchHost(in));
      }
      KS_RETURN_IF_ERROR(WithUploadHint(op.validate()));
      log_->Mark("validate");
      const TensorDesc od = op.out_desc();
      const int64_t out_bytes = od.num_bytes();
      if (inline_out != nullptr && out_bytes > state_->max_payload_bytes()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "out: ", od.DebugString(), " is ", out_bytes, " bytes, over the ",
            state_->max_payload_bytes(), " bytes an inline response may carry (--max_message_mb); "
            "set output.to_buffer and download the buffer"));
      }
      if (op.workspace_bytes) KS_RETURN_IF_ERROR(Charge(op.workspace_bytes(), "op workspace"));
      if (report_error) {
        int64_t copies = out_bytes;
        for (const Input* in : inputs_) copies += in->has_host ? 0 : in->desc.num_bytes();
        KS_RETURN_IF_ERROR(Charge(copies, "report_error: host copies of the inputs and output"));
        if (op.oracle_bytes) KS_RETURN_IF_ERROR(Charge(op.oracle_bytes(), "report_error: the fp64 oracle"));
      }
      if (state_->reject_nonfinite()) {
        for (Input* in : inputs_) KS_RETURN_IF_ERROR(CheckFinite(in));
      }
      // An inline output of a small call comes back through the same staging
      // block, queued behind the op: one stream round trip for the call
      // instead of a second, synchronous copy into pageable memory after it.
      KS_RETURN_IF_ERROR(StageInputs(inline_out != nullptr ? out_bytes : 0));
      out_buffer = std::make_shared<Buffer>();
      out_buffer->desc = od;
      KS_RETURN_IF_ERROR(state_->Allocate(device, tenant_, out_bytes, absl::StrCat("out ", od.DebugString()),
                                          &out_buffer->reservation, &out_buffer->memory));
      TensorView out = out_buffer->view();
      log_->Mark("stage");
      KS_RETURN_IF_ERROR(op.run(out));
      if (out_staging_ != nullptr) {
        KS_RETURN_IF_ERROR(backend.CopyToHostAsync(device, out_staging_, out.data, static_cast<size_t>(out_bytes)));
      }
      log_->Mark("launch");
      KS_RETURN_IF_ERROR(backend.Synchronize(device));
      log_->Mark("sync");
      if (inline_out != nullptr) {
        inline_out->resize(static_cast<size_t>(out_bytes));
        if (out_staging_ != nullptr) {
          std::memcpy(inline_out->data(), out_staging_, static_cast<size_t>(out_bytes));
        } else {
          KS_RETURN_IF_ERROR(backend.CopyToHost(device, inline_out->data(), out.data,
                                                static_cast<size_t>(out_bytes)));
        }
      }
      if (report_error) {
        out_host_ = HostTensor(od, std::vector<uint8_t>(static_cast<size_t>(out_bytes)));
        if (inline_out != nullptr) {
          std::memcpy(out_host_.bytes(), inline_out->data(), static_cast<size_t>(out_bytes));
        } else {
          KS_RETURN_IF_ERROR(backend.CopyToHost(device, out_host_.bytes(), out.data,
                                                static_cast<size_t>(out_bytes)));
        }
        for (Input* in : inputs_) KS_RETURN_IF_ERROR(FetchHost(in));
      }
      // Inline staging is freed here, on the worker.
      for (Input* in : inputs_) {
        in->staged.reset();
        in->staged_reservation.Release();
      }
      inline_block_.reset();
      inline_reservation_.Release();
      host_staging_.reset();
      out_staging_ = nullptr;
      log_->Mark("copy_out");
      return absl::OkStatus();
    }, &timing_, placement);
    if (!status.ok()) return status;
    DescToProto(out_buffer->desc, out_ref->mutable_tensor());
    if (inline_out != nullptr) {
      log_->AddBytesOut(out_buffer->desc.num_bytes());
    } else {
      out_ref->clear_tensor();
      out_buffer->id = NewId("buf");
      out_buffer->owner = tenant_;
      out_buffer->label = output.label();
      out_buffer->device = device;
      out_buffer->created_unix_ms = absl::ToUnixMillis(absl::Now());
      state_->registry().AddBuffer(out_buffer);
      out_ref->set_buffer_id(out_buffer->id);
    }
    return absl::OkStatus();
  }

  const HostTensor& out_host() const { return out_host_; }

  void FillInfo(pb::CallInfo* info) const {
    info->set_backend(state_->backend().Name());
    info->set_device(device_);
    info->set_queue_ms(timing_.queue_ms);
    info->set_run_ms(timing_.run_ms);
  }

 private:
  // A call runs on the handler's thread when its device is idle: the two
  // thread hand-offs through the worker cost ~110 us p50 on the loaded 2-core
  // VM; on the H100 host a 16K attention's queue and reply phases took 13.5
  // and 20.7 us (bench/NOTES.md, issue 20). A GPU backend's handler thread
  // only launches and waits, whatever the size. On a backend that computes
  // on the host, only a call whose tensors (inline, buffers and pools) total
  // at most this: 64 KiB keeps it under the CPU backend's 4 MFLOP serial
  // limit for attention (cpu_backend.cc), so no OpenMP team is started on a
  // handler thread.
  static constexpr int64_t kInlineCallBytes = int64_t{64} << 10;

  int64_t InputBytes() const {
    int64_t bytes = 0;
    for (const Input* in : inputs_) bytes += in->desc.num_bytes();
    return bytes;
  }

  // A buffer of the wrong element type was almost always uploaded without
  // naming its type (packed FP4 weights and FP8 codes arrive as uint8 arrays),
  // so the fix is at upload time: say so. `st` is Validate's "FIELD: expected
  // WANT, got HAVE".
  absl::Status WithUploadHint(absl::Status st) const {
    if (st.code() != absl::StatusCode::kInvalidArgument) return st;
    for (const Input* in : inputs_) {
      if (!in->buffer) continue;
      const std::string prefix = absl::StrCat(in->field, ": expected ");
      const std::string got = absl::StrCat(", got ", DTypeName(in->desc.dtype));
      const absl::string_view msg = st.message();
      const size_t at = msg.find(got);
      if (!absl::StartsWith(msg, prefix) || at == absl::string_view::npos) continue;
      absl::string_view want = msg.substr(prefix.size(), at - prefix.size());
      want = want.substr(0, want.find(' '));
      return absl::InvalidArgumentError(absl::StrCat(
          msg, " (buffer ", in->buffer->id, " holds ", in->desc.DebugString(), "; upload the array again with its type: ",
          "kernelctl buffers upload --dtype=", want, ", or upload(..., dtype=\"", want, "\") in Python)"));
    }
    return st;
  }

  // Worker thread only.
  absl::Status FetchHost(Input* in) {
    if (in->has_host) return absl::OkStatus();
    if (in->inline_tensor != nullptr) {
      in->host = HostTensorFromProto(in->desc, *in->inline_tensor);
    } else {
      const void* src = in->buffer ? in->buffer->memory->data() : in->pool->memory->data();
      in->host = HostTensor(in->desc, std::vector<uint8_t>(static_cast<size_t>(in->desc.num_bytes())));
      KS_RETURN_IF_ERROR(state_->backend().CopyToHost(device_, in->host.bytes(), src,
                                                      static_cast<size_t>(in->desc.num_bytes())));
    }
    in->has_host = true;
    return absl::OkStatus();
  }

  // Host memory for this call, held until the call ends (the error report is
  // computed after the device task).
  absl::Status Charge(int64_t bytes, absl::string_view what) {
    return state_->ChargeHost(device_, tenant_, bytes, what, &host_);
  }

  // Worker thread only. A buffer input is scanned through a small host
  // window (charged); a pool was checked when its rows were written.
  absl::Status CheckFinite(Input* in) {
    if (in->pool || !HasNonFinite(in->desc.dtype)) return absl::OkStatus();
    if (in->has_host || in->inline_tensor != nullptr) {
      const void* bytes = in->has_host ? static_cast<const void*>(in->host.bytes())
                                       : static_cast<const void*>(in->inline_tensor->data().data());
      return kernelserve::CheckFinite(in->field, in->desc, bytes, 0, in->desc.num_elements());
    }
    return state_->CheckBufferFinite(*in->buffer, tenant_, in->field);
  }

  // Device views of every input; inline ones are copied to device memory of
  // their own. On a GPU, inline inputs of a small call share one device block
  // at 256-byte-aligned offsets, gathered in the same layout into one
  // page-locked block and queued as one asynchronous copy: a synchronous copy
  // from pageable memory costs a driver bounce and a stream round trip per
  // input, and each allocation and copy call its own few microseconds, most
  // of a small call's staging. The op follows in stream order, and Execute
  // synchronizes after the op, before the blocks are released. A small
  // inline output (`out_bytes`, 0 for none) gets the page-locked block's end,
  // 16-byte aligned (out_staging_).
  absl::Status StageInputs(int64_t out_bytes) {
    constexpr int64_t kAlign = 256;
    auto align = [](int64_t x, int64_t a) { return (x + a - 1) / a * a; };
    Backend& backend = state_->backend();
    int64_t inline_bytes = 0, span = 0;
    for (const Input* in : inputs_) {
      if (in->buffer || in->pool) continue;
      inline_bytes += in->desc.num_bytes();
      span = align(span, kAlign) + in->desc.num_bytes();
    }
    const bool gpu = !backend.Capabilities().device_memory_is_host;
    const bool stage_in = gpu && inline_bytes > 0 && inline_bytes <= kInlineCallBytes;
    const bool stage_out = gpu && out_bytes > 0 && out_bytes <= kInlineCallBytes;
    const int64_t out_at = stage_in ? align(span, 16) : 0;
    char* host = nullptr;
    char* dev = nullptr;
    if (stage_in || stage_out) {
      KS_ASSIGN_OR_RETURN(host_staging_,
                          backend.AllocateStaging(device_, static_cast<size_t>(out_at + (stage_out ? out_bytes : 0))));
      char* block = static_cast<char*>(host_staging_->data());
      if (stage_in) host = block;
      if (stage_out) out_staging_ = block + out_at;
    }
    if (stage_in) {
      std::string fields;  // for the memory limit's message
      for (const Input* in : inputs_) {
        if (!in->buffer && !in->pool) absl::StrAppend(&fields, fields.empty() ? "" : ", ", in->field);
      }
      KS_RETURN_IF_ERROR(state_->Allocate(device_, tenant_, span, absl::StrCat("inline inputs (", fields, ")"),
                                          &inline_reservation_, &inline_block_));
      dev = static_cast<char*>(inline_block_->data());
    }
    int64_t at = 0;
    for (Input* in : inputs_) {
      if (in->buffer) {
        in->view = in->buffer->view();
        continue;
      }
      if (in->pool) {
        in->view = in->pool->view();
        continue;
      }
      const int64_t n = in->desc.num_bytes();
      const char* src = in->inline_tensor->data().data();
      if (stage_in) {
        at = align(at, kAlign);
        std::memcpy(host + at, src, static_cast<size_t>(n));
        in->view = TensorView{in->desc, dev + at};
        at += n;
        continue;
      }
      KS_RETURN_IF_ERROR(state_->Allocate(device_, tenant_, n, absl::StrCat(in->field, " ", in->desc.DebugString()),
                                          &in->staged_reservation, &in->staged));
      KS_RETURN_IF_ERROR(backend.CopyToDevice(device_, in->staged->data(), src, static_cast<size_t>(n)));
      in->view = TensorView{in->desc, in->staged->data()};
    }
    if (stage_in) KS_RETURN_IF_ERROR(backend.CopyToDeviceAsync(device_, dev, host, static_cast<size_t>(span)));
    return absl::OkStatus();
  }

  ServerState* state_;
  grpc::ServerContext* ctx_;
  CallLog* log_;
  std::string tenant_;
  int device_ = 0;
  std::vector<Input*> inputs_;
  std::vector<Input*> pre_validate_host_;
  TaskTiming timing_;
  HostTensor out_host_;
  // A small call's inline inputs on the device, one block (StageInputs).
  Reservation inline_reservation_;
  std::unique_ptr<DeviceMemory> inline_block_;
  // The page-locked block of the inline inputs and a small inline output
  // (StageInputs), released after the op's synchronization.
  std::unique_ptr<StagingMemory> host_staging_;
  char* out_staging_ = nullptr;  // in host_staging_: where a small inline output lands
  Reservation host_;  // declared last: released after the host copies above are freed
};

// The fp64 oracle's copies: 8 bytes per element of `inputs` and `outputs`
// fp64 arrays of the output's size (the reference, the output as read back).
int64_t OracleBytes(std::initializer_list<const Input*> inputs, const TensorDesc& out, int64_t outputs) {
  int64_t elements = outputs * out.num_elements();
  for (const Input* in : inputs) elements += in->present ? in->desc.num_elements() : 0;
  return 8 * elements;
}

// What a MoE call holds besides its inputs and output, which its shapes
// multiply far past the request's own size (top_k and the expert widths: a
// 4 MiB topk_ids names a million pairs). The backend cannot be asked, so this
// bounds the in-tree backends' working sets: the cpu backend's fp32 per-pair
// activations (x, gate/up and their SwiGLU, down, the weighted sum; it holds
// them for a block of tokens at a time, charged here for the whole call) and
// its 16 dequantized weight rows per thread; the cuda backend's bf16 layer
// intermediate and fp32 per-pair outputs (less than the fp32 activations) and
// its routing tables (expert counts, tiles of up to 128 sorted pairs).
int64_t MoeWorkspaceBytes(const MoeParams& p, int compute_units) {
  const bool gate_up = p.stage != MoeStage::kDown;
  const bool down = p.stage != MoeStage::kGateUp;
  const bool weighted = p.stage == MoeStage::kLayer || (p.stage == MoeStage::kDown && p.weighted_sum);
  // In double: shapes from buffers may multiply past int64.
  const double tokens = static_cast<double>(p.tokens), pairs = tokens * static_cast<double>(p.top_k);
  const double inter = static_cast<double>(p.inter), out_dim = static_cast<double>(p.out_dim);
  const double experts = static_cast<double>(p.experts);
  double floats = gate_up ? tokens * static_cast<double>(p.hidden) + 3 * pairs * inter : pairs * inter;
  if (down) floats += pairs * out_dim;
  if (weighted) floats += tokens * out_dim;
  const double routing = 4 * (2 * pairs + 130 * std::min(pairs, experts) + 3 * experts) + 4096;
  const double dequant = 64.0 * std::max(compute_units, 1) * static_cast<double>(std::max(p.hidden, p.inter));
  const double bytes = 4 * floats + routing + dequant;
  return bytes >= 0x1p62 ? int64_t{1} << 62 : static_cast<int64_t>(bytes);
}

void FillError(const ErrorReport& r, pb::ErrorReport* out) {
  out->set_rel_rms(r.rel_rms);
  out->set_max_abs(r.max_abs);
  out->set_nonfinite(r.nonfinite);
  out->set_has_split(r.has_split);
  out->set_input_quant(r.input_quant);
  out->set_p_quant(r.p_quant);
  out->set_rest(r.rest);
}

absl::StatusOr<Rounding> ParseRounding(int v) {
  if (v == 0) return Rounding::kRtne;
  if (v >= 1 && v <= 3) return static_cast<Rounding>(v);
  return absl::InvalidArgumentError(absl::StrCat("rounding: expected RTNE, RTNA or RTZ, got value ", v));
}

absl::StatusOr<Layout> ParseLayout(int v) {
  if (v == 0) return Layout::kBhsd;
  if (v == 1 || v == 2) return static_cast<Layout>(v);
  return absl::InvalidArgumentError(absl::StrCat("layout: expected BHSD or BSHD, got value ", v));
}

absl::Status CheckScale(bool has, double v) {
  if (has && !(std::isfinite(v) && v > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("softmax_scale: expected a finite value > 0, got ", v));
  }
  return absl::OkStatus();
}

absl::Status DoAttention(ServerState* state, grpc::ServerContext* ctx, const pb::AttentionRequest& req,
                         pb::AttentionResponse* resp, CallLog* log) {
  OpCall call(state, ctx, log);
  KS_RETURN_IF_ERROR(call.SetDevice(req.device()));
  AttentionParams p;
  KS_ASSIGN_OR_RETURN(p.layout, ParseLayout(req.layout()));
  KS_ASSIGN_OR_RETURN(p.rounding, ParseRounding(req.rounding()));
  KS_RETURN_IF_ERROR(CheckScale(req.has_softmax_scale(), req.softmax_scale()));
  p.causal = req.causal();
  if (req.has_softmax_scale()) p.softmax_scale = req.softmax_scale();
  Input q, k, v;
  KS_RETURN_IF_ERROR(call.Resolve("q", req.q(), true, &q));
  KS_RETURN_IF_ERROR(call.Resolve("k", req.k(), true, &k));
  KS_RETURN_IF_ERROR(call.Resolve("v", req.v(), true, &v));
  Backend& backend = state->backend();
  const int device = call.device();
  OpHooks op;
  op.validate = [&] { return p.Validate(q.desc, k.desc, v.desc); };
  op.out_desc = [&] { return p.OutputDesc(); };
  op.run = [&](TensorView& out) { return backend.Attention(device, p, q.view, k.view, v.view, out); };
  op.oracle_bytes = [&] { return OracleBytes({&q, &k, &v}, p.OutputDesc(), 2); };
  KS_RETURN_IF_ERROR(call.Execute(req.output(), req.report_error(), op, resp->mutable_out()));
  if (req.report_error()) {
    KS_ASSIGN_OR_RETURN(const ErrorReport r, AttentionError(p, q.host, k.host, v.host, call.out_host()));
    FillError(r, resp->mutable_error());
  }
  call.FillInfo(resp->mutable_info());
  return absl::OkStatus();
}

absl::Status DoFp8Attention(ServerState* state, grpc::ServerContext* ctx,
                            const pb::Fp8AttentionRequest& req, pb::Fp8AttentionResponse* resp,
                            CallLog* log) {
  OpCall call(state, ctx, log);
  KS_RETURN_IF_ERROR(call.SetDevice(req.device()));
  Fp8AttentionParams p;
  KS_ASSIGN_OR_RETURN(p.layout, ParseLayout(req.layout()));
  KS_ASSIGN_OR_RETURN(p.rounding, ParseRounding(req.rounding()));
  KS_RETURN_IF_ERROR(CheckScale(req.has_softmax_scale(), req.softmax_scale()));
  p.causal = req.causal();
  if (req.has_softmax_scale()) p.softmax_scale = req.softmax_scale();
  const int format = req.format();
  if (format < 0 || format > 2) {
    return absl::InvalidArgumentError(absl::StrCat("format: expected E4M3FN or E4M3FNUZ, got value ", format));
  }
  p.format = format == 0 ? Fp8Format::kE4M3Fn : static_cast<Fp8Format>(format);
  const int p_mode = req.p_mode();
  if (p_mode < 0 || p_mode > 3) {
    return absl::InvalidArgumentError(absl::StrCat("p_mode: expected EXACT, LEAN or NAIVE, got value ", p_mode));
  }
  p.p_mode = p_mode == 0 ? PMode::kExact : static_cast<PMode>(p_mode);
  const int descale_mode = req.descale_mode();
  if (descale_mode < 0 || descale_mode > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("descale_mode: expected PER_TENSOR or PER_HEAD, got value ", descale_mode));
  }
  p.descale_mode = descale_mode == 0 ? DescaleMode::kPerTensor : static_cast<DescaleMode>(descale_mode);
  p.hadamard = req.hadamard();
  Input q, k, v, qd, kd, vd;
  KS_RETURN_IF_ERROR(call.Resolve("q", req.q(), true, &q));
  KS_RETURN_IF_ERROR(call.Resolve("k", req.k(), true, &k));
  KS_RETURN_IF_ERROR(call.Resolve("v", req.v(), true, &v));
  KS_RETURN_IF_ERROR(call.Resolve("q_descale", req.q_descale(), false, &qd));
  KS_RETURN_IF_ERROR(call.Resolve("k_descale", req.k_descale(), false, &kd));
  KS_RETURN_IF_ERROR(call.Resolve("v_descale", req.v_descale(), false, &vd));
  const bool report = req.report_error() || req.report_error_split();
  Backend& backend = state->backend();
  const int device = call.device();
  OpHooks op;
  op.validate = [&] {
    return p.Validate(q.desc, k.desc, v.desc, qd.desc_or_null(), kd.desc_or_null(), vd.desc_or_null());
  };
  op.out_desc = [&] { return p.OutputDesc(); };
  op.run = [&](TensorView& out) {
    Fp8AttentionInputs in{q.view, k.view, v.view, qd.view, kd.view, vd.view};
    return backend.Fp8Attention(device, p, in, out);
  };
  // The split runs the oracle three times, once on unquantized inputs too.
  op.oracle_bytes = [&] { return OracleBytes({&q, &k, &v}, p.OutputDesc(), 3) * (req.report_error_split() ? 2 : 1); };
  KS_RETURN_IF_ERROR(call.Execute(req.output(), report, op, resp->mutable_out()));
  if (report) {
    Fp8AttentionInputs host_in{q.host_view(),  k.host_view(),  v.host_view(),
                               qd.host_view(), kd.host_view(), vd.host_view()};
    KS_ASSIGN_OR_RETURN(const ErrorReport r,
                        Fp8AttentionError(p, host_in, call.out_host(), req.report_error_split()));
    FillError(r, resp->mutable_error());
  }
  call.FillInfo(resp->mutable_info());
  return absl::OkStatus();
}

// The index tensors of a decode call on a pool (seq_lens, kv_indices,
// kv_indptr, q_lens; all optional here, the op's Validate says which it
// needs): int32 host copies, so Validate can check their values.
template <typename Req>
absl::Status ResolvePageTables(const Req& req, OpCall* call, Input* seq_lens, Input* kv_indices,
                               Input* kv_indptr, Input* q_lens) {
  KS_RETURN_IF_ERROR(call->Resolve("seq_lens", req.seq_lens(), false, seq_lens));
  KS_RETURN_IF_ERROR(call->Resolve("kv_indices", req.kv_indices(), false, kv_indices));
  KS_RETURN_IF_ERROR(call->Resolve("kv_indptr", req.kv_indptr(), false, kv_indptr));
  KS_RETURN_IF_ERROR(call->Resolve("q_lens", req.q_lens(), false, q_lens));
  for (Input* in : {seq_lens, kv_indices, kv_indptr, q_lens}) {
    // The protos and the ops' inputs say int32, and backends read them so.
    if (in->present && in->desc.dtype != DType::kInt32) {
      return absl::InvalidArgumentError(
          absl::StrCat(in->field, ": expected int32, got ", DTypeName(in->desc.dtype)));
    }
    call->NeedHostBeforeValidate(in);
  }
  return absl::OkStatus();
}

absl::Status DoMlaDecode(ServerState* state, grpc::ServerContext* ctx, const pb::MlaDecodeRequest& req,
                         pb::MlaDecodeResponse* resp, CallLog* log) {
  OpCall call(state, ctx, log);
  KS_RETURN_IF_ERROR(call.SetDevice(req.device()));
  MlaDecodeParams p;
  KS_ASSIGN_OR_RETURN(p.rounding, ParseRounding(req.rounding()));
  KS_RETURN_IF_ERROR(CheckScale(req.has_softmax_scale(), req.softmax_scale()));
  if (req.has_softmax_scale()) p.softmax_scale = req.softmax_scale();
  if (req.num_splits() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_splits: expected >= 0 (0: backend's choice), got ", req.num_splits()));
  }
  p.num_splits = req.num_splits();
  Input q_lat, q_pe, kv, seq_lens, kv_indices, kv_indptr, q_lens;
  KS_RETURN_IF_ERROR(call.Resolve("q_lat", req.q_lat(), true, &q_lat));
  KS_RETURN_IF_ERROR(call.Resolve("q_pe", req.q_pe(), true, &q_pe));
  const bool has_kv = req.kv().source_case() != pb::TensorRef::SOURCE_NOT_SET;
  const bool paged = !req.pool_id().empty();
  if (has_kv == paged) {
    return absl::InvalidArgumentError("kv, pool_id: give exactly one (a contiguous KV tensor or a pool)");
  }
  int64_t page_size = 1;
  if (paged) {
    KS_RETURN_IF_ERROR(call.ResolvePool("pool_id", req.pool_id(), &kv));
    if (kv.pool->kind != PoolKind::kMlaFused) {
      return absl::InvalidArgumentError(absl::StrCat("pool_id: pool ", QuoteClientText(req.pool_id()),
                                                     " is PER_HEAD_KV; MLA decode needs an MLA_FUSED pool"));
    }
    if (req.kv_scale() != 0 && req.kv_scale() != kv.pool->kv_scale) {
      return absl::InvalidArgumentError(absl::StrCat("kv_scale: contiguous KV only; pool ", QuoteClientText(req.pool_id()),
                                                     " has its own kv_scale ", kv.pool->kv_scale,
                                                     ", got ", req.kv_scale()));
    }
    p.kv_scale = kv.pool->kv_scale;
    page_size = kv.pool->page_size;
  } else {
    KS_RETURN_IF_ERROR(call.Resolve("kv", req.kv(), true, &kv));
    p.kv_scale = req.kv_scale() == 0 ? 1.0 : req.kv_scale();
    if (!std::isfinite(p.kv_scale) || p.kv_scale <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv_scale: expected a finite value > 0 (0 means 1), got ", req.kv_scale()));
    }
  }
  KS_RETURN_IF_ERROR(ResolvePageTables(req, &call, &seq_lens, &kv_indices, &kv_indptr, &q_lens));
  Backend& backend = state->backend();
  const int device = call.device();
  OpHooks op;
  op.validate = [&] {
    return p.Validate(q_lat.desc, q_pe.desc, kv.desc, paged, page_size, seq_lens.host_or_null(),
                      kv_indices.host_or_null(), kv_indptr.host_or_null(), q_lens.host_or_null());
  };
  op.out_desc = [&] { return p.OutputDesc(); };
  op.run = [&](TensorView& out) {
    MlaDecodeInputs in{q_lat.view, q_pe.view, kv.view, seq_lens.view, kv_indices.view,
                       kv_indptr.view, q_lens.view};
    return backend.MlaDecode(device, p, in, out);
  };
  // An explicit num_splits buys fp32 partials (512 values, a max and a sum)
  // per split and output row: up to 1024x the output from a small request.
  op.workspace_bytes = [&] {
    return p.num_splits * p.batch * p.q_len * p.heads * (kMlaLatentDim + 2) * int64_t{4};
  };
  // The oracle dequantizes one request's KV rows at a time.
  op.oracle_bytes = [&] {
    return OracleBytes({&q_lat, &q_pe}, p.OutputDesc(), 2) + 8 * kMlaRowDim * p.max_seq;
  };
  KS_RETURN_IF_ERROR(call.Execute(req.output(), req.report_error(), op, resp->mutable_out()));
  if (req.report_error()) {
    MlaDecodeInputs host_in{q_lat.host_view(),    q_pe.host_view(),      kv.host_view(),
                            seq_lens.host_view(), kv_indices.host_view(), kv_indptr.host_view(),
                            q_lens.host_view()};
    KS_ASSIGN_OR_RETURN(const ErrorReport r, MlaDecodeError(p, host_in, call.out_host()));
    FillError(r, resp->mutable_error());
  }
  call.FillInfo(resp->mutable_info());
  return absl::OkStatus();
}

absl::Status DoDecodeAttention(ServerState* state, grpc::ServerContext* ctx,
                               const pb::DecodeAttentionRequest& req, pb::DecodeAttentionResponse* resp,
                               CallLog* log) {
  OpCall call(state, ctx, log);
  KS_RETURN_IF_ERROR(call.SetDevice(req.device()));
  DecodeAttentionParams p;
  KS_ASSIGN_OR_RETURN(p.rounding, ParseRounding(req.rounding()));
  KS_RETURN_IF_ERROR(CheckScale(req.has_softmax_scale(), req.softmax_scale()));
  if (req.has_softmax_scale()) p.softmax_scale = req.softmax_scale();
  Input q, kv, seq_lens, kv_indices, kv_indptr, q_lens;
  KS_RETURN_IF_ERROR(call.Resolve("q", req.q(), true, &q));
  if (req.pool_id().empty()) {
    return absl::InvalidArgumentError("pool_id: required (a PER_HEAD_KV pool)");
  }
  KS_RETURN_IF_ERROR(call.ResolvePool("pool_id", req.pool_id(), &kv));
  const Pool& pool = *kv.pool;
  if (pool.kind != PoolKind::kPerHeadKv) {
    return absl::InvalidArgumentError(absl::StrCat("pool_id: pool ", QuoteClientText(req.pool_id()),
                                                   " is MLA_FUSED; decode attention needs a PER_HEAD_KV pool"));
  }
  p.kv_scale = pool.kv_scale;
  KS_RETURN_IF_ERROR(ResolvePageTables(req, &call, &seq_lens, &kv_indices, &kv_indptr, &q_lens));
  Backend& backend = state->backend();
  const int device = call.device();
  OpHooks op;
  op.validate = [&] {
    return p.Validate(q.desc, kv.desc, pool.num_heads, pool.head_dim, pool.page_size, seq_lens.host_or_null(),
                      kv_indices.host_or_null(), kv_indptr.host_or_null(), q_lens.host_or_null());
  };
  op.out_desc = [&] { return p.OutputDesc(); };
  op.run = [&](TensorView& out) {
    DecodeAttentionInputs in{q.view, kv.view, seq_lens.view, kv_indices.view, kv_indptr.view, q_lens.view};
    return backend.DecodeAttention(device, p, in, out);
  };
  // The oracle holds one request's rows in fp64 at a time.
  op.oracle_bytes = [&] {
    return OracleBytes({&q}, p.OutputDesc(), 2) + 8 * 2 * p.heads_kv * p.head_dim * p.max_seq;
  };
  KS_RETURN_IF_ERROR(call.Execute(req.output(), req.report_error(), op, resp->mutable_out()));
  if (req.report_error()) {
    DecodeAttentionInputs host_in{q.host_view(),          kv.host_view(),        seq_lens.host_view(),
                                  kv_indices.host_view(), kv_indptr.host_view(), q_lens.host_view()};
    KS_ASSIGN_OR_RETURN(const ErrorReport r, DecodeAttentionError(p, host_in, call.out_host()));
    FillError(r, resp->mutable_error());
  }
  call.FillInfo(resp->mutable_info());
  return absl::OkStatus();
}

absl::Status DoMoe(ServerState* state, grpc::ServerContext* ctx, const pb::MoeRequest& req,
                   pb::MoeResponse* resp, CallLog* log) {
  OpCall call(state, ctx, log);
  KS_RETURN_IF_ERROR(call.SetDevice(req.device()));
  MoeParams p;
  const int stage = req.stage();
  if (stage < 0 || stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat("stage: expected GATEUP, DOWN or LAYER, got value ", stage));
  }
  p.stage = stage == 0 ? MoeStage::kLayer : static_cast<MoeStage>(stage);
  KS_ASSIGN_OR_RETURN(p.rounding, ParseRounding(req.rounding()));
  p.swiglu = req.swiglu();
  p.weighted_sum = req.weighted_sum();
  Input x, ids, weights, w13, w13s, w2, w2s;
  KS_RETURN_IF_ERROR(call.Resolve("x", req.x(), true, &x));
  KS_RETURN_IF_ERROR(call.Resolve("topk_ids", req.topk_ids(), true, &ids));
  KS_RETURN_IF_ERROR(call.Resolve("topk_weights", req.topk_weights(), false, &weights));
  KS_RETURN_IF_ERROR(call.Resolve("w13", req.w13(), false, &w13));
  KS_RETURN_IF_ERROR(call.Resolve("w13_scales", req.w13_scales(), false, &w13s));
  KS_RETURN_IF_ERROR(call.Resolve("w2", req.w2(), false, &w2));
  KS_RETURN_IF_ERROR(call.Resolve("w2_scales", req.w2_scales(), false, &w2s));
  call.NeedHostBeforeValidate(&ids);
  Backend& backend = state->backend();
  const int device = call.device();
  OpHooks op;
  op.validate = [&] {
    return p.Validate(x.desc, ids.host, weights.desc_or_null(), w13.desc_or_null(), w13s.desc_or_null(),
                      w2.desc_or_null(), w2s.desc_or_null());
  };
  op.out_desc = [&] { return p.OutputDesc(); };
  op.run = [&](TensorView& out) {
    MoeInputs in{x.view, ids.view, weights.view, w13.view, w13s.view, w2.view, w2s.view};
    return backend.Moe(device, p, in, out);
  };
  const int compute_units = backend.GetDeviceInfo(device).compute_units;
  op.workspace_bytes = [&] { return MoeWorkspaceBytes(p, compute_units); };
  // The oracle's fp64 per-pair activations and one dequantized expert at a time.
  op.oracle_bytes = [&] {
    const int64_t pairs = p.tokens * p.top_k;
    return 8 * (p.tokens * p.hidden + pairs * (p.hidden + 3 * p.inter + p.out_dim) + p.tokens * p.out_dim +
                std::max(2 * p.inter * p.hidden, p.out_dim * p.inter)) +
           OracleBytes({}, p.OutputDesc(), 1);
  };
  KS_RETURN_IF_ERROR(call.Execute(req.output(), req.report_error(), op, resp->mutable_out()));
  if (req.report_error()) {
    MoeInputs host_in{x.host_view(),   ids.host_view(), weights.host_view(), w13.host_view(),
                      w13s.host_view(), w2.host_view(),  w2s.host_view()};
    KS_ASSIGN_OR_RETURN(const ErrorReport r, MoeError(p, host_in, call.out_host()));
    FillError(r, resp->mutable_error());
  }
  call.FillInfo(resp->mutable_info());
  return absl::OkStatus();
}

}  // namespace

grpc::Status KernelServiceImpl::Attention(grpc::ServerContext* ctx, const pb::AttentionRequest* req,
                                          pb::AttentionResponse* resp) {
  return state_->Serve("KernelService.Attention", ctx, /*stream=*/false,
                       [&](CallLog* log) { return DoAttention(state_, ctx, *req, resp, log); });
}

grpc::Status KernelServiceImpl::Fp8Attention(grpc::ServerContext* ctx,
                                             const pb::Fp8AttentionRequest* req,
                                             pb::Fp8AttentionResponse* resp) {
  return state_->Serve("KernelService.Fp8Attention", ctx, /*stream=*/false,
                       [&](CallLog* log) { return DoFp8Attention(state_, ctx, *req, resp, log); });
}

grpc::Status KernelServiceImpl::MlaDecode(grpc::ServerContext* ctx, const pb::MlaDecodeRequest* req,
                                          pb::MlaDecodeResponse* resp) {
  return state_->Serve("KernelService.MlaDecode", ctx, /*stream=*/false,
                       [&](CallLog* log) { return DoMlaDecode(state_, ctx, *req, resp, log); });
}

grpc::Status KernelServiceImpl::Moe(grpc::ServerContext* ctx, const pb::MoeRequest* req,
                                    pb::MoeResponse* resp) {
  return state_->Serve("KernelService.Moe", ctx, /*stream=*/false,
                       [&](CallLog* log) { return DoMoe(state_, ctx, *req, resp, log); });
}

grpc::Status KernelServiceImpl::DecodeAttention(grpc::ServerContext* ctx,
                                                const pb::DecodeAttentionRequest* req,
                                                pb::DecodeAttentionResponse* resp) {
  return state_->Serve("KernelService.DecodeAttention", ctx, /*stream=*/false,
                       [&](CallLog* log) { return DoDecodeAttention(state_, ctx, *req, resp, log); });
}

absl::StatusOr<uint32_t> LoopbackPeerUid(const std::string& peer) {
  const bool v4 = absl::StartsWith(peer, "ipv4:127."), v6 = absl::StartsWith(peer, "ipv6:[::1]:");
  const size_t colon = peer.rfind(':');
  int port = 0;
  if ((!v4 && !v6) || colon == std::string::npos || !absl::SimpleAtoi(peer.substr(colon + 1), &port)) {
    return absl::NotFoundError(absl::StrCat("the caller (", peer, ") is not a process on this host over loopback TCP"));
  }
  // An IPv4 peer may sit on a dual-stack socket (listed in tcp6 as ::ffff:127.x).
  std::optional<uint32_t> uid;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    if (v6 && absl::string_view(table) == "/proc/net/tcp") continue;
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 8 || f[3] != "01") continue;  // ESTABLISHED only
      const size_t c = f[1].rfind(':');
      int local_port = 0;
      if (c == std::string::npos || !absl::SimpleHexAtoi(f[1].substr(c + 1), &local_port) || local_port != port) {
        continue;
      }
      uint32_t u = 0;
      if (!absl::SimpleAtoi(f[7], &u)) continue;
      if (uid.has_value() && *uid != u) return absl::NotFoundError("two sockets on the caller's port: ambiguous");
      uid = u;
    }
  }
  if (!uid.has_value()) return absl::NotFoundError(absl::StrCat("no local socket of the caller (", peer, ")"));
  return *uid;
}

namespace {

// The unary method a session request stands for ("Session" for none).
absl::string_view SessionCallMethod(const pb::SessionRequest& req) {
  switch (req.call_case()) {
    case pb::SessionRequest::kAttention:
      return "Attention";
    case pb::SessionRequest::kFp8Attention:
      return "Fp8Attention";
    case pb::SessionRequest::kMlaDecode:
      return "MlaDecode";
    case pb::SessionRequest::kMoe:
      return "Moe";
    case pb::SessionRequest::kDecodeAttention:
      return "DecodeAttention";
    case pb::SessionRequest::kAttachRing:
      return "AttachRing";
    case pb::SessionRequest::CALL_NOT_SET:
      break;
  }
  return "Session";
}

}  // namespace

void KernelServiceImpl::AnswerSessionCall(grpc::ServerContext* ctx, const pb::SessionRequest& req,
                                          pb::SessionResponse* resp) {
  const absl::Time start = absl::Now();
  const grpc::Status s = ServeSessionCall(ctx, req, resp);
  state_->ObserveCall(SessionCallMethod(req), static_cast<int>(s.error_code()), absl::Now() - start);
  if (!s.ok()) {
    resp->clear_result();
    resp->set_code(static_cast<int32_t>(s.error_code()));
    resp->set_message(s.error_message());
  }
}

grpc::Status KernelServiceImpl::ServeSessionCall(grpc::ServerContext* ctx, const pb::SessionRequest& req,
                                                 pb::SessionResponse* resp) {
  const std::string method = absl::StrCat("KernelService.Session/", SessionCallMethod(req));
  auto serve = [&](auto&& body) { return state_->Serve(method, ctx, /*stream=*/false, body); };
  switch (req.call_case()) {
    case pb::SessionRequest::kAttention:
      return serve([&](CallLog* log) {
        return DoAttention(state_, ctx, req.attention(), resp->mutable_attention(), log);
      });
    case pb::SessionRequest::kFp8Attention:
      return serve([&](CallLog* log) {
        return DoFp8Attention(state_, ctx, req.fp8_attention(), resp->mutable_fp8_attention(), log);
      });
    case pb::SessionRequest::kMlaDecode:
      return serve([&](CallLog* log) {
        return DoMlaDecode(state_, ctx, req.mla_decode(), resp->mutable_mla_decode(), log);
      });
    case pb::SessionRequest::kMoe:
      return serve([&](CallLog* log) { return DoMoe(state_, ctx, req.moe(), resp->mutable_moe(), log); });
    case pb::SessionRequest::kDecodeAttention:
      return serve([&](CallLog* log) {
        return DoDecodeAttention(state_, ctx, req.decode_attention(), resp->mutable_decode_attention(), log);
      });
    case pb::SessionRequest::kAttachRing:  // RunSession's, never a call
    case pb::SessionRequest::CALL_NOT_SET:
      break;
  }
  return serve([](CallLog*) {
    return absl::InvalidArgumentError(
        "session request: call: none set (expected one of attention, fp8_attention, mla_decode, moe, "
        "decode_attention)");
  });
}

KernelServiceImpl::KernelServiceImpl(ServerState* state) : state_(state) {
  constexpr int kSessionMethod = 5;  // its position in kernel.proto's KernelService
  MarkMethodStreamed(kSessionMethod,
                     new grpc::internal::BidiStreamingHandler<KernelServiceImpl, grpc::ByteBuffer, grpc::ByteBuffer>(
                         [](KernelServiceImpl* service, grpc::ServerContext* ctx,
                            grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream) {
                           return service->RunSession(ctx, stream);
                         },
                         this));
}

grpc::Status KernelServiceImpl::RunSession(grpc::ServerContext* ctx,
                                           grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream) {
  // The session's own log line and admission (token, rate, a streaming slot
  // held while it is open). It is not counted as a running call: only its
  // requests are, while they run, so a shutdown's drain waits for them and
  // not for an idle session.
  CallLog log("KernelService.Session", ctx, /*counter=*/nullptr);
  return log.Run([&]() -> absl::Status {
    auto admission = state_->Admit(ctx, /*stream=*/true);
    if (!admission.ok()) return admission.status();
    {
      absl::MutexLock lock(&sessions_mu_);
      if (sessions_closed_) return absl::UnavailableError("the server is shutting down");
      sessions_.push_back(ctx);
    }
    // Unregistered however the loop ends (an exception included): shutdown
    // cancels what is registered.
    absl::Cleanup unregister = [&] {
      absl::MutexLock lock(&sessions_mu_);
      sessions_.erase(std::find(sessions_.begin(), sessions_.end(), ctx));
    };
    absl::Status ended;
    grpc::ByteBuffer in, out;
    pb::SessionRequest req;
    pb::SessionResponse resp;
    for (int64_t n = 0; stream->Read(&in); ++n) {
      req.Clear();
      if (!grpc::SerializationTraits<pb::SessionRequest>::Deserialize(&in, &req).ok()) {
        ended = absl::InvalidArgumentError(absl::StrCat(
            "session: request ", n, " of the stream is not a valid protobuf SessionRequest; the session ends"));
        break;
      }
      resp.Clear();
      resp.set_id(req.id());
      std::optional<ShmRing> ring;
      uint32_t first = 0;
      if (req.has_attach_ring()) {
        absl::StatusOr<ShmRing> attached = AttachRing(ctx, req.attach_ring());
        if (attached.ok()) {
          // The requests counted before the acknowledgement (none, from an
          // honest client): it may write its first call as soon as it reads
          // the acknowledgement, before ServeRing looks.
          first = attached->header()->req_seq.load(std::memory_order_acquire);
          ring.emplace(std::move(*attached));
          resp.mutable_attach_ring();
        } else {
          resp.set_code(static_cast<int32_t>(ToGrpcCode(attached.status().code())));
          resp.set_message(std::string(attached.status().message()));
        }
      } else {
        AnswerSessionCall(ctx, req, &resp);
      }
      bool own = false;
      out.Clear();  // Serialize writes into an empty buffer only
      if (!grpc::SerializationTraits<pb::SessionResponse>::Serialize(resp, &out, &own).ok()) {
        ended = absl::InternalError("session: a response could not be serialized");
        break;
      }
      if (!stream->Write(out)) break;
      if (ring.has_value()) {
        ServeRing(ctx, &*ring, first);
        break;  // the ring was the rest of the session
      }
    }
    return ended;
  });
}

absl::StatusOr<ShmRing> KernelServiceImpl::AttachRing(grpc::ServerContext* ctx, const pb::AttachRing& req) {
  // The ring must be the caller's own: a name alone would let one tenant's
  // session serve (and answer into) another's ring.
  absl::StatusOr<ShmRing> ring = ShmRing::Attach(req.shm_name());
  if (!ring.ok()) return ring.status();
  const absl::StatusOr<uint32_t> peer = LoopbackPeerUid(ctx->peer());
  if (!peer.ok()) return absl::FailedPreconditionError(absl::StrCat("attach_ring: ", peer.status().message()));
  if (static_cast<int64_t>(ring->header()->capacity) > state_->max_message_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("attach_ring: a ring of ", ring->header()->capacity,
                                                   " bytes each way is over --max_message_mb (",
                                                   state_->max_message_bytes(), " bytes)"));
  }
  if (*peer != ring->owner_uid()) {
    return absl::PermissionDeniedError(absl::StrCat("attach_ring.shm_name: the ring belongs to uid ",
                                                    ring->owner_uid(), ", the caller is uid ", *peer));
  }
  ring->Unlink();  // attached once: the name is gone for anyone else
  return ring;
}

void KernelServiceImpl::ServeRing(grpc::ServerContext* ctx, ShmRing* ring, uint32_t served) {
  ShmRingHeader* h = ring->header();
  pb::SessionRequest req;
  pb::SessionResponse resp;
  std::string bytes;
  for (;;) {
    // A bounded wait, so that a client gone without a word (the stream
    // cancelled) or a shutdown ends the session.
    if (!ShmRing::WaitChange(&h->req_seq, served, absl::Now() + absl::Milliseconds(50))) {
      if (ctx->IsCancelled() || h->closed.load() != 0) return;
      continue;
    }
    if (h->closed.load() != 0) return;
    served = h->req_seq.load(std::memory_order_acquire);
    resp.Clear();
    const uint32_t len = h->req_len;
    if (len > h->capacity || !req.ParseFromArray(ring->request(), static_cast<int>(len)) ||
        req.has_attach_ring()) {
      resp.set_code(static_cast<int32_t>(grpc::StatusCode::INVALID_ARGUMENT));
      resp.set_message("session ring: the request is not a valid protobuf SessionRequest with a call");
    } else {
      resp.set_id(req.id());
      AnswerSessionCall(ctx, req, &resp);
    }
    bytes.clear();
    resp.SerializeToString(&bytes);
    if (bytes.size() > h->capacity) {
      resp.clear_result();
      resp.set_code(static_cast<int32_t>(grpc::StatusCode::RESOURCE_EXHAUSTED));
      resp.set_message(absl::StrCat("session ring: a response of ", bytes.size(), " bytes is over the ring's ",
                                    h->capacity, " (ask for output.to_buffer)"));
      bytes.clear();
      resp.SerializeToString(&bytes);
    }
    std::memcpy(ring->response(), bytes.data(), bytes.size());
    h->resp_len = static_cast<uint32_t>(bytes.size());
    h->resp_seq.store(served, std::memory_order_release);
    ShmRing::Wake(&h->resp_seq);
  }
}

void KernelServiceImpl::CancelSessions() {
  absl::MutexLock lock(&sessions_mu_);
  sessions_closed_ = true;
  for (grpc::ServerContext* ctx : sessions_) ctx->TryCancel();
}

}  // namespace kernelserve
