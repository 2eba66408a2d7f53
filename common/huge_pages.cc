#include "common/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace kernelserve {

namespace {

// The `align`-aligned span [*first, *last) of whole units inside [data,
// data + bytes); false when there is none.
bool InnerAligned(void* data, size_t bytes, uintptr_t align, uintptr_t* first, uintptr_t* last) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = begin + bytes;
  if (data == nullptr || end < begin) return false;
  *first = (begin + align - 1) & ~(align - 1);
  *last = end & ~(align - 1);
  return *last > *first;
}

}  // namespace

void AdviseHugePages(void* data, size_t bytes) {
  uintptr_t first = 0, last = 0;
  if (!InnerAligned(data, bytes, kHugePageBytes, &first, &last)) return;
  (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

void PrefaultPages(void* data, size_t bytes) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14's, for older headers
#endif
  uintptr_t first = 0, last = 0;
  if (!InnerAligned(data, bytes, static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), &first, &last)) return;
  (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE);
}

}  // namespace kernelserve
