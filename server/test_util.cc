#include "server/test_util.h"

#include <thread>

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace testing {

std::unique_ptr<KernelServer> StartServer(ServerOptions options) {
  options.listen = "127.0.0.1:0";
  if (options.backend == "auto") options.backend = "cpu";
  auto server = KernelServer::Start(options);
  if (!server.ok()) return nullptr;
  return std::move(*server);
}

std::shared_ptr<grpc::Channel> Connect(int port) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials(), args);
}

pb::Tensor RandomBf16(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  pb::Tensor t;
  t.set_dtype(pb::BF16);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  std::string data(static_cast<size_t>(2 * n), '\0');
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t b = numerics::FloatToBf16(dist(rng), Rounding::kRtne);
    std::memcpy(&data[2 * i], &b, 2);
  }
  t.set_data(std::move(data));
  return t;
}

pb::Tensor RandomBytes(pb::DType dtype, const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  pb::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  const int64_t n = NumBytes(static_cast<DType>(dtype), NumElements(shape));
  std::string data(static_cast<size_t>(n), '\0');
  for (int64_t i = 0; i < n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(&data[i], &r, static_cast<size_t>(std::min<int64_t>(8, n - i)));
  }
  t.set_data(std::move(data));
  return t;
}

HostTensor ToHost(const pb::Tensor& t) {
  TensorDesc desc{static_cast<DType>(t.dtype()), Shape(t.shape().begin(), t.shape().end())};
  const auto* p = reinterpret_cast<const uint8_t*>(t.data().data());
  return HostTensor(desc, std::vector<uint8_t>(p, p + t.data().size()));
}

grpc::Status Upload(pb::BufferService::Stub* stub, const pb::Tensor& t, int64_t chunk_bytes,
                    pb::BufferInfo* info) {
  grpc::ClientContext ctx;
  auto writer = stub->Upload(&ctx, info);
  pb::UploadChunk first;
  first.mutable_header()->set_dtype(t.dtype());
  for (int64_t d : t.shape()) first.mutable_header()->add_shape(d);
  const std::string& data = t.data();
  size_t offset = 0;
  bool ok = true;
  const size_t n0 = std::min<size_t>(chunk_bytes, data.size());
  first.set_data(data.substr(0, n0));
  offset = n0;
  ok = writer->Write(first);
  while (ok && offset < data.size()) {
    pb::UploadChunk c;
    const size_t n = std::min<size_t>(chunk_bytes, data.size() - offset);
    c.set_data(data.data() + offset, n);
    offset += n;
    ok = writer->Write(c);
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status Download(pb::BufferService::Stub* stub, const std::string& id, int64_t chunk_bytes,
                      std::string* bytes, int* chunks) {
  grpc::ClientContext ctx;
  pb::DownloadRequest req;
  req.set_buffer_id(id);
  req.set_chunk_bytes(chunk_bytes);
  auto reader = stub->Download(&ctx, req);
  pb::DownloadChunk c;
  bytes->clear();
  int n = 0;
  bool contiguous = true;
  while (reader->Read(&c)) {
    if (c.offset() != static_cast<int64_t>(bytes->size())) contiguous = false;
    if ((n == 0) != c.has_info()) contiguous = false;
    bytes->append(c.data());
    ++n;
  }
  if (chunks != nullptr) *chunks = n;
  grpc::Status s = reader->Finish();
  if (s.ok() && !contiguous) return grpc::Status(grpc::StatusCode::DATA_LOSS, "chunks out of order");
  return s;
}

bool WaitQueueDepth(pb::DeviceService::Stub* devices, int depth) {
  for (int i = 0; i < 1000; ++i) {
    grpc::ClientContext ctx;
    pb::ListDevicesResponse list;
    if (devices->List(&ctx, pb::ListDevicesRequest(), &list).ok() && list.devices_size() > 0 &&
        list.devices(0).queue_depth() >= depth) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

namespace {

grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromByteBuffer(grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer->Dump(&slices);
  std::string out;
  for (auto& sl : slices) out.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  return out;
}

void Prepare(const RawCall& call, grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + call.timeout);
  for (const auto& [key, value] : call.metadata) ctx->AddMetadata(key, value);
}

}  // namespace

grpc::Status RawUnary(grpc::Channel* channel, const RawCall& call, const std::string& request,
                      std::string* response) {
  grpc::ClientContext ctx;
  Prepare(call, &ctx);
  grpc::ByteBuffer req = ToByteBuffer(request), resp;
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel, grpc::internal::RpcMethod(call.method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC), &ctx, req,
      &resp);
  if (s.ok() && response != nullptr) *response = FromByteBuffer(&resp);
  return s;
}

grpc::Status RawClientStream(grpc::Channel* channel, const RawCall& call, const std::vector<std::string>& messages,
                             std::string* response) {
  grpc::ClientContext ctx;
  Prepare(call, &ctx);
  grpc::ByteBuffer resp;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
          channel, grpc::internal::RpcMethod(call.method.c_str(), grpc::internal::RpcMethod::CLIENT_STREAMING),
          &ctx, &resp));
  for (const std::string& m : messages) {
    if (!writer->Write(ToByteBuffer(m))) break;
  }
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  if (s.ok() && response != nullptr) *response = FromByteBuffer(&resp);
  return s;
}

grpc::Status RawBidiStream(grpc::Channel* channel, const RawCall& call, const std::vector<std::string>& messages,
                           int max_messages, std::vector<std::string>* responses) {
  grpc::ClientContext ctx;
  Prepare(call, &ctx);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel, grpc::internal::RpcMethod(call.method.c_str(), grpc::internal::RpcMethod::BIDI_STREAMING), &ctx));
  std::thread writer([&] {
    for (const std::string& m : messages) {
      if (!stream->Write(ToByteBuffer(m))) break;
    }
    stream->WritesDone();
  });
  grpc::ByteBuffer answer;
  int n = 0;
  while (stream->Read(&answer)) {
    if (responses != nullptr) responses->push_back(FromByteBuffer(&answer));
    if (max_messages > 0 && ++n >= max_messages) {
      ctx.TryCancel();
      break;
    }
  }
  writer.join();
  return stream->Finish();
}

grpc::Status RawServerStream(grpc::Channel* channel, const RawCall& call, const std::string& request,
                             int max_messages, std::vector<std::string>* messages) {
  grpc::ClientContext ctx;
  Prepare(call, &ctx);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel, grpc::internal::RpcMethod(call.method.c_str(), grpc::internal::RpcMethod::SERVER_STREAMING),
          &ctx, ToByteBuffer(request)));
  grpc::ByteBuffer chunk;
  int n = 0;
  while ((max_messages <= 0 || n < max_messages) && reader->Read(&chunk)) {
    ++n;
    if (messages != nullptr) messages->push_back(FromByteBuffer(&chunk));
  }
  if (max_messages > 0 && n >= max_messages) {
    ctx.TryCancel();
    while (reader->Read(&chunk)) {
    }
  }
  return reader->Finish();
}

grpc::Status HealthCheck(grpc::Channel* channel, const std::string& service, std::string* reply) {
  std::string req;
  if (!service.empty()) {
    req.push_back(0x0a);  // field 1, length-delimited
    req.push_back(static_cast<char>(service.size()));
    req += service;
  }
  RawCall call;
  call.method = "/grpc.health.v1.Health/Check";
  call.timeout = std::chrono::seconds(10);
  return RawUnary(channel, call, req, reply);
}

}  // namespace testing
}  // namespace kernelserve
