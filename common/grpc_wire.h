// Reading and writing protobuf messages that carry a large bytes field,
// straight from and into grpc::ByteBuffer slices. The generated parser copies
// a bytes field out of the received slices into a std::string and the
// serializer copies it back into a fresh buffer; for buffer uploads and
// downloads those are whole extra passes over the payload. These helpers
// produce and accept exactly protobuf's wire format, so either side may use
// the generated code instead.
#ifndef KERNELSERVE_COMMON_GRPC_WIRE_H_
#define KERNELSERVE_COMMON_GRPC_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace kernelserve {
namespace wire {

// One message's top-level fields, parsed without copying: length-delimited
// fields are views into the buffer's slices, which the message keeps alive.
class WireMessage {
 public:
  WireMessage() = default;
  // Movable, not copyable: the views point into slices_'s elements (a small
  // slice holds its bytes inline), which a move keeps in place.
  WireMessage(WireMessage&&) = default;
  WireMessage& operator=(WireMessage&&) = default;
  WireMessage(const WireMessage&) = delete;
  WireMessage& operator=(const WireMessage&) = delete;

  // Parses `buffer`. Unknown fields are skipped, as protobuf does. A field
  // that repeats keeps, like protobuf: a varint its last value, a bytes
  // field its last occurrence, a sub-message all occurrences in order
  // (parsing their concatenation merges them). Bytes that are not a
  // protobuf message get InvalidArgument: `what` (which says what was
  // expected), then why and at which byte.
  absl::Status Parse(const grpc::ByteBuffer& buffer, absl::string_view what);

  bool Has(int number) const;
  // The last varint of field `number`, or 0 when absent.
  uint64_t Varint(int number) const;
  // The bytes of field `number`'s last occurrence, in pieces (empty when absent).
  const std::vector<absl::string_view>& Bytes(int number) const;
  // Every occurrence of field `number`, concatenated and copied: for the
  // small sub-messages (headers) that go to the generated parser.
  std::string Concatenated(int number) const;
  int64_t BytesSize(int number) const;

 private:
  struct Field {
    int number = 0;
    uint64_t varint = 0;
    std::vector<absl::string_view> pieces;  // length-delimited fields only
  };
  const Field* Last(int number) const;

  std::vector<grpc::Slice> slices_;
  std::vector<Field> fields_;
};

// The tag and length that introduce length-delimited field `number` holding
// `size` bytes, appended to `out`.
void AppendLengthPrefix(int number, uint64_t size, std::string* out);

// A message serialized as `prefix` (already-serialized fields numbered below
// `number`), then field `number` holding `payload`'s bytes, which are not
// copied. An empty payload adds no field, as protobuf omits an empty bytes
// field.
grpc::ByteBuffer WithBytesField(const std::string& prefix, int number, grpc::Slice payload);

}  // namespace wire
}  // namespace kernelserve

#endif  // KERNELSERVE_COMMON_GRPC_WIRE_H_
