// Freed memory blocks kept by size for the next allocation of that size, up
// to a byte limit: device memory (cudaMalloc synchronizes and costs
// milliseconds), page-locked host blocks (pinning tens of MiB takes
// milliseconds), host staging blocks (fresh pages fault on first touch).
// A block is its owner's from Take (or its own allocation) until Put;
// contents are not cleared.
#ifndef KERNELSERVE_COMMON_BLOCK_CACHE_H_
#define KERNELSERVE_COMMON_BLOCK_CACHE_H_

#include <cstddef>
#include <functional>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kernelserve {

class BlockCache {
 public:
  // `free_block(p, bucket)` returns a block the cache does not keep.
  BlockCache(size_t max_bytes, std::function<void(void*, size_t)> free_block)
      : max_bytes_(max_bytes), free_block_(std::move(free_block)) {}
  ~BlockCache() { Release(); }
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // The size class of an allocation of `bytes`: a power of two from
  // `smallest` below 2 MiB, whole 2 MiB steps from there (a huge page each).
  static size_t Bucket(size_t bytes, size_t smallest) {
    constexpr size_t kStep = size_t{2} << 20;
    if (bytes >= kStep) return (bytes + kStep - 1) / kStep * kStep;
    size_t b = smallest;
    while (b < bytes) b <<= 1;
    return b;
  }

  // A cached block of exactly `bucket` bytes, or nullptr.
  void* Take(size_t bucket) {
    absl::MutexLock lock(&mu_);
    auto it = free_.find(bucket);
    if (it == free_.end()) return nullptr;
    void* p = it->second;
    free_.erase(it);
    cached_ -= bucket;
    return p;
  }

  // Keeps the block if it fits under the limit, else frees it.
  void Put(void* p, size_t bucket) {
    {
      absl::MutexLock lock(&mu_);
      if (cached_ + bucket <= max_bytes_) {
        free_.emplace(bucket, p);
        cached_ += bucket;
        return;
      }
    }
    free_block_(p, bucket);
  }

  // Frees every cached block (before retrying a failed allocation, and at exit).
  void Release() {
    std::multimap<size_t, void*> all;
    {
      absl::MutexLock lock(&mu_);
      all.swap(free_);
      cached_ = 0;
    }
    for (auto& [bucket, p] : all) free_block_(p, bucket);
  }

  size_t cached_bytes() const {
    absl::MutexLock lock(&mu_);
    return cached_;
  }

 private:
  const size_t max_bytes_;
  const std::function<void(void*, size_t)> free_block_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, void*> free_ ABSL_GUARDED_BY(mu_);
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_COMMON_BLOCK_CACHE_H_
