// Client streams whose handler decodes the messages itself. gRPC's own
// ServerReader ends the stream at a message that does not decode exactly as
// at the stream's end, so a handler that commits at the end of its stream
// (an upload, a pool write) would apply the messages before the bad one.
// These methods get raw messages instead (DecodingHandler) and read
// them through a DecodingReader, which tells the two apart.
#ifndef KERNELSERVE_SERVER_DECODING_READER_H_
#define KERNELSERVE_SERVER_DECODING_READER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/method_handler.h"
#include "grpcpp/support/sync_stream.h"

namespace kernelserve {

template <typename Message>
class DecodingReader {
 public:
  explicit DecodingReader(grpc::ServerReader<grpc::ByteBuffer>* raw) : raw_(raw) {}

  // The next message; false at the end of the stream and at a message that
  // does not decode, after which status() says which (and no more are read).
  bool Read(Message* message) {
    if (!status_.ok()) return false;
    grpc::ByteBuffer buffer;
    if (!raw_->Read(&buffer)) return false;
    grpc::Status s = grpc::SerializationTraits<Message>::Deserialize(&buffer, message);
    if (!s.ok()) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          "request: message ", count_, " of the stream is not a valid protobuf message of the method's request type"));
      return false;
    }
    ++count_;
    return true;
  }
  // The next message's bytes, undecoded, for a handler that reads them
  // itself (grpc_wire.h); false at the end of the stream.
  bool ReadRaw(grpc::ByteBuffer* buffer) {
    if (!status_.ok() || !raw_->Read(buffer)) return false;
    ++count_;
    return true;
  }
  const absl::Status& status() const { return status_; }

 private:
  grpc::ServerReader<grpc::ByteBuffer>* raw_;
  absl::Status status_;
  int64_t count_ = 0;
};

// A handler for a client-streaming method that calls (service->*method)(ctx,
// reader, response) with a DecodingReader; the service installs it with
// MarkMethodStreamed(the method's index in the .proto, handler).
template <typename Service, typename Request, typename Response>
grpc::internal::MethodHandler* DecodingHandler(
    Service* service, grpc::Status (Service::*method)(grpc::ServerContext*, DecodingReader<Request>*, Response*)) {
  return new grpc::internal::ClientStreamingHandler<Service, grpc::ByteBuffer, grpc::ByteBuffer>(
      [method](Service* s, grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* raw,
               grpc::ByteBuffer* out) {
        DecodingReader<Request> reader(raw);
        Response response;
        grpc::Status status = (s->*method)(ctx, &reader, &response);
        if (!status.ok()) return status;
        bool own = false;
        return grpc::SerializationTraits<Response>::Serialize(response, out, &own);
      },
      service);
}

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_DECODING_READER_H_
