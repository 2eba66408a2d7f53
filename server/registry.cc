#include "server/registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/input_checks.h"

namespace kernelserve {

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = other.owner_;
    device_ = other.device_;
    tenant_ = std::move(other.tenant_);
    bytes_ = other.bytes_;
    other.owner_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Reservation::Release() {
  if (owner_ != nullptr) owner_->Release(device_, tenant_, bytes_);
  owner_ = nullptr;
  bytes_ = 0;
}

void Reservation::Merge(Reservation&& more) {
  if (more.owner_ == nullptr) return;
  if (owner_ == nullptr) {
    *this = std::move(more);
    return;
  }
  bytes_ += more.bytes_;
  more.owner_ = nullptr;
  more.bytes_ = 0;
}

MemoryAccountant::MemoryAccountant(std::vector<int64_t> limits)
    : limits_(std::move(limits)), used_(limits_.size(), 0) {}

absl::StatusOr<Reservation> MemoryAccountant::Reserve(int device, const std::string& tenant,
                                                      int64_t bytes, absl::string_view what) {
  if (device < 0 || device >= static_cast<int>(limits_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("device: no device ", device));
  }
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative size ", bytes));
  absl::MutexLock lock(&mu_);
  const int64_t limit = limits_[device];
  if (bytes > limit - used_[device]) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "device ", device, " memory limit exceeded: ", what, " needs ", bytes, " bytes, ",
        used_[device], " of the limit of ", limit, " bytes are in use (",
        limit - used_[device], " free; see --memory_limit_mb)"));
  }
  if (tenant_check_) {
    auto held = tenant_used_.find(tenant);
    absl::Status s = tenant_check_(tenant, held == tenant_used_.end() ? 0 : held->second, bytes);
    // Named like the device's refusal: which of a call's charges did not fit.
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(s.message(), " (for ", what, ")"));
  }
  used_[device] += bytes;
  tenant_used_[tenant] += bytes;
  Reservation r;
  r.owner_ = this;
  r.device_ = device;
  r.tenant_ = tenant;
  r.bytes_ = bytes;
  return r;
}

void MemoryAccountant::SetTenantCheck(TenantCheck check) {
  absl::MutexLock lock(&mu_);
  tenant_check_ = std::move(check);
}

std::map<std::string, int64_t> MemoryAccountant::tenant_usage() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int64_t> out;
  for (const auto& [tenant, bytes] : tenant_used_) {
    if (bytes != 0) out.emplace(tenant, bytes);
  }
  return out;
}

void MemoryAccountant::Release(int device, const std::string& tenant, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  used_[device] -= bytes;
  auto it = tenant_used_.find(tenant);
  if (it != tenant_used_.end()) {
    it->second -= bytes;
    if (it->second == 0) tenant_used_.erase(it);
  }
}

int64_t MemoryAccountant::used(int device) const {
  absl::MutexLock lock(&mu_);
  return used_[device];
}

int64_t MemoryAccountant::limit(int device) const { return limits_[device]; }

int64_t MemoryAccountant::tenant_used(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = tenant_used_.find(tenant);
  return it == tenant_used_.end() ? 0 : it->second;
}

namespace {

template <typename T>
absl::StatusOr<std::shared_ptr<T>> Find(const std::map<std::string, std::shared_ptr<T>>& m,
                                        absl::string_view kind, absl::string_view field,
                                        const std::string& id, const std::string& tenant) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  auto it = m.find(id);
  if (it == m.end() || it->second->owner != tenant) {
    return absl::NotFoundError(absl::StrCat(field, ": no ", kind, " ", QuoteClientText(id)));
  }
  return it->second;
}

}  // namespace

void Registry::AddBuffer(std::shared_ptr<Buffer> buffer) {
  absl::MutexLock lock(&mu_);
  buffers_[buffer->id] = std::move(buffer);
}

absl::StatusOr<std::shared_ptr<Buffer>> Registry::GetBuffer(absl::string_view field,
                                                            const std::string& id,
                                                            const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  return Find(buffers_, "buffer", field, id, tenant);
}

absl::Status Registry::RemoveBuffer(absl::string_view field, const std::string& id,
                                    const std::string& tenant) {
  std::shared_ptr<Buffer> removed;  // freed outside the lock
  absl::MutexLock lock(&mu_);
  auto found = Find(buffers_, "buffer", field, id, tenant);
  if (!found.ok()) return found.status();
  removed = std::move(*found);
  buffers_.erase(id);
  return absl::OkStatus();
}

std::vector<std::shared_ptr<Buffer>> Registry::ListBuffers(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Buffer>> out;
  for (const auto& [id, b] : buffers_) {
    if (b->owner == tenant) out.push_back(b);
  }
  return out;
}

void Registry::AddPool(std::shared_ptr<Pool> pool) {
  absl::MutexLock lock(&mu_);
  pools_[pool->id] = std::move(pool);
}

absl::StatusOr<std::shared_ptr<Pool>> Registry::GetPool(absl::string_view field, const std::string& id,
                                                        const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  return Find(pools_, "pool", field, id, tenant);
}

absl::Status Registry::RemovePool(absl::string_view field, const std::string& id,
                                  const std::string& tenant) {
  std::shared_ptr<Pool> removed;
  absl::MutexLock lock(&mu_);
  auto found = Find(pools_, "pool", field, id, tenant);
  if (!found.ok()) return found.status();
  removed = std::move(*found);
  pools_.erase(id);
  return absl::OkStatus();
}

std::vector<std::shared_ptr<Pool>> Registry::ListPools(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Pool>> out;
  for (const auto& [id, p] : pools_) {
    if (p->owner == tenant) out.push_back(p);
  }
  return out;
}

}  // namespace kernelserve
