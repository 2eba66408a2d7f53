// Unguessable resource ids: a prefix and 128 random bits in hex.
#ifndef KERNELSERVE_SERVER_IDS_H_
#define KERNELSERVE_SERVER_IDS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace kernelserve {

// NewId("buf") -> "buf-3f2a...": 32 hex digits from the OS random source.
std::string NewId(absl::string_view prefix);

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_IDS_H_
