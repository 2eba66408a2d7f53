// Server-resident buffers and KV pools, and the memory accounting behind
// them (DESIGN §5). Every object has an owner tenant ("" until tenants exist)
// and an unguessable id; lookups by another tenant answer NOT_FOUND.
#ifndef KERNELSERVE_SERVER_REGISTRY_H_
#define KERNELSERVE_SERVER_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/api/backend.h"
#include "kernels/api/tensor.h"

namespace kernelserve {

class MemoryAccountant;

// Bytes held against a device's limit; released on destruction.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&& other) noexcept { *this = std::move(other); }
  Reservation& operator=(Reservation&& other) noexcept;
  ~Reservation() { Release(); }
  void Release();
  int64_t bytes() const { return bytes_; }
  // Takes over `more`'s bytes; both must come from one accountant, device and
  // tenant (or this one be empty).
  void Merge(Reservation&& more);

 private:
  friend class MemoryAccountant;
  MemoryAccountant* owner_ = nullptr;
  int device_ = 0;
  std::string tenant_;
  int64_t bytes_ = 0;
};

class MemoryAccountant {
 public:
  // limits[d]: accounting limit of device d in bytes.
  explicit MemoryAccountant(std::vector<int64_t> limits);

  // RESOURCE_EXHAUSTED naming the limit and the sizes when `bytes` does not fit.
  // `what` describes the object ("buffer bf16[4,4]").
  absl::StatusOr<Reservation> Reserve(int device, const std::string& tenant, int64_t bytes,
                                      absl::string_view what);
  int64_t used(int device) const;
  int64_t limit(int device) const;
  int64_t tenant_used(const std::string& tenant) const;
  std::map<std::string, int64_t> tenant_usage() const;  // tenants holding bytes now

  // Per-tenant limit (server/security/limits.h), checked in Reserve under the
  // accountant's lock: (tenant, bytes it holds, bytes asked) -> OK or the error.
  using TenantCheck = std::function<absl::Status(const std::string&, int64_t, int64_t)>;
  void SetTenantCheck(TenantCheck check);

 private:
  friend class Reservation;
  void Release(int device, const std::string& tenant, int64_t bytes);

  mutable absl::Mutex mu_;
  std::vector<int64_t> limits_;
  std::vector<int64_t> used_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> tenant_used_ ABSL_GUARDED_BY(mu_);
  TenantCheck tenant_check_ ABSL_GUARDED_BY(mu_);
};

struct Buffer {
  std::string id;
  std::string owner;  // tenant
  std::string label;
  int device = 0;
  TensorDesc desc;
  int64_t created_unix_ms = 0;
  Reservation reservation;
  std::unique_ptr<DeviceMemory> memory;  // declared last: freed before the reservation is released

  TensorView view() const { return TensorView{desc, memory->data()}; }
};

// Values match proto kernelserve.v1.PoolKind.
enum class PoolKind : int { kMlaFused = 1, kPerHeadKv = 2 };

struct Pool {
  std::string id;
  std::string owner;
  std::string label;
  int device = 0;
  PoolKind kind = PoolKind::kMlaFused;
  int64_t num_slots = 0;
  int64_t page_size = 1;
  DType dtype = DType::kInvalid;
  int64_t row_elements = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  double kv_scale = 1.0;
  int64_t created_unix_ms = 0;
  std::atomic<int64_t> rows_written{0};
  Reservation reservation;
  std::unique_ptr<DeviceMemory> memory;

  int64_t row_bytes() const { return NumBytes(dtype, row_elements); }
  int64_t size_bytes() const { return num_slots * row_bytes(); }
  // The whole pool as a [num_slots, row_elements] tensor.
  TensorView view() const { return TensorView{TensorDesc{dtype, {num_slots, row_elements}}, memory->data()}; }
};

class Registry {
 public:
  void AddBuffer(std::shared_ptr<Buffer> buffer);
  // NOT_FOUND ("<field>: no buffer \"id\"") for unknown ids and other tenants' buffers.
  absl::StatusOr<std::shared_ptr<Buffer>> GetBuffer(absl::string_view field, const std::string& id,
                                                    const std::string& tenant) const;
  absl::Status RemoveBuffer(absl::string_view field, const std::string& id, const std::string& tenant);
  std::vector<std::shared_ptr<Buffer>> ListBuffers(const std::string& tenant) const;

  void AddPool(std::shared_ptr<Pool> pool);
  absl::StatusOr<std::shared_ptr<Pool>> GetPool(absl::string_view field, const std::string& id,
                                                const std::string& tenant) const;
  absl::Status RemovePool(absl::string_view field, const std::string& id, const std::string& tenant);
  std::vector<std::shared_ptr<Pool>> ListPools(const std::string& tenant) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Buffer>> buffers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Pool>> pools_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_REGISTRY_H_
