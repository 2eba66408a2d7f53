// Property test over the fuzz target (request_fuzzer.cc): no request of at
// most the message limit makes the process allocate more than the memory
// limit plus a fixed multiple of the message limit while it is served.
// Every heap allocation of the process (the server, gRPC and the harness's
// client) is counted here by interposing malloc; for each input, the peak of
// live heap bytes over its call is compared with where it started. Inputs:
// the seeds (valid requests of every method and the bad-input corpus, with
// its 2^20-slot pool read), then random mutations.
//
//   KS_FUZZ_ITERATIONS=N KS_FUZZ_SEED=X (defaults 300, random)
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/request_fuzzer.h"

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* p);
}

namespace {

std::atomic<int64_t> live{0};
std::atomic<int64_t> peak{0};

void Count(void* p) {
  if (p == nullptr) return;
  const int64_t now = live.fetch_add(static_cast<int64_t>(malloc_usable_size(p))) +
                      static_cast<int64_t>(malloc_usable_size(p));
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

void Uncount(void* p) {
  if (p != nullptr) live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)));
}

}  // namespace

extern "C" {
void* malloc(size_t size) {
  void* p = __libc_malloc(size);
  Count(p);
  return p;
}
void* calloc(size_t n, size_t size) {
  void* p = __libc_calloc(n, size);
  Count(p);
  return p;
}
void* realloc(void* old, size_t size) {
  Uncount(old);
  void* p = __libc_realloc(old, size);
  // A failed realloc keeps the old block.
  Count(p != nullptr || size == 0 ? p : old);
  return p;
}
void free(void* p) {
  Uncount(p);
  __libc_free(p);
}
void* memalign(size_t alignment, size_t size) {
  void* p = __libc_memalign(alignment, size);
  Count(p);
  return p;
}
void* aligned_alloc(size_t alignment, size_t size) { return memalign(alignment, size); }
int posix_memalign(void** out, size_t alignment, size_t size) {
  void* p = memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t size) { return memalign(4096, size); }
void* pvalloc(size_t size) { return memalign(4096, (size + 4095) / 4096 * 4096); }
}  // extern "C"

namespace {

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

// The fuzz target's server (request_fuzzer.cc): 64 MiB of accounted memory,
// 8 MiB messages. A call may hold everything the limit allows plus, outside
// it, a few messages in flight on each side of the connection.
constexpr int64_t kMemoryLimit = int64_t{64} << 20;
constexpr int64_t kMessageLimit = int64_t{8} << 20;
constexpr int64_t kBound = kMemoryLimit + 10 * kMessageLimit;

}  // namespace

int main(int argc, char** argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> inputs = kernelserve::fuzz::SeedInputs();
  const uint64_t seed = EnvOr("KS_FUZZ_SEED", std::random_device{}());
  const uint64_t iterations = EnvOr("KS_FUZZ_ITERATIONS", 300);
  std::mt19937_64 rng(seed);
  const size_t seeds = inputs.size();
  for (uint64_t i = 0; i < iterations; ++i) {
    inputs.push_back(kernelserve::fuzz::MutateStructured(inputs[rng() % seeds], rng()));
  }
  std::printf("memory_bound_test: %zu seeds, %llu mutations, KS_FUZZ_SEED=%llu, bound %lld bytes\n", seeds,
              static_cast<unsigned long long>(iterations), static_cast<unsigned long long>(seed),
              static_cast<long long>(kBound));
  int failures = 0;
  int64_t worst = 0;
  size_t worst_input = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& input = inputs[i];
    const int64_t start = live.load();
    peak.store(start);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    const int64_t grew = peak.load() - start;
    if (grew > worst) {
      worst = grew;
      worst_input = i;
    }
    if (grew > kBound) {
      ++failures;
      std::printf("FAIL: input %zu (method byte %d, %zu bytes) made the heap grow by %lld bytes, over %lld\n", i,
                  input.empty() ? -1 : static_cast<int>(static_cast<uint8_t>(input[0])), input.size(),
                  static_cast<long long>(grew), static_cast<long long>(kBound));
    }
  }
  std::printf("memory_bound_test: %zu inputs, largest growth %lld bytes (input %zu; bound %lld); %d over: %s\n",
              inputs.size(), static_cast<long long>(worst), worst_input, static_cast<long long>(kBound), failures,
              kernelserve::fuzz::CodeSummary().c_str());
  return failures == 0 ? 0 : 1;
}
