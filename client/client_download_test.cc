// The client library against a server that streams a download wrongly (a
// truncated stream, a chunk past the end, no buffer info): each must be a
// DATA_LOSS naming what was wrong, never a tensor with a zero-filled gap. The
// real server never sends these, so a deliberately broken BufferService on a
// real port stands in for a faulty or hostile one.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "client/client.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "kernelserve/v1/tensor.grpc.pb.h"

namespace kernelserve {
namespace {

namespace v1 = ::kernelserve::v1;

// Serves buffer "short" (16 bytes announced, 8 sent), "past" (a chunk that
// runs past the end), "negative" (a chunk at offset -8), "gap" (8 bytes at
// offset 8, none before), "noinfo" (data without the info) and "ok" (16 bytes).
class BrokenBuffers final : public v1::BufferService::Service {
 public:
  grpc::Status Download(grpc::ServerContext*, const v1::DownloadRequest* req,
                        grpc::ServerWriter<v1::DownloadChunk>* writer) override {
    v1::DownloadChunk c;
    auto* info = c.mutable_info();
    info->set_id(req->buffer_id());
    info->set_dtype(v1::UINT8);
    info->add_shape(16);
    const std::string& id = req->buffer_id();
    if (id == "noinfo") c.clear_info();
    c.set_offset(id == "past" ? 12 : id == "negative" ? -8 : id == "gap" ? 8 : 0);
    c.set_data(std::string(id == "short" ? 8 : id == "ok" ? 16 : 8, 'x'));
    writer->Write(c);
    return grpc::Status::OK;
  }

  // As a server that predates tensor.proto's SharedMemoryRegion: the header's
  // shm field unknown to it, the bytes expected in the stream.
  grpc::Status Upload(grpc::ServerContext*, grpc::ServerReader<v1::UploadChunk>* reader,
                      v1::BufferInfo* info) override {
    v1::UploadChunk c;
    int64_t expected = -1, got = 0;
    while (reader->Read(&c)) {
      if (c.has_header()) {
        expected = 1;
        for (int64_t d : c.header().shape()) expected *= d;
        *info->mutable_shape() = c.header().shape();
      }
      got += static_cast<int64_t>(c.data().size());
    }
    if (got != expected) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "data: expected " + std::to_string(expected) + " bytes, got " + std::to_string(got));
    }
    info->set_id("old");
    info->set_size_bytes(got);
    return grpc::Status::OK;
  }
};

class ClientDownloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ClientOptions o;
    o.target = "127.0.0.1:" + std::to_string(port);
    o.max_retries = 0;
    auto c = Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  void TearDown() override {
    client_.reset();
    if (server_) server_->Shutdown();
  }

  BrokenBuffers service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientDownloadTest, TruncatedStreamIsDataLoss) {
  auto r = client_->DownloadBuffer("short");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "received 8 of 16 bytes")) << r.status();
}

TEST_F(ClientDownloadTest, ChunkPastTheEndIsDataLoss) {
  auto r = client_->DownloadBuffer("past");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "overruns 16")) << r.status();
}

TEST_F(ClientDownloadTest, NegativeOffsetIsDataLoss) {
  auto r = client_->DownloadBuffer("negative");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "chunk at offset -8 of 8 bytes overruns 16")) << r.status();
}

TEST_F(ClientDownloadTest, ChunkLeavingAGapIsDataLoss) {
  auto r = client_->DownloadBuffer("gap");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "received 8 of 16 bytes")) << r.status();
}

TEST_F(ClientDownloadTest, MissingInfoIsDataLoss) {
  auto r = client_->DownloadBuffer("noinfo");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "lacks the buffer info")) << r.status();
}

TEST_F(ClientDownloadTest, WholeStreamIsTheTensor) {
  auto r = client_->DownloadBuffer("ok");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_bytes(), 16);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r->bytes()), 16), std::string(16, 'x'));
}

// A client on the server's host first offers shared memory; a server that
// ignores the field gets the bytes over the stream, and the client stops
// offering it.
TEST_F(ClientDownloadTest, ServerWithoutSharedMemoryGetsTheStream) {
  ClientOptions o = client_->options();
  o.shared_memory_transfer_min_bytes = 1;
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->shared_memory_transfers());
  HostTensor t(DType::kUint8, {3 << 20});
  for (int64_t i = 0; i < t.num_bytes(); ++i) t.bytes()[i] = static_cast<uint8_t>(i * 13);
  auto info = (*c)->UploadBuffer(t);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size_bytes(), 3 << 20);
  EXPECT_FALSE((*c)->shared_memory_transfers());

  auto d = Client::Connect(o);
  ASSERT_TRUE(d.ok()) << d.status();
  auto r = (*d)->DownloadBuffer("ok");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r->bytes()), 16), std::string(16, 'x'));
  EXPECT_FALSE((*d)->shared_memory_transfers());
}

}  // namespace
}  // namespace kernelserve
