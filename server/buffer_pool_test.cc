// Buffers, pools, devices, health and reflection against a real server on
// loopback, with raw stubs. Every bad call must return the right code and a
// message naming the field, and leave the server and its buffers unchanged.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/sync_stream.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/pool.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/server.h"
#include "server/test_util.h"

namespace kernelserve {
namespace {

namespace pb = ::kernelserve::v1;
using ::kernelserve::testing::Connect;
using ::kernelserve::testing::Download;
using ::kernelserve::testing::HealthCheck;
using ::kernelserve::testing::RandomBf16;
using ::kernelserve::testing::RandomBytes;
using ::kernelserve::testing::StartServer;
using ::kernelserve::testing::Upload;
using ::testing::HasSubstr;

class ServerTest : public ::testing::Test {
 protected:
  void StartWith(ServerOptions options) {
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    channel_ = Connect(server_->port());
    buffers_ = pb::BufferService::NewStub(channel_);
    pools_ = pb::PoolService::NewStub(channel_);
    devices_ = pb::DeviceService::NewStub(channel_);
    kernels_ = pb::KernelService::NewStub(channel_);
  }
  void SetUp() override {
    ServerOptions options;
    options.max_message_mb = 4;
    StartWith(options);
  }

  // A known buffer every bad call must leave unchanged.
  void MakeWitness() {
    witness_ = RandomBf16({3, 5, 7}, 99);
    ASSERT_TRUE(Upload(buffers_.get(), witness_, 64, &witness_info_).ok());
  }
  void ExpectWitnessIntact() {
    std::string bytes;
    ASSERT_TRUE(Download(buffers_.get(), witness_info_.id(), 0, &bytes).ok());
    EXPECT_EQ(bytes, witness_.data());
    // And a fresh good call still works.
    pb::BufferInfo info;
    pb::Tensor t = RandomBf16({2, 2}, 5);
    ASSERT_TRUE(Upload(buffers_.get(), t, 1 << 20, &info).ok());
    ASSERT_TRUE(Download(buffers_.get(), info.id(), 0, &bytes).ok());
    EXPECT_EQ(bytes, t.data());
    grpc::ClientContext ctx;
    pb::FreeBufferRequest req;
    req.set_buffer_id(info.id());
    pb::FreeBufferResponse resp;
    EXPECT_TRUE(buffers_->Free(&ctx, req, &resp).ok());
  }

  std::unique_ptr<KernelServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::BufferService::Stub> buffers_;
  std::unique_ptr<pb::PoolService::Stub> pools_;
  std::unique_ptr<pb::DeviceService::Stub> devices_;
  std::unique_ptr<pb::KernelService::Stub> kernels_;
  pb::Tensor witness_;
  pb::BufferInfo witness_info_;
};

TEST_F(ServerTest, UploadDownloadRoundTripAndList) {
  pb::Tensor t = RandomBf16({4, 33}, 1);
  pb::BufferInfo info;
  ASSERT_TRUE(Upload(buffers_.get(), t, 50, &info).ok());
  EXPECT_THAT(info.id(), ::testing::StartsWith("buf-"));
  EXPECT_EQ(info.id().size(), 4u + 32u);
  EXPECT_EQ(info.dtype(), pb::BF16);
  EXPECT_EQ(info.size_bytes(), 4 * 33 * 2);
  ASSERT_EQ(info.shape_size(), 2);
  EXPECT_EQ(info.shape(1), 33);

  std::string bytes;
  int chunks = 0;
  ASSERT_TRUE(Download(buffers_.get(), info.id(), 100, &bytes, &chunks).ok());
  EXPECT_EQ(bytes, t.data());
  EXPECT_EQ(chunks, (4 * 33 * 2 + 99) / 100);

  {
    grpc::ClientContext ctx;
    pb::ListBuffersResponse list;
    ASSERT_TRUE(buffers_->List(&ctx, pb::ListBuffersRequest(), &list).ok());
    ASSERT_EQ(list.buffers_size(), 1);
    EXPECT_EQ(list.buffers(0).id(), info.id());
  }
  {
    grpc::ClientContext ctx;
    pb::FreeBufferRequest req;
    req.set_buffer_id(info.id());
    pb::FreeBufferResponse resp;
    ASSERT_TRUE(buffers_->Free(&ctx, req, &resp).ok());
  }
  grpc::Status s = Download(buffers_.get(), info.id(), 0, &bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("buffer_id"));
  grpc::ClientContext ctx;
  pb::FreeBufferRequest req;
  req.set_buffer_id(info.id());
  pb::FreeBufferResponse resp;
  EXPECT_EQ(buffers_->Free(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerTest, SixtyFourMegabytesThroughFourMegabyteMessages) {
  pb::Tensor t = RandomBytes(pb::UINT8, {64 << 20}, 7);
  pb::BufferInfo info;
  grpc::Status s = Upload(buffers_.get(), t, 1 << 20, &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.size_bytes(), 64 << 20);
  std::string bytes;
  int chunks = 0;
  ASSERT_TRUE(Download(buffers_.get(), info.id(), 0, &bytes, &chunks).ok());
  EXPECT_EQ(chunks, 64);  // default 1 MiB chunks
  EXPECT_TRUE(bytes == t.data());
  // A chunk size over the message limit is clamped, not an error.
  ASSERT_TRUE(Download(buffers_.get(), info.id(), 16 << 20, &bytes, &chunks).ok());
  EXPECT_TRUE(bytes == t.data());
  EXPECT_GT(chunks, 16);
}

// Past two of the server's 64 MiB upload batches (whose chunk strings are then
// handed back to the parser) and its 16 MiB download staging batches: messages of mixed sizes (a recycled string
// may be larger or smaller than the next chunk) and an odd download chunk
// keep every byte.
TEST_F(ServerTest, MixedChunkSizesAcrossUploadAndDownloadBatches) {
  const int64_t total = (140 << 20) + 12345;
  pb::Tensor t = RandomBytes(pb::UINT8, {total}, 11);
  grpc::ClientContext ctx;
  pb::BufferInfo info;
  auto writer = buffers_->Upload(&ctx, &info);
  const int64_t sizes[] = {(1 << 20) + 13, (3 << 20) - 7, 256 << 10, 2 << 20, 1};
  int64_t off = 0;
  for (int i = 0; off < total; ++i) {
    const int64_t n = std::min(sizes[i % 5], total - off);
    pb::UploadChunk c;
    if (i == 0) {
      c.mutable_header()->set_dtype(pb::UINT8);
      c.mutable_header()->add_shape(total);
    }
    c.set_data(t.data().substr(static_cast<size_t>(off), static_cast<size_t>(n)));
    ASSERT_TRUE(writer->Write(c));
    off += n;
  }
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::string bytes;
  int chunks = 0;
  ASSERT_TRUE(Download(buffers_.get(), info.id(), (3 << 20) + 5, &bytes, &chunks).ok());
  EXPECT_EQ(bytes.size(), static_cast<size_t>(total));
  EXPECT_TRUE(bytes == t.data()) << "the downloaded bytes differ from the uploaded ones";
}

// Streams raw upload messages and returns the status.
// Memory the server accounts on device 0 (buffers, pools, staging in flight).
int64_t MemoryUsed(pb::DeviceService::Stub* devices) {
  grpc::ClientContext ctx;
  pb::ListDevicesResponse resp;
  EXPECT_TRUE(devices->List(&ctx, pb::ListDevicesRequest(), &resp).ok());
  return resp.devices_size() > 0 ? resp.devices(0).memory_used_bytes() : -1;
}

grpc::Status RawUpload(pb::BufferService::Stub* stub, const std::vector<pb::UploadChunk>& msgs) {
  grpc::ClientContext ctx;
  pb::BufferInfo info;
  auto writer = stub->Upload(&ctx, &info);
  for (const auto& m : msgs) {
    if (!writer->Write(m)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

pb::UploadChunk Header(pb::DType dtype, std::vector<int64_t> shape, std::string data) {
  pb::UploadChunk c;
  c.mutable_header()->set_dtype(dtype);
  for (int64_t d : shape) c.mutable_header()->add_shape(d);
  c.set_data(std::move(data));
  return c;
}

pb::UploadChunk Data(std::string data) {
  pb::UploadChunk c;
  c.set_data(std::move(data));
  return c;
}

TEST_F(ServerTest, BadUploadsNameTheFieldAndChangeNothing) {
  MakeWitness();
  struct Case {
    std::string name;
    std::vector<pb::UploadChunk> msgs;
    grpc::StatusCode code;
    std::string substr;
  };
  pb::UploadChunk bad_dtype = Header(pb::BF16, {2}, std::string(4, 'x'));
  bad_dtype.mutable_header()->set_dtype(static_cast<pb::DType>(99));
  pb::UploadChunk bad_device = Header(pb::BF16, {2}, std::string(4, 'x'));
  bad_device.mutable_header()->set_device(3);
  std::vector<Case> cases = {
      {"no header", {Data("abcd")}, grpc::StatusCode::INVALID_ARGUMENT, "header"},
      {"empty stream", {}, grpc::StatusCode::INVALID_ARGUMENT, "header"},
      {"unknown dtype", {bad_dtype}, grpc::StatusCode::INVALID_ARGUMENT, "header.dtype"},
      {"unspecified dtype", {Header(pb::DTYPE_UNSPECIFIED, {2}, "")}, grpc::StatusCode::INVALID_ARGUMENT,
       "header.dtype"},
      {"zero dim", {Header(pb::BF16, {2, 0}, "")}, grpc::StatusCode::INVALID_ARGUMENT,
       "header.shape[1]: expected > 0, got 0"},
      {"negative dim", {Header(pb::FP32, {-3}, "")}, grpc::StatusCode::INVALID_ARGUMENT,
       "header.shape[0]: expected > 0, got -3"},
      {"short", {Header(pb::BF16, {2, 3}, std::string(11, 'x'))}, grpc::StatusCode::INVALID_ARGUMENT,
       "data: expected 12 bytes (bf16[2,3]), got 11"},
      {"long", {Header(pb::BF16, {2, 3}, std::string(8, 'x')), Data(std::string(8, 'y'))},
       grpc::StatusCode::INVALID_ARGUMENT, "data: expected 12 bytes"},
      {"second header", {Header(pb::BF16, {2}, "ab"), Header(pb::BF16, {2}, "cd")},
       grpc::StatusCode::INVALID_ARGUMENT, "header: only the first message"},
      {"bad device", {bad_device}, grpc::StatusCode::INVALID_ARGUMENT, "header.device"},
      {"overflowing shape", {Header(pb::FP64, {1LL << 40, 1LL << 40}, "")},
       grpc::StatusCode::INVALID_ARGUMENT, "header.shape"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    grpc::Status s = RawUpload(buffers_.get(), c.msgs);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.substr));
    ExpectWitnessIntact();
  }
  grpc::ClientContext ctx;
  pb::ListBuffersResponse list;
  ASSERT_TRUE(buffers_->List(&ctx, pb::ListBuffersRequest(), &list).ok());
  EXPECT_EQ(list.buffers_size(), 1);  // only the witness
}

// An upload registers its buffer only once every byte arrived: a bad message
// at any position, or a stream that ends early, leaves no buffer and no
// memory held.
TEST_F(ServerTest, UploadIsAllOrNothingWithABadMessageAtEveryPosition) {
  MakeWitness();
  const int64_t used = MemoryUsed(devices_.get());
  constexpr int kMessages = 4;
  auto good = [](int i) {
    pb::UploadChunk c = i == 0 ? Header(pb::BF16, {kMessages, 1024}, "") : pb::UploadChunk();
    c.set_data(std::string(2048, static_cast<char>('a' + i)));
    return c;
  };
  struct Bad {
    std::string name;
    void (*edit)(pb::UploadChunk*);
    std::string substr;
  };
  const std::vector<Bad> bads = {
      {"extra bytes", [](pb::UploadChunk* c) { c->mutable_data()->append(3000, 'z'); }, "data: expected 8192 bytes"},
      {"header again", [](pb::UploadChunk* c) { c->mutable_header()->set_dtype(pb::BF16); }, "header"},
      {"short stream", nullptr, "data: expected 8192 bytes"},
  };
  for (const Bad& bad : bads) {
    for (int at = 0; at < kMessages; ++at) {
      if (bad.name == "header again" && at == 0) continue;  // the first message carries it anyway
      SCOPED_TRACE(bad.name + " at message " + std::to_string(at));
      std::vector<pb::UploadChunk> msgs;
      for (int i = 0; i < kMessages; ++i) msgs.push_back(good(i));
      if (bad.edit != nullptr) {
        bad.edit(&msgs[at]);
      } else {
        msgs.resize(at + 1);
        if (at == kMessages - 1) msgs.back().mutable_data()->pop_back();
      }
      grpc::Status s = RawUpload(buffers_.get(), msgs);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr(bad.substr));
      grpc::ClientContext ctx;
      pb::ListBuffersResponse list;
      ASSERT_TRUE(buffers_->List(&ctx, pb::ListBuffersRequest(), &list).ok());
      EXPECT_EQ(list.buffers_size(), 1) << "only the witness";
      EXPECT_EQ(MemoryUsed(devices_.get()), used);
    }
  }
  std::vector<pb::UploadChunk> msgs;
  for (int i = 0; i < kMessages; ++i) msgs.push_back(good(i));
  EXPECT_TRUE(RawUpload(buffers_.get(), msgs).ok());
  ExpectWitnessIntact();
}

// Upload messages as raw bytes, as a client that writes the wire format
// itself may send them.
grpc::Status RawBytesUpload(grpc::Channel* channel, const std::vector<std::string>& msgs) {
  grpc::ClientContext ctx;
  grpc::ByteBuffer response;
  const grpc::internal::RpcMethod method("/kernelserve.v1.BufferService/Upload",
                                         grpc::internal::RpcMethod::CLIENT_STREAMING);
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel, method, &ctx, &response));
  for (const std::string& m : msgs) {
    grpc::Slice slice(m);
    if (!writer->Write(grpc::ByteBuffer(&slice, 1))) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

// The server reads upload chunks from their bytes (common/grpc_wire.h):
// bytes protobuf would refuse get INVALID_ARGUMENT naming the message, and
// leave no buffer and no memory held; bytes protobuf accepts (unknown
// fields, a data field sent twice: the last counts) upload as protobuf reads them.
TEST_F(ServerTest, MalformedUploadBytesAreRefusedAndChangeNothing) {
  MakeWitness();
  const int64_t used = MemoryUsed(devices_.get());
  const std::string head = Header(pb::BF16, {4}, std::string(4, 'a')).SerializeAsString();
  const std::string tail = Data(std::string(4, 'b')).SerializeAsString();
  struct Case {
    std::string name;
    std::vector<std::string> msgs;
    std::string substr;
  };
  const std::vector<Case> cases = {
      {"data claims more than sent", {head, std::string("\x12\x08" "bb", 4)},
       "request: message 1 of the stream is not a valid protobuf message"},
      {"truncated first message", {head.substr(0, head.size() - 1)},
       "request: message 0 of the stream is not a valid protobuf message"},
      {"group wire type", {head, std::string("\x0b", 1)}, "unsupported wire type 3"},
      {"header that is not an UploadHeader", {std::string("\x0a\x02\x08\xff", 4) + tail},
       "header is not a valid protobuf message of type UploadHeader"},
      {"more bytes than the shape", {head, tail, tail}, "data: expected 8 bytes (bf16[4]), got more (12 by message 2)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    grpc::Status s = RawBytesUpload(channel_.get(), c.msgs);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.substr));
    grpc::ClientContext ctx;
    pb::ListBuffersResponse list;
    ASSERT_TRUE(buffers_->List(&ctx, pb::ListBuffersRequest(), &list).ok());
    EXPECT_EQ(list.buffers_size(), 1) << "only the witness";
    EXPECT_EQ(MemoryUsed(devices_.get()), used);
    ExpectWitnessIntact();
  }
  // Unknown field 9 (varint), then data twice: protobuf keeps "cccc".
  const std::string odd = std::string("\x48\x05", 2) + Data("zz").SerializeAsString() + Data("cccc").SerializeAsString();
  ASSERT_TRUE(RawBytesUpload(channel_.get(), {head, odd}).ok());
  grpc::ClientContext ctx;
  pb::ListBuffersResponse list;
  ASSERT_TRUE(buffers_->List(&ctx, pb::ListBuffersRequest(), &list).ok());
  ASSERT_EQ(list.buffers_size(), 2);
  std::string id;
  for (const auto& b : list.buffers()) {
    if (b.size_bytes() == 8) id = b.id();
  }
  grpc::ClientContext dctx;
  pb::DownloadRequest req;
  req.set_buffer_id(id);
  auto reader = buffers_->Download(&dctx, req);
  pb::DownloadChunk chunk;
  std::string got;
  while (reader->Read(&chunk)) got += chunk.data();
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(got, "aaaacccc");
}

TEST_F(ServerTest, BadDownloadsAndFrees) {
  MakeWitness();
  std::string bytes;
  grpc::Status s = Download(buffers_.get(), "buf-00000000000000000000000000000000", 0, &bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("buffer_id"));
  s = Download(buffers_.get(), "", 0, &bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = Download(buffers_.get(), witness_info_.id(), -5, &bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("chunk_bytes"));
  ExpectWitnessIntact();
}

TEST_F(ServerTest, OversizedRequestIsRefusedByGrpc) {
  MakeWitness();
  // One 5 MiB inline tensor in a 4 MiB-limited server.
  pb::AttentionRequest req;
  *req.mutable_q()->mutable_tensor() = RandomBytes(pb::BF16, {1, 1, 20480, 128}, 3);
  grpc::ClientContext ctx;
  pb::AttentionResponse resp;
  grpc::Status s = kernels_->Attention(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  // An oversized upload message too.
  pb::UploadChunk big = Header(pb::UINT8, {5 << 20}, std::string(5 << 20, 'z'));
  s = RawUpload(buffers_.get(), {big});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  ExpectWitnessIntact();
}

TEST_F(ServerTest, MemoryLimitIsResourceExhausted) {
  ServerOptions options;
  options.memory_limit_mb = 1;
  StartWith(options);
  MakeWitness();
  pb::BufferInfo info;
  grpc::Status s = Upload(buffers_.get(), RandomBytes(pb::UINT8, {2 << 20}, 1), 1 << 20, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("memory limit"));
  EXPECT_THAT(s.error_message(), HasSubstr("2097152 bytes"));
  EXPECT_THAT(s.error_message(), HasSubstr("1048576 bytes"));
  ExpectWitnessIntact();
  // Freeing returns the memory: two 600 KB buffers do not fit at once, but in turn they do.
  pb::BufferInfo a, b;
  ASSERT_TRUE(Upload(buffers_.get(), RandomBytes(pb::UINT8, {600 << 10}, 2), 1 << 20, &a).ok());
  EXPECT_EQ(Upload(buffers_.get(), RandomBytes(pb::UINT8, {600 << 10}, 3), 1 << 20, &b).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  grpc::ClientContext ctx;
  pb::FreeBufferRequest req;
  req.set_buffer_id(a.id());
  pb::FreeBufferResponse resp;
  ASSERT_TRUE(buffers_->Free(&ctx, req, &resp).ok());
  EXPECT_TRUE(Upload(buffers_.get(), RandomBytes(pb::UINT8, {600 << 10}, 3), 1 << 20, &b).ok());
}

TEST_F(ServerTest, DevicesListed) {
  MakeWitness();
  grpc::ClientContext ctx;
  pb::ListDevicesResponse resp;
  ASSERT_TRUE(devices_->List(&ctx, pb::ListDevicesRequest(), &resp).ok());
  ASSERT_EQ(resp.devices_size(), 1);
  const pb::Device& d = resp.devices(0);
  EXPECT_EQ(d.backend(), "cpu");
  EXPECT_EQ(d.state(), pb::HEALTHY);
  EXPECT_EQ(d.memory_used_bytes(), 3 * 5 * 7 * 2);
  EXPECT_GT(d.memory_limit_bytes(), 0);
  EXPECT_EQ(d.queue_capacity(), 64);
  EXPECT_EQ(d.queue_depth(), 0);
  EXPECT_FALSE(resp.server_version().empty());
}

// ------------------------------------------------------------------ pools

pb::Tensor Slots32(const std::vector<int32_t>& s) {
  pb::Tensor t;
  t.set_dtype(pb::INT32);
  t.add_shape(static_cast<int64_t>(s.size()));
  t.set_data(std::string(reinterpret_cast<const char*>(s.data()), 4 * s.size()));
  return t;
}

class PoolTest : public ServerTest {
 protected:
  pb::PoolInfo CreateMla(int64_t slots, int page) {
    pb::CreatePoolRequest req;
    req.set_kind(pb::MLA_FUSED);
    req.set_num_slots(slots);
    req.set_page_size(page);
    req.set_dtype(pb::FP8_E4M3FN);
    req.set_kv_scale(0.5);
    grpc::ClientContext ctx;
    pb::PoolInfo info;
    grpc::Status s = pools_->Create(&ctx, req, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }
  grpc::Status Write(const std::vector<pb::WritePoolChunk>& msgs, pb::WritePoolResponse* resp) {
    grpc::ClientContext ctx;
    auto w = pools_->Write(&ctx, resp);
    for (const auto& m : msgs) {
      if (!w->Write(m)) break;
    }
    w->WritesDone();
    return w->Finish();
  }
  grpc::Status Read(const pb::ReadPoolRequest& req, std::string* bytes, int* chunks = nullptr) {
    grpc::ClientContext ctx;
    auto r = pools_->Read(&ctx, req);
    pb::ReadPoolChunk c;
    bytes->clear();
    int n = 0;
    while (r->Read(&c)) {
      bytes->append(c.rows().data());
      ++n;
    }
    if (chunks) *chunks = n;
    return r->Finish();
  }
  std::string ReadAll(const pb::PoolInfo& info) {
    pb::ReadPoolRequest req;
    req.set_pool_id(info.id());
    req.set_count(info.num_slots());
    std::string bytes;
    EXPECT_TRUE(Read(req, &bytes).ok());
    return bytes;
  }
};

TEST_F(PoolTest, CreateWriteReadStatsDelete) {
  pb::PoolInfo info = CreateMla(64, 16);
  EXPECT_THAT(info.id(), ::testing::StartsWith("pool-"));
  EXPECT_EQ(info.row_elements(), 576);
  EXPECT_EQ(info.size_bytes(), 64 * 576);
  EXPECT_EQ(info.kv_scale(), 0.5);
  EXPECT_EQ(ReadAll(info), std::string(64 * 576, '\0'));  // new pools are zero

  pb::WritePoolChunk c1;
  c1.set_pool_id(info.id());
  *c1.mutable_slots() = Slots32({5, 6, 7, 40});
  *c1.mutable_rows() = RandomBytes(pb::FP8_E4M3FN, {4, 576}, 11);
  pb::WritePoolChunk c2;  // later messages may omit the pool id
  *c2.mutable_slots() = Slots32({63});
  *c2.mutable_rows() = RandomBytes(pb::FP8_E4M3FN, {1, 576}, 12);
  pb::WritePoolResponse wr;
  ASSERT_TRUE(Write({c1, c2}, &wr).ok());
  EXPECT_EQ(wr.rows_written(), 5);
  EXPECT_EQ(wr.pool().rows_written(), 5);

  std::string expect(64 * 576, '\0');
  const int slots[] = {5, 6, 7, 40};
  for (int i = 0; i < 4; ++i) expect.replace(slots[i] * 576, 576, c1.rows().data().substr(i * 576, 576));
  expect.replace(63 * 576, 576, c2.rows().data());
  EXPECT_TRUE(ReadAll(info) == expect);

  // Read by slot list, in small chunks.
  pb::ReadPoolRequest rq;
  rq.set_pool_id(info.id());
  *rq.mutable_slots() = Slots32({63, 5});
  rq.set_chunk_rows(1);
  std::string bytes;
  int chunks = 0;
  ASSERT_TRUE(Read(rq, &bytes, &chunks).ok());
  EXPECT_EQ(chunks, 2);
  EXPECT_TRUE(bytes == c2.rows().data() + c1.rows().data().substr(0, 576));

  {
    grpc::ClientContext ctx;
    pb::PoolStatsRequest sr;
    sr.set_pool_id(info.id());
    pb::PoolInfo st;
    ASSERT_TRUE(pools_->Stats(&ctx, sr, &st).ok());
    EXPECT_EQ(st.rows_written(), 5);
  }
  {
    grpc::ClientContext ctx;
    pb::ListPoolsResponse lr;
    ASSERT_TRUE(pools_->List(&ctx, pb::ListPoolsRequest(), &lr).ok());
    ASSERT_EQ(lr.pools_size(), 1);
  }
  {
    grpc::ClientContext ctx;
    pb::DeletePoolRequest dr;
    dr.set_pool_id(info.id());
    pb::DeletePoolResponse dresp;
    ASSERT_TRUE(pools_->Delete(&ctx, dr, &dresp).ok());
  }
  grpc::ClientContext ctx;
  pb::PoolStatsRequest sr;
  sr.set_pool_id(info.id());
  pb::PoolInfo st;
  grpc::Status s = pools_->Stats(&ctx, sr, &st);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("pool_id"));
  pb::WritePoolResponse wr2;
  s = Write({c1}, &wr2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(PoolTest, BadWritesAreRejectedWholeAndNameTheField) {
  MakeWitness();
  pb::PoolInfo info = CreateMla(32, 1);
  pb::WritePoolChunk good;
  good.set_pool_id(info.id());
  *good.mutable_slots() = Slots32({1, 2});
  *good.mutable_rows() = RandomBytes(pb::FP8_E4M3FN, {2, 576}, 1);
  pb::WritePoolResponse wr;
  ASSERT_TRUE(Write({good}, &wr).ok());
  const std::string before = ReadAll(info);

  auto variant = [&](auto edit) {
    pb::WritePoolChunk c;
    c.set_pool_id(info.id());
    *c.mutable_slots() = Slots32({3, 4});
    *c.mutable_rows() = RandomBytes(pb::FP8_E4M3FN, {2, 576}, 2);
    edit(&c);
    return c;
  };
  struct Case {
    std::string name;
    pb::WritePoolChunk chunk;
    grpc::StatusCode code;
    std::string substr;
  };
  std::vector<Case> cases = {
      {"slot out of range", variant([](pb::WritePoolChunk* c) { *c->mutable_slots() = Slots32({3, 32}); }),
       grpc::StatusCode::INVALID_ARGUMENT, "slots[1]: slot 32 out of range [0, 32)"},
      {"negative slot", variant([](pb::WritePoolChunk* c) { *c->mutable_slots() = Slots32({-1, 3}); }),
       grpc::StatusCode::INVALID_ARGUMENT, "slots[0]"},
      {"row width",
       variant([](pb::WritePoolChunk* c) { *c->mutable_rows() = RandomBytes(pb::FP8_E4M3FN, {2, 512}, 3); }),
       grpc::StatusCode::INVALID_ARGUMENT, "rows.shape: expected [2,576]"},
      {"row dtype",
       variant([](pb::WritePoolChunk* c) { *c->mutable_rows() = RandomBytes(pb::BF16, {2, 576}, 3); }),
       grpc::StatusCode::INVALID_ARGUMENT, "rows.dtype: expected fp8_e4m3fn"},
      {"row bytes", variant([](pb::WritePoolChunk* c) { c->mutable_rows()->mutable_data()->pop_back(); }),
       grpc::StatusCode::INVALID_ARGUMENT, "rows.data: expected 1152 bytes"},
      {"slot dtype",
       variant([](pb::WritePoolChunk* c) { c->mutable_slots()->set_dtype(pb::FP32); }),
       grpc::StatusCode::INVALID_ARGUMENT, "slots.dtype: expected int32 or int64"},
      {"unknown pool", variant([](pb::WritePoolChunk* c) { c->set_pool_id("pool-nope"); }),
       grpc::StatusCode::NOT_FOUND, "pool_id"},
      {"no pool id", variant([](pb::WritePoolChunk* c) { c->clear_pool_id(); }),
       grpc::StatusCode::INVALID_ARGUMENT, "pool_id"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    grpc::Status s = Write({c.chunk}, &wr);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.substr));
    EXPECT_TRUE(ReadAll(info) == before);
    ExpectWitnessIntact();
  }
}

TEST_F(PoolTest, WriteStreamIsAllOrNothingWithABadMessageAtEveryPosition) {
  MakeWitness();
  pb::PoolInfo info = CreateMla(32, 1);
  const std::string before = ReadAll(info);
  const int64_t used = MemoryUsed(devices_.get());
  constexpr int kMessages = 4;
  auto good = [&](int i) {
    pb::WritePoolChunk c;
    if (i == 0) c.set_pool_id(info.id());
    *c.mutable_slots() = Slots32({2 * i, 2 * i + 1});
    *c.mutable_rows() = RandomBytes(pb::FP8_E4M3FN, {2, 576}, 10 + i);
    return c;
  };
  struct Bad {
    std::string name;
    void (*edit)(pb::WritePoolChunk*);
    std::string substr;
  };
  const std::vector<Bad> bads = {
      {"slot out of range", [](pb::WritePoolChunk* c) { *c->mutable_slots() = Slots32({1, 32}); },
       "slots[1]: slot 32 out of range [0, 32)"},
      {"row bytes", [](pb::WritePoolChunk* c) { c->mutable_rows()->mutable_data()->pop_back(); },
       "rows.data: expected 1152 bytes"},
      {"row dtype", [](pb::WritePoolChunk* c) { c->mutable_rows()->set_dtype(pb::BF16); }, "rows"},
      {"other pool", [](pb::WritePoolChunk* c) { c->set_pool_id("pool-elsewhere"); }, "pool_id"},
  };
  for (const Bad& bad : bads) {
    for (int at = 0; at < kMessages; ++at) {
      SCOPED_TRACE(bad.name + " at message " + std::to_string(at));
      std::vector<pb::WritePoolChunk> msgs;
      for (int i = 0; i < kMessages; ++i) msgs.push_back(good(i));
      bad.edit(&msgs[at]);
      pb::WritePoolResponse wr;
      grpc::Status s = Write(msgs, &wr);
      if (bad.name == "other pool" && at == 0) {
        EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
      } else {
        EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
        EXPECT_THAT(s.error_message(), HasSubstr(bad.substr));
        EXPECT_THAT(s.error_message(),
                    HasSubstr("(message " + std::to_string(at) + " of the write stream; nothing was written)"));
      }
      EXPECT_TRUE(ReadAll(info) == before) << "a failed stream changed the pool";
      grpc::ClientContext ctx;
      pb::PoolStatsRequest sr;
      sr.set_pool_id(info.id());
      pb::PoolInfo stats;
      ASSERT_TRUE(pools_->Stats(&ctx, sr, &stats).ok());
      EXPECT_EQ(stats.rows_written(), 0);
      EXPECT_EQ(MemoryUsed(devices_.get()), used) << "staging not released";
    }
  }
  // The whole good stream applies, every message of it.
  std::vector<pb::WritePoolChunk> msgs;
  for (int i = 0; i < kMessages; ++i) msgs.push_back(good(i));
  pb::WritePoolResponse wr;
  ASSERT_TRUE(Write(msgs, &wr).ok());
  EXPECT_EQ(wr.rows_written(), 2 * kMessages);
  const std::string after = ReadAll(info);
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_TRUE(after.substr(2 * i * 576, 2 * 576) == msgs[i].rows().data()) << i;
  }
  EXPECT_EQ(MemoryUsed(devices_.get()), used);
  ExpectWitnessIntact();
}

// A read names more rows than fit anywhere (2^19 slots of 64 KiB rows: 32
// GiB): they stream in chunks of at most one message, copied from the pool
// as they go, and the client may stop at any point.
TEST_F(PoolTest, ReadOfMillionsOfRowsStreamsInBoundedChunks) {
  MakeWitness();
  pb::CreatePoolRequest req;
  req.set_kind(pb::PER_HEAD_KV);
  req.set_num_slots(4);
  req.set_dtype(pb::BF16);
  req.set_num_heads(64);
  req.set_head_dim(256);
  pb::PoolInfo info;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(pools_->Create(&ctx, req, &info).ok());
  }
  const int64_t row_bytes = 2 * 64 * 256 * 2;
  pb::WritePoolChunk w;
  w.set_pool_id(info.id());
  *w.mutable_slots() = Slots32({0, 1, 2, 3});
  *w.mutable_rows() = RandomBytes(pb::BF16, {4, 2 * 64 * 256}, 7);
  pb::WritePoolResponse wr;
  ASSERT_TRUE(Write({w}, &wr).ok());
  const int64_t used = MemoryUsed(devices_.get());

  constexpr int32_t kSlots = 1 << 19;
  std::vector<int32_t> slots(kSlots);
  for (int32_t i = 0; i < kSlots; ++i) slots[i] = (i * 7 + 3) % 4;
  pb::ReadPoolRequest rq;
  rq.set_pool_id(info.id());
  *rq.mutable_slots() = Slots32(slots);
  grpc::ClientContext ctx;
  auto reader = pools_->Read(&ctx, rq);
  pb::ReadPoolChunk chunk;
  int64_t row = 0;
  for (int c = 0; c < 8; ++c) {
    ASSERT_TRUE(reader->Read(&chunk)) << "chunk " << c;
    EXPECT_EQ(chunk.has_pool(), c == 0);
    const int64_t m = chunk.rows().shape(0);
    EXPECT_LE(static_cast<int64_t>(chunk.rows().data().size()), 4 << 20) << "one message at most";
    ASSERT_EQ(static_cast<int64_t>(chunk.rows().data().size()), m * row_bytes);
    for (int64_t i = 0; i < m; ++i, ++row) {
      const int64_t slot = slots[row];
      ASSERT_TRUE(chunk.rows().data().compare(i * row_bytes, row_bytes, w.rows().data(), slot * row_bytes,
                                              row_bytes) == 0)
          << "row " << row;
    }
  }
  ctx.TryCancel();
  while (reader->Read(&chunk)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(MemoryUsed(devices_.get()), used);
  ExpectWitnessIntact();
}

TEST_F(PoolTest, BadCreatesAndReads) {
  MakeWitness();
  struct Case {
    std::string name;
    pb::CreatePoolRequest req;
    std::string substr;
  };
  auto mla = [](auto edit) {
    pb::CreatePoolRequest r;
    r.set_kind(pb::MLA_FUSED);
    r.set_num_slots(16);
    r.set_dtype(pb::FP8_E4M3FN);
    edit(&r);
    return r;
  };
  using R = pb::CreatePoolRequest;
  std::vector<Case> cases = {
      {"kind", mla([](R* r) { r->set_kind(pb::POOL_KIND_UNSPECIFIED); }), "kind"},
      {"slots", mla([](R* r) { r->set_num_slots(0); }), "num_slots: expected > 0"},
      {"page multiple", mla([](R* r) { r->set_page_size(5); }), "num_slots: expected a multiple of page_size 5"},
      {"negative page", mla([](R* r) { r->set_page_size(-1); }), "page_size"},
      {"mla dtype", mla([](R* r) { r->set_dtype(pb::BF16); }), "dtype: MLA_FUSED"},
      {"unknown dtype", mla([](R* r) { r->set_dtype(static_cast<pb::DType>(99)); }), "dtype"},
      {"kv_scale", mla([](R* r) { r->set_kv_scale(-1); }), "kv_scale"},
      {"per-head heads", mla([](R* r) { r->set_kind(pb::PER_HEAD_KV); r->set_dtype(pb::BF16); r->set_head_dim(128); }),
       "num_heads"},
      {"device", mla([](R* r) { r->set_device(7); }), "device"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    grpc::ClientContext ctx;
    pb::PoolInfo info;
    grpc::Status s = pools_->Create(&ctx, c.req, &info);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr(c.substr));
    ExpectWitnessIntact();
  }
  // A per-head pool.
  {
    grpc::ClientContext ctx;
    pb::PoolInfo info;
    pb::CreatePoolRequest r;
    r.set_kind(pb::PER_HEAD_KV);
    r.set_num_slots(8);
    r.set_dtype(pb::BF16);
    r.set_num_heads(2);
    r.set_head_dim(64);
    ASSERT_TRUE(pools_->Create(&ctx, r, &info).ok());
    EXPECT_EQ(info.row_elements(), 2 * 2 * 64);
    EXPECT_EQ(info.size_bytes(), 8 * 256 * 2);
  }
  pb::PoolInfo info = CreateMla(16, 1);
  std::string bytes;
  pb::ReadPoolRequest rq;
  rq.set_pool_id(info.id());
  rq.set_start(10);
  rq.set_count(7);
  grpc::Status s = Read(rq, &bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("count"));
  rq.set_pool_id("pool-0123");
  EXPECT_EQ(Read(rq, &bytes).error_code(), grpc::StatusCode::NOT_FOUND);
  ExpectWitnessIntact();
}

// ------------------------------------------------------ health, reflection

// Raw calls with hand-encoded messages: the health and reflection protos are
// not installed as headers here.
TEST_F(ServerTest, HealthAnswersServing) {
  for (std::string service : {"", "kernelserve.v1.KernelService"}) {
    SCOPED_TRACE(service);
    std::string bytes;
    const grpc::Status s = HealthCheck(channel_.get(), service, &bytes);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
  }
}

TEST_F(ServerTest, ReflectionListsServices) {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel_.get(),
          grpc::internal::RpcMethod("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                    grpc::internal::RpcMethod::BIDI_STREAMING),
          &ctx));
  const std::string req("\x3a\x01*", 3);  // list_services = "*" (field 7)
  grpc::Slice slice(req);
  grpc::ByteBuffer request(&slice, 1), response;
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  ASSERT_TRUE(stream->Read(&response));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_THAT(bytes, HasSubstr("kernelserve.v1.KernelService"));
  EXPECT_THAT(bytes, HasSubstr("kernelserve.v1.BufferService"));
  EXPECT_THAT(bytes, HasSubstr("grpc.health.v1.Health"));
  while (stream->Read(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace kernelserve
