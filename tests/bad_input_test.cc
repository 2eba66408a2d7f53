// Walks every RPC of every service with the project's bad-input corpus
// (tests/bad_input_corpus.h) over raw gRPC against a real server: each case
// must get its code and a message naming the field, never UNKNOWN or
// INTERNAL, a message short enough for any client's metadata limit, and must
// change nothing else: the live buffer and pools keep their bytes, memory
// accounting returns to where it was, no buffer, pool or job is left behind,
// and the server keeps serving.
#include <unistd.h>

#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kernelserve/v1/bench.pb.h"
#include "kernelserve/v1/device.pb.h"
#include "kernelserve/v1/pool.pb.h"
#include "kernelserve/v1/tensor.pb.h"
#include "server/security/tokens.h"
#include "server/server.h"
#include "server/status_mapping.h"
#include "server/test_util.h"
#include "tests/bad_input_corpus.h"

namespace kernelserve {
namespace {

namespace pb = ::kernelserve::v1;
using corpus::Auth;
using corpus::BadInput;
using corpus::Kind;
using testing::RawCall;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tokens = absl::StrCat(::testing::TempDir(), "/corpus_tokens_", getpid());
    std::ofstream(tokens) << security::TokenFileLine("corpus", corpus::kTenantToken, false) << "\n"
                          << security::TokenFileLine("corpus-admin", corpus::kAdminToken, true) << "\n";
    ServerOptions options;
    options.cpu_threads = 2;
    options.max_message_mb = corpus::kMaxMessageMb;
    options.memory_limit_mb = corpus::kMemoryLimitMb;
    options.security.tokens_file = tokens;
    options.bench.max_job_bytes = 64 << 20;
    options.bench.max_gate_flops = 1e7;
    options.bench.test_variants = true;
    server_ = testing::StartServer(options);
    ASSERT_NE(server_, nullptr);
    channel_ = testing::Connect(server_->port());
    MakeLiveObjects();
  }

  RawCall Call(const std::string& method, Auth auth = Auth::kTenant) const {
    RawCall call;
    call.method = method;
    switch (auth) {
      case Auth::kTenant:
        call.metadata = {{"authorization", absl::StrCat("Bearer ", corpus::kTenantToken)}};
        break;
      case Auth::kAdmin:
        call.metadata = {{"authorization", absl::StrCat("Bearer ", corpus::kAdminToken)}};
        break;
      case Auth::kMalformed:
        call.metadata = {{"authorization", "Basic dXNlcjpwYXNz"}};
        break;
      case Auth::kNone:
        break;
    }
    return call;
  }

  grpc::Status Send(const BadInput& in) {
    const RawCall call = Call(in.method, in.auth);
    switch (in.kind) {
      case Kind::kUnary:
        return testing::RawUnary(channel_.get(), call, in.messages.empty() ? "" : in.messages[0]);
      case Kind::kClientStream:
        return testing::RawClientStream(channel_.get(), call, in.messages);
      case Kind::kServerStream:
        return testing::RawServerStream(channel_.get(), call, in.messages.empty() ? "" : in.messages[0],
                                        in.read_then_cancel);
    }
    return grpc::Status(grpc::StatusCode::UNKNOWN, "unreachable");
  }

  template <typename Resp>
  Resp Unary(const std::string& method, const google::protobuf::Message& req, Auth auth = Auth::kTenant) {
    std::string bytes;
    grpc::Status s = testing::RawUnary(channel_.get(), Call(method, auth), req.SerializeAsString(), &bytes);
    EXPECT_TRUE(s.ok()) << method << ": " << s.error_message();
    Resp resp;
    resp.ParseFromString(bytes);
    return resp;
  }

  // The concatenated payloads of a server stream's messages.
  template <typename Chunk>
  std::string Stream(const std::string& method, const google::protobuf::Message& req,
                     const std::string& (*payload)(const Chunk&)) {
    std::vector<std::string> chunks;
    grpc::Status s = testing::RawServerStream(channel_.get(), Call(method), req.SerializeAsString(), 0, &chunks);
    EXPECT_TRUE(s.ok()) << method << ": " << s.error_message();
    std::string bytes;
    for (const std::string& c : chunks) {
      Chunk chunk;
      chunk.ParseFromString(c);
      bytes += payload(chunk);
    }
    return bytes;
  }
  std::string ReadPool(const std::string& id, int64_t slots) {
    pb::ReadPoolRequest req;
    req.set_pool_id(id);
    req.set_count(slots);
    return Stream<pb::ReadPoolChunk>("/kernelserve.v1.PoolService/Read", req,
                                     [](const pb::ReadPoolChunk& c) -> const std::string& { return c.rows().data(); });
  }
  std::string Download(const std::string& id) {
    pb::DownloadRequest req;
    req.set_buffer_id(id);
    return Stream<pb::DownloadChunk>("/kernelserve.v1.BufferService/Download", req,
                                     [](const pb::DownloadChunk& c) -> const std::string& { return c.data(); });
  }

  std::string CreatePool(const pb::CreatePoolRequest& req, const std::string& rows, int64_t n) {
    const auto info = Unary<pb::PoolInfo>("/kernelserve.v1.PoolService/Create", req);
    pb::WritePoolChunk w;
    w.set_pool_id(info.id());
    w.mutable_slots()->set_dtype(pb::INT64);
    w.mutable_slots()->add_shape(n);
    for (int64_t i = 0; i < n; ++i) w.mutable_slots()->mutable_data()->append(reinterpret_cast<const char*>(&i), 8);
    w.mutable_rows()->set_dtype(req.dtype());
    w.mutable_rows()->add_shape(n);
    w.mutable_rows()->add_shape(info.row_elements());
    w.mutable_rows()->set_data(rows);
    grpc::Status s = testing::RawClientStream(channel_.get(), Call("/kernelserve.v1.PoolService/Write"),
                                              {w.SerializeAsString()});
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info.id();
  }

  void MakeLiveObjects() {
    pb::UploadChunk up;
    up.mutable_header()->set_dtype(pb::BF16);
    for (int64_t d : {1, 1, 4, 128}) up.mutable_header()->add_shape(d);
    for (int i = 0; i < 512; ++i) up.mutable_data()->append(1, static_cast<char>(i)).append(1, '\x3c');
    buffer_bytes_ = up.data();
    std::string bytes;
    ASSERT_TRUE(testing::RawClientStream(channel_.get(), Call("/kernelserve.v1.BufferService/Upload"),
                                         {up.SerializeAsString()}, &bytes)
                    .ok());
    pb::BufferInfo info;
    info.ParseFromString(bytes);
    ids_.buffer = info.id();

    pb::CreatePoolRequest mla;
    mla.set_kind(pb::MLA_FUSED);
    mla.set_num_slots(8);
    mla.set_dtype(pb::FP8_E4M3FN);
    std::string rows(8 * 576, '\0');
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<char>(0x30 + i % 9);
    ids_.mla_pool = CreatePool(mla, rows, 8);
    pb::CreatePoolRequest kv;
    kv.set_kind(pb::PER_HEAD_KV);
    kv.set_num_slots(4);
    kv.set_dtype(pb::BF16);
    kv.set_num_heads(64);
    kv.set_head_dim(256);
    std::string kv_rows(4 * 2 * 64 * 256 * 2, '\0');
    for (size_t i = 0; i < kv_rows.size(); i += 2) kv_rows[i + 1] = static_cast<char>(0x3c + i % 3);
    ids_.kv_pool = CreatePool(kv, kv_rows, 4);

    pb::SubmitBenchRequest submit;
    pb::BenchJobSpec* spec = submit.mutable_spec();
    spec->set_op(pb::OP_ATTENTION);
    spec->mutable_attention()->set_batch(1);
    spec->mutable_attention()->set_heads_q(1);
    spec->mutable_attention()->set_seq_q(8);
    spec->mutable_attention()->set_head_dim(64);
    spec->mutable_method()->set_warmup(1);
    spec->mutable_method()->set_iters(1);
    ids_.job = Unary<pb::BenchJob>("/kernelserve.v1.BenchService/Submit", submit).id();
    pb::WatchBenchRequest watch;
    watch.set_job_id(ids_.job);
    ASSERT_TRUE(testing::RawServerStream(channel_.get(), Call("/kernelserve.v1.BenchService/Watch"),
                                         watch.SerializeAsString())
                    .ok());
    Snapshot(&before_);
    ASSERT_FALSE(before_.mla_rows.empty());
  }

  // What no bad call may change.
  struct State {
    std::string buffer, mla_rows, kv_rows;
    std::set<std::string> buffers, pools, jobs;
    int64_t memory_used = -1;
    int64_t rows_written = -1;
    bool operator==(const State& o) const {
      return buffer == o.buffer && mla_rows == o.mla_rows && kv_rows == o.kv_rows && buffers == o.buffers &&
             pools == o.pools && jobs == o.jobs && memory_used == o.memory_used && rows_written == o.rows_written;
    }
  };

  void Snapshot(State* s) {
    s->buffer = Download(ids_.buffer);
    s->mla_rows = ReadPool(ids_.mla_pool, 8);
    s->kv_rows = ReadPool(ids_.kv_pool, 4);
    const auto buffers = Unary<pb::ListBuffersResponse>("/kernelserve.v1.BufferService/List",
                                                        pb::ListBuffersRequest());
    s->buffers.clear();
    for (const auto& b : buffers.buffers()) s->buffers.insert(b.id());
    const auto pools = Unary<pb::ListPoolsResponse>("/kernelserve.v1.PoolService/List", pb::ListPoolsRequest());
    s->pools.clear();
    s->rows_written = 0;
    for (const auto& p : pools.pools()) {
      s->pools.insert(p.id());
      s->rows_written += p.rows_written();
    }
    const auto jobs = Unary<pb::ListBenchResponse>("/kernelserve.v1.BenchService/List", pb::ListBenchRequest(),
                                                   Auth::kAdmin);
    s->jobs.clear();
    for (const auto& j : jobs.jobs()) s->jobs.insert(absl::StrCat(j.id(), " ", pb::BenchJobState_Name(j.state())));
    const auto devices = Unary<pb::ListDevicesResponse>("/kernelserve.v1.DeviceService/List",
                                                        pb::ListDevicesRequest());
    s->memory_used = devices.devices_size() > 0 ? devices.devices(0).memory_used_bytes() : -1;
  }

  std::unique_ptr<KernelServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  corpus::CorpusIds ids_;
  std::string buffer_bytes_;
  State before_;
};

TEST_F(BadInputTest, EveryCaseGetsItsStatusAndChangesNothing) {
  const std::vector<BadInput> cases = corpus::BadInputs(ids_);
  std::set<std::string> methods;
  for (const BadInput& in : cases) {
    SCOPED_TRACE(in.name);
    methods.insert(in.method);
    const grpc::Status s = Send(in);
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNKNOWN) << s.error_message();
    EXPECT_NE(s.error_code(), grpc::StatusCode::INTERNAL) << s.error_message();
    EXPECT_EQ(s.error_code(), in.code) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), in.substr))
        << "\"" << s.error_message().substr(0, 300) << "\" lacks \"" << in.substr << "\"";
    EXPECT_LE(s.error_message().size(), kMaxStatusMessageBytes + 64);
    State after;
    Snapshot(&after);
    // A call the client cancelled returns to the client before the server's
    // handler has unwound and released its staging charge: give it a moment.
    for (int i = 0; in.read_then_cancel > 0 && !(after == before_) && i < 500; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
      Snapshot(&after);
    }
    EXPECT_TRUE(after == before_) << "memory " << before_.memory_used << " -> " << after.memory_used
                                  << ", rows written " << before_.rows_written << " -> " << after.rows_written
                                  << ", buffers " << before_.buffers.size() << " -> " << after.buffers.size()
                                  << ", pools " << before_.pools.size() << " -> " << after.pools.size()
                                  << ", jobs " << before_.jobs.size() << " -> " << after.jobs.size();
    if (!(after == before_)) before_ = after;  // one failure per change
  }
  const std::vector<std::string> all = corpus::AllMethods();
  EXPECT_EQ(methods, std::set<std::string>(all.begin(), all.end())) << "every RPC is walked";
  EXPECT_GE(cases.size(), 150u);
  EXPECT_TRUE(testing::HealthCheck(channel_.get()).ok());
  EXPECT_EQ(before_.buffer, buffer_bytes_);
}

}  // namespace
}  // namespace kernelserve
