// Test helpers for another tenant beside a misbehaving user kernel's jobs.
// BackgroundCalls: the tenant's kernel calls, in a loop on a thread of their
// own until Stop(), counting how many ran and how many failed or came back
// wrong (the server's own attention against the fp64 oracle). KeptData: the
// tenant's buffer and KV pool, stored before the jobs and read back after.
#ifndef KERNELSERVE_SERVER_USER_KERNELS_BACKGROUND_CALLS_H_
#define KERNELSERVE_SERVER_USER_KERNELS_BACKGROUND_CALLS_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/status_macros.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {

class BackgroundCalls {
 public:
  // `shape`: q, k and v, [batch, heads, seq, head_dim].
  BackgroundCalls(Client* client, const Shape& shape) : thread_([this, client, shape] { Loop(client, shape); }) {}
  ~BackgroundCalls() { Stop(); }
  BackgroundCalls(const BackgroundCalls&) = delete;
  BackgroundCalls& operator=(const BackgroundCalls&) = delete;

  void Stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int calls() const { return calls_.load(); }
  int failures() const { return failures_.load(); }
  // The first failure's status or error (empty while none); read after Stop().
  const std::string& first_failure() const { return first_failure_; }

 private:
  void Loop(Client* client, const Shape& shape) {
    const HostTensor q = numerics::GaussianBf16(shape, 1), k = numerics::GaussianBf16(shape, 2),
                     v = numerics::GaussianBf16(shape, 3);
    while (!done_.load()) {
      AttentionArgs args;
      args.q = q;
      args.k = k;
      args.v = v;
      args.causal = true;
      args.report_error = true;
      auto r = client->Attention(args);
      ++calls_;
      const bool ok = r.ok() && r->error.has_value() && r->error->rel_rms < 0.01;
      if (!ok && failures_++ == 0) {
        first_failure_ = !r.ok() ? r.status().ToString()
                         : r->error.has_value() ? "rel_rms " + std::to_string(r->error->rel_rms)
                                                : "no error reported";
      }
    }
  }

  std::atomic<bool> done_{false};
  std::atomic<int> calls_{0}, failures_{0};
  std::string first_failure_;
  std::thread thread_;  // last: starts once the counters exist
};

// A tenant's buffer and a PER_HEAD_KV pool (bf16) with rows written to
// shuffled slots, on `device`. Unchanged() reads both back: the bytes must
// be identical and the pool's stats (size, rows written, ...) as they were
// after the write.
class KeptData {
 public:
  static absl::StatusOr<std::unique_ptr<KeptData>> Store(Client* client, int device = 0) {
    std::unique_ptr<KeptData> d(new KeptData(client));
    d->buffer_ = numerics::GaussianBf16({2, 64, 64}, 77);
    KS_ASSIGN_OR_RETURN(v1::BufferInfo buffer, client->UploadBuffer(d->buffer_, "kept", device));
    d->buffer_id_ = buffer.id();
    PoolSpec spec;
    spec.kind = v1::PER_HEAD_KV;
    spec.num_slots = 64;
    spec.page_size = 16;
    spec.dtype = DType::kBf16;
    spec.num_heads = 2;
    spec.head_dim = 64;
    spec.label = "kept";
    spec.device = device;
    KS_ASSIGN_OR_RETURN(v1::PoolInfo pool, client->CreatePool(spec));
    d->pool_id_ = pool.id();
    constexpr int kRows = 40;
    d->slots_ = HostTensor(DType::kInt32, {kRows});
    for (int i = 0; i < kRows; ++i) d->slots_.data<int32_t>()[i] = (i * 37 + 5) % 64;  // distinct: 37 is odd
    d->rows_ = numerics::GaussianBf16({kRows, 2 * 2 * 64}, 78);
    KS_ASSIGN_OR_RETURN(d->stats_, client->WritePool(d->pool_id_, d->slots_, d->rows_, /*rows_per_chunk=*/7));
    if (d->stats_.rows_written() != kRows) {
      return absl::InternalError(absl::StrCat("pool ", d->pool_id_, ": ", d->stats_.rows_written(),
                                              " rows written, expected ", kRows));
    }
    return d;
  }

  absl::Status Unchanged() const {
    KS_ASSIGN_OR_RETURN(HostTensor buffer, client_->DownloadBuffer(buffer_id_));
    KS_RETURN_IF_ERROR(Same("buffer " + buffer_id_, buffer, buffer_));
    KS_ASSIGN_OR_RETURN(HostTensor rows, client_->ReadPool(pool_id_, slots_));
    KS_RETURN_IF_ERROR(Same("pool " + pool_id_ + "'s rows", rows, rows_));
    KS_ASSIGN_OR_RETURN(v1::PoolInfo stats, client_->PoolStats(pool_id_));
    if (stats.SerializeAsString() != stats_.SerializeAsString()) {
      return absl::InternalError(absl::StrCat("pool ", pool_id_, "'s stats changed: ", stats.ShortDebugString(),
                                              ", were ", stats_.ShortDebugString()));
    }
    return absl::OkStatus();
  }

 private:
  explicit KeptData(Client* client) : client_(client) {}

  static absl::Status Same(const std::string& what, const HostTensor& got, const HostTensor& want) {
    if (got.num_bytes() != want.num_bytes() ||
        std::memcmp(got.bytes(), want.bytes(), static_cast<size_t>(want.num_bytes())) != 0) {
      return absl::InternalError(absl::StrCat(what, ": the bytes read back differ from those stored (",
                                              got.num_bytes(), " bytes, stored ", want.num_bytes(), ")"));
    }
    return absl::OkStatus();
  }

  Client* client_;
  HostTensor buffer_, slots_, rows_;
  std::string buffer_id_, pool_id_;
  v1::PoolInfo stats_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_USER_KERNELS_BACKGROUND_CALLS_H_
