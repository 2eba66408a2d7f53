#include "server/ids.h"

#include <cstdint>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace kernelserve {

std::string NewId(absl::string_view prefix) {
  // std::random_device reads the kernel's CSPRNG on Linux (getrandom / urandom).
  static absl::Mutex mu(absl::kConstInit);
  static std::random_device* device = new std::random_device();
  uint32_t words[4];
  {
    absl::MutexLock lock(&mu);
    for (uint32_t& w : words) w = (*device)();
  }
  std::string id = absl::StrCat(prefix, "-");
  for (uint32_t w : words) absl::StrAppend(&id, absl::Hex(w, absl::kZeroPad8));
  return id;
}

}  // namespace kernelserve
