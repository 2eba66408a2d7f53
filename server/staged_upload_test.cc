// Uploads to and downloads from a device whose memory is not host memory (the
// GPU backends' case) through the real server on loopback: an upload's
// received bytes are gathered into staging blocks, one asynchronous copy per
// block; a download's batches land in staging blocks that the sent slices own;
// a small kernel call's inline inputs share one staging block and one
// device block, one asynchronous copy ahead of the op in stream order, and
// its inline output comes back through the staging block. The backend here is
// the cpu backend behind a wrapper that says its memory is not host memory and
// defers each asynchronous copy to the next Synchronize, as a DMA engine
// reads its source later: a block refilled before its copy ended shows up as
// wrong bytes in the buffer.
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "common/shm_region.h"
#include "gtest/gtest.h"
#include "kernels/backends.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/server.h"
#include "server/test_util.h"

namespace kernelserve {
namespace {

namespace pb = ::kernelserve::v1;
using ::kernelserve::testing::Connect;
using ::kernelserve::testing::Download;
using ::kernelserve::testing::RandomBf16;
using ::kernelserve::testing::RandomBytes;
using ::kernelserve::testing::Upload;
using ::testing::HasSubstr;

class DeferredCopyBackend : public ::kernelserve::testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

  struct Counts {
    int sync_copies = 0;   // CopyToDevice
    int async_copies = 0;  // CopyToDeviceAsync
    int async_host_copies = 0;  // CopyToHostAsync
    int host_copies = 0;        // CopyToHost
    int staging_blocks = 0;
  };
  Counts counts() {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }
  void ResetCounts() {
    std::lock_guard<std::mutex> lock(mu_);
    counts_ = Counts();
  }

  std::string Name() const override { return "deferred"; }
  BackendCapabilities Capabilities() const override {
    BackendCapabilities c = ForwardingBackend::Capabilities();
    c.device_memory_is_host = false;
    return c;
  }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int device, size_t bytes) override {
    KS_ASSIGN_OR_RETURN(auto memory, inner().Allocate(device, bytes));
    return std::unique_ptr<DeviceMemory>(new Ordered(std::move(memory), this));
  }
  // As the GPU backend's pinned cache: a released block's memory stays, for
  // reuse after the queued copies ran (a copy queued before an upload failed
  // may still read it). Poisoned, so bytes never gathered are seen.
  absl::StatusOr<std::unique_ptr<StagingMemory>> AllocateStaging(int device, size_t bytes) override {
    std::unique_ptr<StagingMemory> block;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++counts_.staging_blocks;
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if ((*it)->size() == bytes) {
          block = std::move(*it);
          free_.erase(it);
          break;
        }
      }
    }
    if (block != nullptr) {
      KS_RETURN_IF_ERROR(Synchronize(device));
    } else {
      KS_ASSIGN_OR_RETURN(block, Backend::AllocateStaging(device, bytes));
    }
    std::memset(block->data(), 0xA5, bytes);
    return std::unique_ptr<StagingMemory>(new Cached(std::move(block), this));
  }
  absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) override {
    KS_RETURN_IF_ERROR(Synchronize(device));
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_.sync_copies;
    return inner().CopyToDevice(device, dst, src, bytes);
  }
  absl::Status CopyToDeviceAsync(int device, void* dst, const void* src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_.async_copies;
    queued_.push_back({dst, src, bytes, false});
    return absl::OkStatus();
  }
  absl::Status CopyToHostAsync(int device, void* dst, const void* src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_.async_host_copies;
    queued_.push_back({dst, src, bytes, true});
    return absl::OkStatus();
  }
  absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) override {
    KS_RETURN_IF_ERROR(Synchronize(device));
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++counts_.host_copies;
    }
    return inner().CopyToHost(device, dst, src, bytes);
  }
  absl::Status CopyOnDevice(int device, void* dst, const void* src, size_t bytes) override {
    KS_RETURN_IF_ERROR(Synchronize(device));
    return inner().CopyOnDevice(device, dst, src, bytes);
  }
  absl::Status Synchronize(int device) override {
    KS_RETURN_IF_ERROR(RunQueued(device));
    return inner().Synchronize(device);
  }
  // An op runs after the copies queued before it, as on a stream.
  absl::Status Attention(int device, const AttentionParams& p, const TensorView& q, const TensorView& k,
                         const TensorView& v, TensorView& out) override {
    KS_RETURN_IF_ERROR(RunQueued(device));
    return inner().Attention(device, p, q, k, v, out);
  }

 private:
  absl::Status RunQueued(int device) {
    std::vector<Copy> run;
    {
      std::lock_guard<std::mutex> lock(mu_);
      run.swap(queued_);
    }
    for (const Copy& c : run) {
      KS_RETURN_IF_ERROR(c.to_host ? inner().CopyToHost(device, c.dst, c.src, c.bytes)
                                   : inner().CopyToDevice(device, c.dst, c.src, c.bytes));
    }
    return absl::OkStatus();
  }

  class Cached : public StagingMemory {
   public:
    Cached(std::unique_ptr<StagingMemory> m, DeferredCopyBackend* backend) : m_(std::move(m)), backend_(backend) {}
    ~Cached() override {
      std::lock_guard<std::mutex> lock(backend_->mu_);
      backend_->free_.push_back(std::move(m_));
    }
    void* data() const override { return m_->data(); }
    size_t size() const override { return m_->size(); }

   private:
    std::unique_ptr<StagingMemory> m_;
    DeferredCopyBackend* backend_;
  };
  // Freed in stream order, as the GPU backend's block cache reuses memory
  // only on the device's one stream: queued copies into it land first.
  class Ordered : public DeviceMemory {
   public:
    Ordered(std::unique_ptr<DeviceMemory> m, DeferredCopyBackend* backend) : m_(std::move(m)), backend_(backend) {}
    ~Ordered() override { (void)backend_->Synchronize(m_->device()); }
    void* data() const override { return m_->data(); }
    size_t size() const override { return m_->size(); }
    int device() const override { return m_->device(); }

   private:
    std::unique_ptr<DeviceMemory> m_;
    DeferredCopyBackend* backend_;
  };
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
    bool to_host;
  };

  std::mutex mu_;
  Counts counts_;
  std::vector<Copy> queued_;
  std::vector<std::unique_ptr<StagingMemory>> free_;
};

class StagedUploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto inner = CreateBackend("cpu", BackendOptions());
    ASSERT_TRUE(inner.ok()) << inner.status();
    auto backend = std::make_unique<DeferredCopyBackend>(std::move(*inner));
    backend_ = backend.get();
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.max_message_mb = 8;
    auto server = KernelServer::Start(options, std::move(backend));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto channel = Connect(server_->port());
    buffers_ = pb::BufferService::NewStub(channel);
    kernels_ = pb::KernelService::NewStub(channel);
  }

  int BufferCount() {
    grpc::ClientContext ctx;
    pb::ListBuffersResponse list;
    EXPECT_TRUE(buffers_->List(&ctx, pb::ListBuffersRequest(), &list).ok());
    return list.buffers_size();
  }

  DeferredCopyBackend* backend_ = nullptr;
  std::unique_ptr<KernelServer> server_;
  std::unique_ptr<pb::BufferService::Stub> buffers_;
  std::unique_ptr<pb::KernelService::Stub> kernels_;
};

// Sizes around the 1 MiB heap-gather limit and the 8 MiB block, through
// messages that do and do not divide a block; fresh random bytes each time.
TEST_F(StagedUploadTest, BytesArriveIntactWithOneCopyPerBlock) {
  constexpr int64_t kMiB = 1 << 20, kBlock = 8 * kMiB;
  struct Case {
    int64_t bytes;
    int64_t chunk;
  };
  const Case cases[] = {{3, 1024},          {kMiB, 64 * 1024},        {kMiB + 1, kMiB},
                        {kBlock, 3 * kMiB}, {kBlock + 7, 4 * kMiB - 1}, {2 * kBlock + kMiB + 5, 1000003}};
  uint64_t seed = ::testing::UnitTest::GetInstance()->random_seed();
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.bytes << " bytes in messages of " << c.chunk);
    backend_->ResetCounts();
    const pb::Tensor t = RandomBytes(pb::UINT8, {c.bytes}, ++seed);
    pb::BufferInfo info;
    const grpc::Status up = Upload(buffers_.get(), t, c.chunk, &info);
    ASSERT_TRUE(up.ok()) << up.error_message();
    const DeferredCopyBackend::Counts n = backend_->counts();
    EXPECT_EQ(n.sync_copies, 0);
    EXPECT_EQ(n.async_copies, (c.bytes + kBlock - 1) / kBlock);
    EXPECT_EQ(n.staging_blocks, c.bytes <= kMiB ? 0 : c.bytes <= kBlock ? 1 : 2);
    std::string bytes;
    ASSERT_TRUE(Download(buffers_.get(), info.id(), 0, &bytes).ok());
    ASSERT_EQ(bytes.size(), t.data().size());
    EXPECT_TRUE(bytes == t.data()) << "first difference at byte "
                                   << std::mismatch(bytes.begin(), bytes.end(), t.data().begin()).first -
                                          bytes.begin();
  }
}

// Through the caller's shared memory (tensor.proto's SharedMemoryRegion): an
// upload's region is read into the staging blocks, one asynchronous copy per
// block; a download's batches go through staging blocks into the region; the
// bytes round-trip with the stream's, at an offset that is no page multiple.
TEST_F(StagedUploadTest, SharedMemoryGoesThroughTheStagingBlocks) {
  constexpr int64_t kMiB = 1 << 20, kBlock = 8 * kMiB, kOffset = 4097;
  uint64_t seed = ::testing::UnitTest::GetInstance()->random_seed();
  for (int64_t bytes : {int64_t{3}, kMiB + 1, kBlock, 2 * kBlock + kMiB + 5, 40 * kMiB + 3}) {
    SCOPED_TRACE(::testing::Message() << bytes << " bytes");
    backend_->ResetCounts();
    const pb::Tensor t = RandomBytes(pb::UINT8, {bytes}, ++seed);
    auto in = ShmRegion::Create(kOffset + bytes);
    ASSERT_TRUE(in.ok()) << in.status();
    std::memcpy(in->data() + kOffset, t.data().data(), t.data().size());
    pb::UploadChunk header;
    header.mutable_header()->set_dtype(pb::UINT8);
    header.mutable_header()->add_shape(bytes);
    header.mutable_header()->mutable_shm()->set_shm_name(in->name());
    header.mutable_header()->mutable_shm()->set_offset(kOffset);
    pb::BufferInfo info;
    {
      grpc::ClientContext ctx;
      auto writer = buffers_->Upload(&ctx, &info);
      ASSERT_TRUE(writer->Write(header));
      writer->WritesDone();
      const grpc::Status up = writer->Finish();
      ASSERT_TRUE(up.ok()) << up.error_message();
    }
    const DeferredCopyBackend::Counts n = backend_->counts();
    EXPECT_EQ(n.sync_copies, 0);
    EXPECT_EQ(n.async_copies, (bytes + kBlock - 1) / kBlock);
    std::string streamed;
    ASSERT_TRUE(Download(buffers_.get(), info.id(), 0, &streamed).ok());
    EXPECT_TRUE(streamed == t.data());

    auto out = ShmRegion::Create(kOffset + bytes);
    ASSERT_TRUE(out.ok()) << out.status();
    pb::DownloadRequest req;
    req.set_buffer_id(info.id());
    req.mutable_shm()->set_shm_name(out->name());
    req.mutable_shm()->set_offset(kOffset);
    grpc::ClientContext ctx;
    auto reader = buffers_->Download(&ctx, req);
    pb::DownloadChunk chunk;
    int messages = 0;
    while (reader->Read(&chunk)) {
      ++messages;
      EXPECT_TRUE(chunk.data().empty());
      EXPECT_EQ(chunk.info().size_bytes(), bytes);
    }
    const grpc::Status down = reader->Finish();
    ASSERT_TRUE(down.ok()) << down.error_message();
    EXPECT_EQ(messages, 1);
    EXPECT_EQ(std::memcmp(out->data() + kOffset, t.data().data(), t.data().size()), 0);
  }
}

// A stream that goes wrong after blocks were sent (too many bytes, or the
// header again) is refused whole; the next upload is intact.
TEST_F(StagedUploadTest, BadStreamAfterBlocksWereSentChangesNothing) {
  const int64_t total = (8 << 20) * 2 + 100;
  const pb::Tensor t = RandomBytes(pb::UINT8, {total}, 11);
  for (int bad = 0; bad < 2; ++bad) {
    SCOPED_TRACE(bad == 0 ? "too many bytes" : "a second header");
    grpc::ClientContext ctx;
    pb::BufferInfo info;
    auto writer = buffers_->Upload(&ctx, &info);
    pb::UploadChunk first;
    *first.mutable_header()->mutable_shape() = t.shape();
    first.mutable_header()->set_dtype(t.dtype());
    ASSERT_TRUE(writer->Write(first));
    constexpr int64_t kChunk = 3 << 20;
    for (int64_t off = 0; off < total; off += kChunk) {
      pb::UploadChunk c;
      c.set_data(t.data().substr(static_cast<size_t>(off), static_cast<size_t>(kChunk)));
      if (!writer->Write(c)) break;
    }
    pb::UploadChunk last;
    if (bad == 0) {
      last.set_data("x");
    } else {
      *last.mutable_header() = first.header();
    }
    writer->Write(last);
    writer->WritesDone();
    const grpc::Status st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr(bad == 0 ? "data: expected" : "header: only the first message"));
    EXPECT_EQ(BufferCount(), 0);
  }
  pb::BufferInfo info;
  ASSERT_TRUE(Upload(buffers_.get(), t, 1 << 20, &info).ok());
  std::string bytes;
  ASSERT_TRUE(Download(buffers_.get(), info.id(), 0, &bytes).ok());
  EXPECT_TRUE(bytes == t.data());
}

// Too few bytes: refused, nothing listed.
TEST_F(StagedUploadTest, ShortStreamIsRefused) {
  const pb::Tensor t = RandomBytes(pb::UINT8, {(8 << 20) + 3}, 12);
  pb::Tensor short_t = t;
  short_t.mutable_data()->resize(t.data().size() - 1);
  pb::BufferInfo info;
  const grpc::Status st = Upload(buffers_.get(), short_t, 1 << 20, &info);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("data:"));
  EXPECT_EQ(BufferCount(), 0);
}

// A small call's inline q, k and v: gathered into one staging block and
// copied asynchronously (no synchronous copy), and the op sees the bytes sent
// (the server's fp64 oracle, on the request's own bytes, agrees with the
// output), and the output comes back through the block's end, queued behind
// the op (read before the queued copy ran, it would be the poison). The
// second call reuses the block, poisoned on reuse.
TEST_F(StagedUploadTest, SmallCallInlineInputsShareOneStagingBlock) {
  uint64_t seed = ::testing::UnitTest::GetInstance()->random_seed();
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE(call);
    backend_->ResetCounts();
    pb::AttentionRequest req;
    for (pb::TensorRef* ref : {req.mutable_q(), req.mutable_k(), req.mutable_v()}) {
      *ref->mutable_tensor() = RandomBf16({1, 2, 40 + call, 64}, ++seed);
    }
    req.set_causal(call == 1);
    req.set_report_error(true);
    grpc::ClientContext ctx;
    pb::AttentionResponse resp;
    const grpc::Status st = kernels_->Attention(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    const DeferredCopyBackend::Counts n = backend_->counts();
    EXPECT_EQ(n.sync_copies, 0);
    EXPECT_EQ(n.async_copies, 1);  // q, k and v in one span
    EXPECT_EQ(n.async_host_copies, 1);
    EXPECT_EQ(n.host_copies, 0);
    EXPECT_EQ(n.staging_blocks, 1);
    EXPECT_EQ(resp.error().nonfinite(), 0);
    EXPECT_LT(resp.error().rel_rms(), 5e-3);
  }
}

}  // namespace
}  // namespace kernelserve
