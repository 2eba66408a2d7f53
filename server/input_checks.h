// Checks and quoting shared by every service for what a client sends: its
// strings appear in error messages only quoted and cut to a bounded length
// (a 64 KiB id echoed whole would exceed the client's metadata limit and
// turn NOT_FOUND into RESOURCE_EXHAUSTED), strings the server keeps have a
// length limit, and enum fields hold known values.
#ifndef KERNELSERVE_SERVER_INPUT_CHECKS_H_
#define KERNELSERVE_SERVER_INPUT_CHECKS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace google {
namespace protobuf {
class Message;
}  // namespace protobuf
}  // namespace google

namespace kernelserve {

// Longest client string an error message quotes whole.
inline constexpr size_t kMaxQuotedBytes = 64;
// Longest client string the server keeps (labels, names, reasons).
inline constexpr size_t kMaxKeptStringBytes = 256;

// `text` in double quotes with bytes outside printable ASCII (and quotes,
// backslashes) C-escaped; over kMaxQuotedBytes it is cut and its length
// follows: "abc..." (65536 bytes).
std::string QuoteClientText(absl::string_view text);

// INVALID_ARGUMENT "<field>: expected at most <max> bytes, got <n>" when
// `value` is longer than `max`.
absl::Status CheckLength(absl::string_view field, absl::string_view value,
                         size_t max = kMaxKeptStringBytes);

// INVALID_ARGUMENT naming the first enum field anywhere in `message` (nested
// and repeated fields included) whose value is not one of its enum's, e.g.
// "spec.attention.layout: expected one of LAYOUT_UNSPECIFIED, BHSD, BSHD, got 77".
absl::Status CheckEnumFields(const google::protobuf::Message& message, absl::string_view prefix = "");

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_INPUT_CHECKS_H_
