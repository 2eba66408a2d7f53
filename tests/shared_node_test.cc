// Shared-node security end to end (issue 6) against a real server on
// loopback: missing, wrong and revoked tokens; every resource kind touched by
// another tenant answers NOT_FOUND exactly as for an id that never existed;
// per-tenant limits answer RESOURCE_EXHAUSTED naming the limit; the listen
// rule; TLS + mTLS + tokens on the real server; and the metrics endpoint.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "gtest/gtest.h"
#include "kernelserve/v1/bench.grpc.pb.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/pool.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "client/client.h"
#include "server/security/test_certs.h"
#include "server/security/tls.h"
#include "server/security/tokens.h"
#include "server/server.h"
#include "server/test_util.h"
#include "tests/test_util.h"

namespace kernelserve {
namespace {

namespace pb = ::kernelserve::v1;
using security::TokenFileLine;
using testing::HealthCheck;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/", name, "_", getpid());
}

// A token file with alice, bob, ops (admin) and a revoked mallory.
std::string WriteTokens() {
  const std::string path = TempPath("tokens");
  std::ofstream(path) << "# test tokens\n"
                      << TokenFileLine("alice", "tok-alice", false) << "\n"
                      << TokenFileLine("bob", "tok-bob", false) << "\n"
                      << TokenFileLine("carol", "tok-carol", false) << "\n"
                      << TokenFileLine("dave", "tok-dave", false) << "\n"
                      << TokenFileLine("ops", "tok-ops", true) << "\n"
                      << TokenFileLine("mallory", "tok-mallory", false) << " revoked\n";
  return path;
}

pb::Tensor Bytes(pb::DType dtype, std::vector<int64_t> shape, std::string data) {
  pb::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::move(data));
  return t;
}
pb::Tensor Int32s(std::vector<int32_t> v) {
  return Bytes(pb::INT32, {static_cast<int64_t>(v.size())},
               std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
}

// One tenant's view of the server: raw stubs plus its token on every call.
class As {
 public:
  As(std::shared_ptr<grpc::Channel> channel, std::string token)
      : token_(std::move(token)),
        buffers_(pb::BufferService::NewStub(channel)),
        pools_(pb::PoolService::NewStub(channel)),
        kernels_(pb::KernelService::NewStub(channel)),
        devices_(pb::DeviceService::NewStub(channel)) {}

  void Prepare(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  }

  grpc::Status Upload(const pb::Tensor& t, pb::BufferInfo* info = nullptr) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::BufferInfo local;
    auto writer = buffers_->Upload(&ctx, info ? info : &local);
    pb::UploadChunk chunk;
    chunk.mutable_header()->set_dtype(t.dtype());
    *chunk.mutable_header()->mutable_shape() = t.shape();
    chunk.set_data(t.data());
    writer->Write(chunk);
    writer->WritesDone();
    return writer->Finish();
  }
  grpc::Status Download(const std::string& id, std::string* data = nullptr) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::DownloadRequest req;
    req.set_buffer_id(id);
    auto reader = buffers_->Download(&ctx, req);
    pb::DownloadChunk chunk;
    while (reader->Read(&chunk)) {
      if (data) data->append(chunk.data());
    }
    return reader->Finish();
  }
  grpc::Status Free(const std::string& id) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::FreeBufferRequest req;
    req.set_buffer_id(id);
    pb::FreeBufferResponse resp;
    return buffers_->Free(&ctx, req, &resp);
  }
  grpc::Status ListBuffers(std::vector<std::string>* ids) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::ListBuffersResponse resp;
    grpc::Status s = buffers_->List(&ctx, pb::ListBuffersRequest(), &resp);
    for (const auto& b : resp.buffers()) ids->push_back(b.id());
    return s;
  }
  grpc::Status CreatePool(pb::PoolInfo* info) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::CreatePoolRequest req;
    req.set_kind(pb::MLA_FUSED);
    req.set_num_slots(8);
    req.set_dtype(pb::FP8_E4M3FN);
    return pools_->Create(&ctx, req, info);
  }
  grpc::Status WritePool(const std::string& id) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::WritePoolResponse resp;
    auto writer = pools_->Write(&ctx, &resp);
    pb::WritePoolChunk chunk;
    chunk.set_pool_id(id);
    *chunk.mutable_slots() = Int32s({0, 1});
    std::string rows(2 * 576, '\0');
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<char>(0x30 + i % 7);
    *chunk.mutable_rows() = Bytes(pb::FP8_E4M3FN, {2, 576}, rows);
    writer->Write(chunk);
    writer->WritesDone();
    return writer->Finish();
  }
  grpc::Status ReadPool(const std::string& id) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::ReadPoolRequest req;
    req.set_pool_id(id);
    req.set_start(0);
    req.set_count(2);
    auto reader = pools_->Read(&ctx, req);
    pb::ReadPoolChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  }
  grpc::Status PoolStats(const std::string& id) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::PoolStatsRequest req;
    req.set_pool_id(id);
    pb::PoolInfo info;
    return pools_->Stats(&ctx, req, &info);
  }
  grpc::Status DeletePool(const std::string& id) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::DeletePoolRequest req;
    req.set_pool_id(id);
    pb::DeletePoolResponse resp;
    return pools_->Delete(&ctx, req, &resp);
  }
  grpc::Status ListPools(std::vector<std::string>* ids) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::ListPoolsResponse resp;
    grpc::Status s = pools_->List(&ctx, pb::ListPoolsRequest(), &resp);
    for (const auto& p : resp.pools()) ids->push_back(p.id());
    return s;
  }
  // Attention with q from a buffer (k, v inline), output kept in a new buffer.
  grpc::Status AttentionOnBuffer(const std::string& q_id, std::string* out_id = nullptr) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::AttentionRequest req;
    req.mutable_q()->set_buffer_id(q_id);
    *req.mutable_k()->mutable_tensor() = testing::RandomBf16({1, 1, 4, 128}, 2);
    *req.mutable_v()->mutable_tensor() = testing::RandomBf16({1, 1, 4, 128}, 3);
    req.mutable_output()->set_to_buffer(true);
    pb::AttentionResponse resp;
    grpc::Status s = kernels_->Attention(&ctx, req, &resp);
    if (out_id) *out_id = resp.out().buffer_id();
    return s;
  }
  grpc::Status MlaDecodeOnPool(const std::string& pool_id) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::MlaDecodeRequest req;
    *req.mutable_q_lat()->mutable_tensor() = testing::RandomBf16({1, 1, 1, 512}, 4);
    *req.mutable_q_pe()->mutable_tensor() = testing::RandomBf16({1, 1, 1, 64}, 5);
    req.set_pool_id(pool_id);
    *req.mutable_seq_lens()->mutable_tensor() = Int32s({2});
    *req.mutable_kv_indices()->mutable_tensor() = Int32s({0, 1});
    *req.mutable_kv_indptr()->mutable_tensor() = Int32s({0, 2});
    pb::MlaDecodeResponse resp;
    return kernels_->MlaDecode(&ctx, req, &resp);
  }
  grpc::Status Devices() {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::ListDevicesResponse resp;
    return devices_->List(&ctx, pb::ListDevicesRequest(), &resp);
  }

 private:
  std::string token_;
  std::unique_ptr<pb::BufferService::Stub> buffers_;
  std::unique_ptr<pb::PoolService::Stub> pools_;
  std::unique_ptr<pb::KernelService::Stub> kernels_;
  std::unique_ptr<pb::DeviceService::Stub> devices_;
};

std::unique_ptr<KernelServer> Start(ServerOptions options) {
  options.listen = "127.0.0.1:0";
  options.backend = "cpu";
  options.cpu_threads = 2;
  auto server = KernelServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

class SharedNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.security.tokens_file = WriteTokens();
    server_ = Start(options);
    ASSERT_NE(server_, nullptr);
    channel_ = testing::Connect(server_->port());
  }
  std::unique_ptr<KernelServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(SharedNodeTest, MissingWrongAndRevokedTokensAreUnauthenticated) {
  const std::vector<std::string> tokens = {"", "tok-alicf", "tok-mallory", "Bearer", std::string(5000, 'x')};
  for (const std::string& token : tokens) {
    SCOPED_TRACE(token.substr(0, 20));
    As who(channel_, token);
    std::vector<std::string> ids;
    pb::PoolInfo info;
    for (grpc::Status s :
         {who.Devices(), who.ListBuffers(&ids), who.Upload(testing::RandomBf16({4}, 1)),
          who.Download("buf-x"), who.Free("buf-x"), who.CreatePool(&info), who.ListPools(&ids),
          who.WritePool("pool-x"), who.ReadPool("pool-x"), who.PoolStats("pool-x"),
          who.DeletePool("pool-x"), who.AttentionOnBuffer("buf-x"), who.MlaDecodeOnPool("pool-x")}) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
      EXPECT_FALSE(absl::StrContains(s.error_message(), "tok-")) << "no secret echoed";
    }
  }
  // The revoked token's message says so; health stays open for probes.
  EXPECT_TRUE(absl::StrContains(As(channel_, "tok-mallory").Devices().error_message(), "revoked"));
  EXPECT_TRUE(HealthCheck(channel_.get()).ok());
  EXPECT_TRUE(As(channel_, "tok-alice").Devices().ok());
}

TEST_F(SharedNodeTest, OtherTenantsResourcesAreNotFoundOnEveryKind) {
  As alice(channel_, "tok-alice"), bob(channel_, "tok-bob"), ops(channel_, "tok-ops");
  pb::BufferInfo buf;
  ASSERT_TRUE(alice.Upload(testing::RandomBf16({1, 1, 4, 128}, 1), &buf).ok());
  pb::PoolInfo pool;
  ASSERT_TRUE(alice.CreatePool(&pool).ok());
  ASSERT_TRUE(alice.WritePool(pool.id()).ok());
  std::string out_id;
  grpc::Status op = alice.AttentionOnBuffer(buf.id(), &out_id);
  ASSERT_TRUE(op.ok()) << op.error_message();
  ASSERT_FALSE(out_id.empty());
  grpc::Status mla = alice.MlaDecodeOnPool(pool.id());
  ASSERT_TRUE(mla.ok()) << mla.error_message();

  // Each of bob's attempts answers exactly what an id that never existed
  // answers (with the id swapped), so bob learns nothing about alice's ids.
  const std::string ghost_buf = "buf-0000000000000000000000000000", ghost_pool = "pool-00000000000000000000000000";
  auto same_as_ghost = [](const grpc::Status& real, const grpc::Status& ghost, const std::string& id,
                          const std::string& ghost_id) {
    EXPECT_EQ(real.error_code(), grpc::StatusCode::NOT_FOUND) << real.error_message();
    EXPECT_EQ(real.error_message(),
              absl::StrReplaceAll(ghost.error_message(), {{ghost_id, id}}));
  };
  for (As* other : {&bob, &ops}) {  // admins do not see other tenants' objects either
    for (const std::string& id : {buf.id(), out_id}) {
      same_as_ghost(other->Download(id), other->Download(ghost_buf), id, ghost_buf);
      same_as_ghost(other->AttentionOnBuffer(id), other->AttentionOnBuffer(ghost_buf), id, ghost_buf);
      same_as_ghost(other->Free(id), other->Free(ghost_buf), id, ghost_buf);
    }
    same_as_ghost(other->PoolStats(pool.id()), other->PoolStats(ghost_pool), pool.id(), ghost_pool);
    same_as_ghost(other->ReadPool(pool.id()), other->ReadPool(ghost_pool), pool.id(), ghost_pool);
    same_as_ghost(other->WritePool(pool.id()), other->WritePool(ghost_pool), pool.id(), ghost_pool);
    same_as_ghost(other->MlaDecodeOnPool(pool.id()), other->MlaDecodeOnPool(ghost_pool), pool.id(),
                  ghost_pool);
    same_as_ghost(other->DeletePool(pool.id()), other->DeletePool(ghost_pool), pool.id(), ghost_pool);
    std::vector<std::string> ids;
    ASSERT_TRUE(other->ListBuffers(&ids).ok());
    ASSERT_TRUE(other->ListPools(&ids).ok());
    EXPECT_TRUE(ids.empty()) << ids.size() << " foreign objects listed";
  }

  // Alice still has everything, unharmed by the attempts.
  std::vector<std::string> ids;
  ASSERT_TRUE(alice.ListBuffers(&ids).ok());
  EXPECT_EQ(ids.size(), 2u);
  ids.clear();
  ASSERT_TRUE(alice.ListPools(&ids).ok());
  EXPECT_EQ(ids, std::vector<std::string>{pool.id()});
  std::string data;
  ASSERT_TRUE(alice.Download(buf.id(), &data).ok());
  EXPECT_EQ(data.size(), 1u * 4 * 128 * 2);
  EXPECT_TRUE(alice.ReadPool(pool.id()).ok());
  EXPECT_TRUE(alice.Free(out_id).ok());
  EXPECT_TRUE(alice.DeletePool(pool.id()).ok());
}

TEST(SharedNodeLimits, EachOverrunNamesItsLimit) {
  const std::string limits = TempPath("limits");
  std::ofstream(limits) << "alice max_device_memory=64KiB\n"
                        << "dave requests_per_second=0.001 request_burst=3\n"
                        << "carol max_concurrent_streams=2\n";
  ServerOptions options;
  options.security.tokens_file = WriteTokens();
  options.security.limits_file = limits;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  auto channel = testing::Connect(server->port());
  As alice(channel, "tok-alice"), bob(channel, "tok-bob"), carol(channel, "tok-carol"),
      dave(channel, "tok-dave");

  // Memory: 32 KiB fits, 48 KiB more does not; bob's default is unlimited.
  pb::BufferInfo first;
  ASSERT_TRUE(alice.Upload(testing::RandomBf16({16384}, 1), &first).ok());
  grpc::Status over = alice.Upload(testing::RandomBf16({24576}, 2));
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(over.error_message(), "max_device_memory")) << over.error_message();
  EXPECT_TRUE(absl::StrContains(over.error_message(), "alice")) << over.error_message();
  EXPECT_TRUE(bob.Upload(testing::RandomBf16({24576}, 2)).ok());
  ASSERT_TRUE(alice.Free(first.id()).ok());  // freeing gives the room back
  EXPECT_TRUE(alice.Upload(testing::RandomBf16({24576}, 2)).ok());

  // Rate: a burst of 3, then refused.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(dave.Devices().ok()) << i;
  grpc::Status rate = dave.Devices();
  EXPECT_EQ(rate.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(rate.error_message(), "requests_per_second")) << rate.error_message();
  EXPECT_TRUE(bob.Devices().ok());

  // Streams: carol holds two uploads open; a third is refused until one closes.
  struct Open {
    grpc::ClientContext ctx;
    pb::BufferInfo info;
    std::unique_ptr<grpc::ClientWriter<pb::UploadChunk>> writer;
  };
  auto BufferStub = pb::BufferService::NewStub(channel);
  std::vector<std::unique_ptr<Open>> open;
  for (int i = 0; i < 2; ++i) {
    auto o = std::make_unique<Open>();
    carol.Prepare(&o->ctx);
    o->writer = BufferStub->Upload(&o->ctx, &o->info);
    pb::UploadChunk header;
    header.mutable_header()->set_dtype(pb::BF16);
    header.mutable_header()->add_shape(1024);
    ASSERT_TRUE(o->writer->Write(header));
    open.push_back(std::move(o));
  }
  grpc::Status third;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  do {  // the two handlers may take a moment to start on a loaded machine
    third = carol.Upload(testing::RandomBf16({4}, 3));
  } while (third.ok() && absl::Now() < give_up);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(third.error_message(), "max_concurrent_streams")) << third.error_message();
  for (auto& o : open) {
    pb::UploadChunk data;
    data.set_data(std::string(2048, '\0'));
    o->writer->Write(data);
    o->writer->WritesDone();
    EXPECT_TRUE(o->writer->Finish().ok());
  }
  open.clear();
  EXPECT_TRUE(carol.Upload(testing::RandomBf16({4}, 3)).ok()) << "slots are released";
}

TEST(SharedNodeListen, NonLoopbackNeedsTlsAndTokensOrInsecure) {
  ServerOptions options;
  options.backend = "cpu";
  options.listen = "0.0.0.0:0";
  auto refused = KernelServer::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--insecure")) << refused.status();
  options.security.tokens_file = WriteTokens();
  EXPECT_EQ(KernelServer::Start(options).status().code(), absl::StatusCode::kFailedPrecondition)
      << "tokens without TLS";
  options.security.insecure = true;
  auto waived = KernelServer::Start(options);
  EXPECT_TRUE(waived.ok()) << waived.status();
}

TEST(SharedNodeTls, MutualTlsAndTokensOnTheRealServer) {
  auto certs = security::MakeTestCerts(TempPath("certs"));
  ASSERT_TRUE(certs.ok()) << certs.status();
  ServerOptions options;
  options.backend = "cpu";
  options.listen = "127.0.0.1:0";
  options.security.tls = {certs->server_cert, certs->server_key, certs->ca};
  options.security.tokens_file = WriteTokens();
  auto server = KernelServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());
  auto good = security::ChannelCredentialsFromFiles({certs->ca, certs->client_cert, certs->client_key});
  ASSERT_TRUE(good.ok());
  auto channel = grpc::CreateChannel(target, *good);
  EXPECT_TRUE(As(channel, "tok-alice").Devices().ok());
  EXPECT_EQ(As(channel, "").Devices().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(HealthCheck(channel.get()).ok());
  auto no_cert = security::ChannelCredentialsFromFiles({certs->ca, "", ""});
  ASSERT_TRUE(no_cert.ok());
  EXPECT_EQ(As(grpc::CreateChannel(target, *no_cert), "tok-alice").Devices().error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(As(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()), "tok-alice")
                .Devices()
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// A channel with a connection of its own (a handshake of its own).
std::shared_ptr<grpc::Channel> FreshChannel(const std::string& target,
                                            std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, creds, args);
}

std::shared_ptr<grpc::ChannelCredentials> ClientCreds(const std::string& ca, const std::string& cert = "",
                                                      const std::string& key = "") {
  auto creds = security::ChannelCredentialsFromFiles({ca, cert, key});
  EXPECT_TRUE(creds.ok()) << creds.status();
  return creds.ok() ? *creds : nullptr;
}

// Tenants bound to certificate identities (tokens.h): alice by subject, bob
// by a SAN; carol has a token and no binding.
TEST(SharedNodeTls, TenantsBoundToClientCertificates) {
  auto certs = security::MakeTestCerts(TempPath("certs_bound"));
  ASSERT_TRUE(certs.ok()) << certs.status();
  const std::string tokens = WriteTokens();
  std::ofstream(tokens, std::ios::app) << "alice subject:CN=alice\n"
                                       << "bob   san:bob.lab.example   # DNS SAN\n";
  ServerOptions options;
  options.backend = "cpu";
  options.listen = "127.0.0.1:0";
  options.security.tls = {certs->server_cert, certs->server_key, certs->ca};
  options.security.tokens_file = tokens;
  auto server = KernelServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());
  auto alice_cert = FreshChannel(target, ClientCreds(certs->ca, certs->client_cert, certs->client_key));
  auto bob_cert = FreshChannel(target, ClientCreds(certs->ca, certs->bob_cert, certs->bob_key));
  auto carol_cert = FreshChannel(target, ClientCreds(certs->ca, certs->carol_cert, certs->carol_key));

  // A bound certificate authenticates its tenant with its token or alone.
  pb::BufferInfo info;
  ASSERT_TRUE(As(alice_cert, "tok-alice").Upload(testing::RandomBf16({4}, 1), &info).ok());
  std::vector<std::string> ids;
  ASSERT_TRUE(As(alice_cert, "").ListBuffers(&ids).ok());
  EXPECT_EQ(ids, std::vector<std::string>{info.id()}) << "the certificate alone is alice";
  ids.clear();
  ASSERT_TRUE(As(bob_cert, "").ListBuffers(&ids).ok());
  EXPECT_TRUE(ids.empty()) << "bob's certificate is bob";
  EXPECT_TRUE(As(bob_cert, "tok-bob").Devices().ok());

  // A token with another tenant's certificate is refused, either way round.
  for (const auto& [channel, token] : {std::make_pair(alice_cert, "tok-bob"), std::make_pair(bob_cert, "tok-alice"),
                                       std::make_pair(alice_cert, "tok-ops")}) {
    grpc::Status s = As(channel, token).Devices();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
    EXPECT_TRUE(absl::StrContains(s.error_message(), "belong to different tenants")) << s.error_message();
  }
  // A bound tenant's token needs its certificate; unbound tenants keep
  // authenticating by token, and an unbound certificate proves nothing alone.
  grpc::Status borrowed = As(carol_cert, "tok-alice").Devices();
  EXPECT_EQ(borrowed.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(borrowed.error_message(), "bound to a client certificate")) << borrowed.error_message();
  EXPECT_TRUE(As(carol_cert, "tok-carol").Devices().ok());
  grpc::Status anonymous = As(carol_cert, "").Devices();
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(anonymous.error_message(), "missing bearer token")) << anonymous.error_message();

  // Bindings reload with the tokens file: bob's subject (RFC 2253, most
  // specific first) bound to a second tenant, then bob's SAN revoked.
  std::ofstream(tokens, std::ios::app) << "dave subject:\"CN=bob,O=Lab\"\n";
  ASSERT_TRUE((*server)->ReloadCredentials().ok());
  grpc::Status two = As(bob_cert, "").Devices();
  EXPECT_EQ(two.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(two.error_message(), "bound to two tenants")) << two.error_message();
  std::ofstream(tokens, std::ios::app) << "bob san:bob.lab.example revoked\n";
  ASSERT_TRUE((*server)->ReloadCredentials().ok());
  grpc::Status revoked = As(bob_cert, "tok-bob").Devices();
  EXPECT_EQ(revoked.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(revoked.error_message(), "revoked client certificate")) << revoked.error_message();
  EXPECT_TRUE(As(alice_cert, "").Devices().ok());

  // Bindings without mTLS could never be met: the server refuses to start.
  options.security.tls.client_ca = "";
  auto refused = KernelServer::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--tls_client_ca")) << refused.status();
}

void CopyFile(const std::string& from, const std::string& to) {
  {
    std::ifstream in(from, std::ios::binary);
    std::ofstream(to + ".tmp", std::ios::binary) << in.rdbuf();
  }
  ASSERT_EQ(std::rename((to + ".tmp").c_str(), to.c_str()), 0);
}

// Rotating the server certificate: what a new connection is shown follows
// the files, on ReloadCredentials (SIGHUP) or, with a watch interval, on its
// own; a set that does not load is refused and the current one kept.
TEST(SharedNodeTls, CertificatesReloadWithoutARestart) {
  auto certs = security::MakeTestCerts(TempPath("certs_rotate"));
  ASSERT_TRUE(certs.ok()) << certs.status();
  const std::string cert = TempPath("live.pem"), key = TempPath("live.key");
  CopyFile(certs->server_cert, cert);
  CopyFile(certs->server_key, key);
  ServerOptions options;
  options.backend = "cpu";
  options.listen = "127.0.0.1:0";
  options.security.tls = {cert, key, ""};
  options.security.tls.watch_interval = absl::ZeroDuration();  // only ReloadCredentials
  auto server = KernelServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());
  auto trusts_ca = ClientCreds(certs->ca), trusts_rogue = ClientCreds(certs->rogue_ca);
  auto call = [&](std::shared_ptr<grpc::ChannelCredentials> creds) {
    return As(FreshChannel(target, creds), "").Devices().error_code();
  };
  EXPECT_EQ(call(trusts_ca), grpc::StatusCode::OK);
  EXPECT_EQ(call(trusts_rogue), grpc::StatusCode::UNAVAILABLE);

  CopyFile(certs->rogue_server_cert, cert);
  CopyFile(certs->rogue_server_key, key);
  EXPECT_EQ(call(trusts_ca), grpc::StatusCode::OK) << "no watching: the files alone change nothing";
  ASSERT_TRUE((*server)->ReloadCredentials().ok());
  EXPECT_EQ(call(trusts_rogue), grpc::StatusCode::OK);
  EXPECT_EQ(call(trusts_ca), grpc::StatusCode::UNAVAILABLE);

  CopyFile(certs->server_key, key);  // a key that is not the certificate's
  absl::Status bad = (*server)->ReloadCredentials();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "does not match the certificate")) << bad;
  EXPECT_EQ(call(trusts_rogue), grpc::StatusCode::OK) << "the previous set stays";

  // With a watch interval the next connection after a change picks it up.
  auto watching_options = options;
  watching_options.security.tls.watch_interval = absl::Milliseconds(100);
  CopyFile(certs->server_cert, cert);
  auto watching = KernelServer::Start(watching_options);
  ASSERT_TRUE(watching.ok()) << watching.status();
  const std::string watched = absl::StrCat("127.0.0.1:", (*watching)->port());
  EXPECT_EQ(As(FreshChannel(watched, trusts_ca), "").Devices().error_code(), grpc::StatusCode::OK);
  CopyFile(certs->rogue_server_cert, cert);
  CopyFile(certs->rogue_server_key, key);
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  for (int i = 0; i < 100 && code != grpc::StatusCode::OK; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    code = As(FreshChannel(watched, trusts_rogue), "").Devices().error_code();
  }
  EXPECT_EQ(code, grpc::StatusCode::OK) << "the changed files were never picked up";
  EXPECT_EQ(As(FreshChannel(watched, trusts_ca), "").Devices().error_code(), grpc::StatusCode::UNAVAILABLE);
}

// Kubernetes' gRPC probes speak plaintext: --health_listen serves only
// grpc.health.v1 there while the main port requires TLS and tokens.
TEST(SharedNodeTls, PlaintextHealthPortForProbes) {
  auto certs = security::MakeTestCerts(TempPath("certs_health"));
  ASSERT_TRUE(certs.ok()) << certs.status();
  ServerOptions options;
  options.backend = "cpu";
  options.listen = "127.0.0.1:0";
  options.health_listen = "127.0.0.1:0";
  options.security.tls = {certs->server_cert, certs->server_key, ""};
  options.security.tokens_file = WriteTokens();
  auto server = KernelServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->health_port(), 0);
  auto probe = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->health_port()),
                                   grpc::InsecureChannelCredentials());
  std::string reply;
  ASSERT_TRUE(HealthCheck(probe.get(), "", &reply).ok());
  EXPECT_EQ(reply, std::string("\x08\x01", 2));  // SERVING
  // Nothing but health there: the kernel services are not on the probe port.
  grpc::Status other = As(probe, "tok-alice").Devices();
  EXPECT_EQ(other.error_code(), grpc::StatusCode::UNIMPLEMENTED) << other.error_message();
  // Draining flips the probe to NOT_SERVING at once.
  (*server)->Shutdown(absl::Seconds(1));
  grpc::Status after = HealthCheck(probe.get(), "", &reply);
  if (after.ok()) {
    EXPECT_EQ(reply, std::string("\x08\x02", 2));  // NOT_SERVING
  }
}


// Benchmark jobs: another tenant's job is NOT_FOUND on every call (as a job
// that never existed), admins see and cancel everyone's, max_queued_jobs is
// enforced, and the jobs gauges show them per tenant.
TEST(SharedNodeJobs, TenantsAdminsAndQueueLimit) {
  const std::string limits = TempPath("job_limits");
  std::ofstream(limits) << "alice max_queued_jobs=1\n";
  ServerOptions options;
  options.security.tokens_file = WriteTokens();
  options.security.limits_file = limits;
  options.metrics_listen = "127.0.0.1:0";
  options.bench.min_warmin_s = 0.05;
  options.bench.min_window_s = 0.1;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  auto stub = pb::BenchService::NewStub(testing::Connect(server->port()));
  auto call = [&](const std::string& token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  };
  auto submit = [&](const std::string& token, double window_s, pb::BenchJob* job) {
    pb::SubmitBenchRequest req;
    pb::BenchJobSpec& s = *req.mutable_spec();
    s.set_name("sustained");
    s.set_op(pb::OP_ATTENTION);
    s.mutable_attention()->set_batch(1);
    s.mutable_attention()->set_heads_q(1);
    s.mutable_attention()->set_seq_q(16);
    s.mutable_attention()->set_head_dim(64);
    s.add_variants("cpu");
    s.mutable_method()->set_method(pb::METHOD_SUSTAINED);
    s.mutable_method()->set_warmin_s(0.05);
    s.mutable_method()->set_window_s(window_s);
    return stub->Submit(call(token).get(), req, job);
  };
  auto get = [&](const std::string& token, const std::string& id, pb::BenchJob* job) {
    pb::GetBenchRequest req;
    req.set_job_id(id);
    return stub->Get(call(token).get(), req, job);
  };
  auto cancel = [&](const std::string& token, const std::string& id) {
    pb::CancelBenchRequest req;
    req.set_job_id(id);
    pb::BenchJob job;
    return stub->Cancel(call(token).get(), req, &job);
  };
  auto list = [&](const std::string& token) {
    pb::ListBenchRequest req;
    pb::ListBenchResponse resp;
    EXPECT_TRUE(stub->List(call(token).get(), req, &resp).ok());
    std::vector<std::string> ids;
    for (const auto& j : resp.jobs()) ids.push_back(j.id());
    return ids;
  };
  auto watch = [&](const std::string& token, const std::string& id) {
    pb::WatchBenchRequest req;
    req.set_job_id(id);
    auto ctx = call(token);
    auto reader = stub->Watch(ctx.get(), req);
    pb::BenchEvent e;
    while (reader->Read(&e)) {
    }
    return reader->Finish();
  };

  pb::BenchJob running, queued, job;
  ASSERT_TRUE(submit("tok-alice", 30, &running).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  do {
    ASSERT_TRUE(get("tok-alice", running.id(), &job).ok());
  } while (job.state() != pb::JOB_RUNNING && absl::Now() < give_up);
  ASSERT_EQ(job.state(), pb::JOB_RUNNING);
  ASSERT_TRUE(submit("tok-alice", 0.1, &queued).ok());  // 0 queued before it
  grpc::Status over = submit("tok-alice", 0.1, &job);   // 1 queued: at the limit
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(over.error_message(), "max_queued_jobs")) << over.error_message();

  // bob: every call on alice's job answers what a job that never existed answers.
  const std::string ghost = "job-00000000000000000000000000";
  for (const std::string& id : {running.id(), queued.id()}) {
    grpc::Status real = get("tok-bob", id, &job), none = get("tok-bob", ghost, &job);
    EXPECT_EQ(real.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(real.error_message(), absl::StrReplaceAll(none.error_message(), {{ghost, id}}));
    real = cancel("tok-bob", id);
    none = cancel("tok-bob", ghost);
    EXPECT_EQ(real.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(real.error_message(), absl::StrReplaceAll(none.error_message(), {{ghost, id}}));
    real = watch("tok-bob", id);
    none = watch("tok-bob", ghost);
    EXPECT_EQ(real.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(real.error_message(), absl::StrReplaceAll(none.error_message(), {{ghost, id}}));
  }
  EXPECT_TRUE(list("tok-bob").empty());
  EXPECT_EQ(list("tok-alice").size(), 2u);

  // Metrics: one running and one queued job of alice.
  const std::string text = testutil::ScrapeMetrics(server->metrics_port());
  EXPECT_TRUE(absl::StrContains(text, "kernelserve_jobs_running{tenant=\"alice\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kernelserve_jobs_queued{tenant=\"alice\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kernelserve_limit_rejections_total{limit=\"max_queued_jobs\"} 1\n"))
      << text;

  // ops (admin) sees both and cancels them.
  const std::vector<std::string> all = list("tok-ops");
  EXPECT_EQ(all.size(), 2u);
  ASSERT_TRUE(get("tok-ops", running.id(), &job).ok());
  EXPECT_EQ(job.tenant(), "alice");
  EXPECT_TRUE(cancel("tok-ops", queued.id()).ok());
  EXPECT_TRUE(cancel("tok-ops", running.id()).ok());
  ASSERT_TRUE(get("tok-alice", running.id(), &job).ok());
  EXPECT_EQ(job.state(), pb::JOB_CANCELLED);
}

TEST(SharedNodeMetrics, EndpointShowsCallsMemoryPerTenantAndDevices) {
  ServerOptions options;
  options.security.tokens_file = WriteTokens();
  options.metrics_listen = "127.0.0.1:0";
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->metrics_port(), 0);
  auto channel = testing::Connect(server->port());
  As alice(channel, "tok-alice"), nobody(channel, "");
  ASSERT_TRUE(alice.Upload(testing::RandomBf16({1000}, 1)).ok());
  EXPECT_FALSE(nobody.Devices().ok());
  EXPECT_EQ(As(channel, "tok-alice").Download("buf-nope").error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string text = testutil::ScrapeMetrics(server->metrics_port());
  for (const char* want : {
           "kernelserve_grpc_calls_total{service=\"kernelserve.v1.BufferService\",method=\"Upload\",code=\"OK\"} 1\n",
           "kernelserve_grpc_calls_total{service=\"kernelserve.v1.DeviceService\",method=\"List\",code=\"UNAUTHENTICATED\"} 1\n",
           "kernelserve_grpc_calls_total{service=\"kernelserve.v1.BufferService\",method=\"Download\",code=\"NOT_FOUND\"} 1\n",
           "kernelserve_grpc_call_duration_seconds_count{service=\"kernelserve.v1.BufferService\",method=\"Upload\"} 1\n",
           "kernelserve_tenant_device_memory_bytes{tenant=\"alice\"} 2000\n",
           "kernelserve_device_memory_used_bytes{device=\"0\"} 2000\n",
           "kernelserve_device_healthy{device=\"0\"} 1\n",
           "kernelserve_device_queue_depth{device=\"0\"} 0\n",
           "kernelserve_build_info{version=",
           "process_resident_memory_bytes "}) {
    EXPECT_TRUE(absl::StrContains(text, want)) << want << "\n--- scrape:\n" << text;
  }
  EXPECT_FALSE(absl::StrContains(text, "tok-")) << "no secret in metrics";
}

// Bytes that are not a request message answer INVALID_ARGUMENT, not gRPC's
// bare INTERNAL (which is kept for server faults).
TEST_F(SharedNodeTest, UndecodableRequestIsInvalidArgument) {
  const std::string garbage("\x0a\xff\xff\xff\xff\x0f", 6);  // a length far past the end
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer tok-alice");
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel_.get(),
      grpc::internal::RpcMethod("/kernelserve.v1.KernelService/Attention",
                                grpc::internal::RpcMethod::NORMAL_RPC),
      &ctx, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "protobuf")) << s.error_message();
}

// An over-size message is RESOURCE_EXHAUSTED from gRPC itself, before any
// interceptor or handler sees the call; its message gives both sizes.
// What a call holds on the host beyond the message in hand counts against
// its tenant's max_device_memory as well as the device's limit: a pool write
// stream's staged rows. alice (64 KiB) may stage two 18 KiB messages next to
// her 18 KiB pool, not three; the refused stream writes nothing and holds
// nothing afterwards. bob, without a limit, stages all three.
TEST(SharedNodeLimits, HostStagingCountsAgainstTheTenantQuota) {
  const std::string limits = TempPath("staging_limits");
  std::ofstream(limits) << "alice max_device_memory=64KiB\n";
  ServerOptions options;
  options.security.tokens_file = WriteTokens();
  options.security.limits_file = limits;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  auto channel = testing::Connect(server->port());
  auto pools = pb::PoolService::NewStub(channel);
  As alice(channel, "tok-alice"), bob(channel, "tok-bob");
  auto create = [&](const As& who) {
    grpc::ClientContext ctx;
    who.Prepare(&ctx);
    pb::CreatePoolRequest req;
    req.set_kind(pb::MLA_FUSED);
    req.set_num_slots(32);
    req.set_dtype(pb::FP8_E4M3FN);
    pb::PoolInfo info;
    EXPECT_TRUE(pools->Create(&ctx, req, &info).ok());
    return info.id();
  };
  auto write = [&](const As& who, const std::string& pool, int messages, pb::WritePoolResponse* resp) {
    grpc::ClientContext ctx;
    who.Prepare(&ctx);
    auto writer = pools->Write(&ctx, resp);
    std::vector<int32_t> slots(32);
    for (int32_t i = 0; i < 32; ++i) slots[i] = i;
    for (int m = 0; m < messages; ++m) {
      pb::WritePoolChunk chunk;
      if (m == 0) chunk.set_pool_id(pool);
      *chunk.mutable_slots() = Int32s(slots);
      *chunk.mutable_rows() = Bytes(pb::FP8_E4M3FN, {32, 576}, std::string(32 * 576, static_cast<char>(0x30 + m)));
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  };
  const std::string alice_pool = create(alice), bob_pool = create(bob);
  pb::WritePoolResponse resp;
  grpc::Status over = write(alice, alice_pool, 3, &resp);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << over.error_message();
  EXPECT_TRUE(absl::StrContains(over.error_message(), "tenant \"alice\" over limit max_device_memory"))
      << over.error_message();
  EXPECT_TRUE(absl::StrContains(over.error_message(), "(for pool write staging (message 2))")) << over.error_message();
  EXPECT_TRUE(absl::StrContains(over.error_message(), "nothing was written")) << over.error_message();
  {
    grpc::ClientContext ctx;
    alice.Prepare(&ctx);
    pb::PoolStatsRequest req;
    req.set_pool_id(alice_pool);
    pb::PoolInfo info;
    ASSERT_TRUE(pools->Stats(&ctx, req, &info).ok());
    EXPECT_EQ(info.rows_written(), 0);
  }
  // The refused stream's staging was released: two messages fit again.
  grpc::Status fits = write(alice, alice_pool, 2, &resp);
  EXPECT_TRUE(fits.ok()) << fits.error_message();
  EXPECT_EQ(resp.rows_written(), 64);
  grpc::Status unlimited = write(bob, bob_pool, 3, &resp);
  EXPECT_TRUE(unlimited.ok()) << unlimited.error_message();
}

TEST(SharedNodeLimits, MessageSizeNamesTheLimit) {
  ServerOptions options;
  options.security.tokens_file = WriteTokens();
  options.max_message_mb = 1;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  As alice(testing::Connect(server->port()), "tok-alice");
  grpc::Status big = alice.AttentionOnBuffer("B", nullptr);  // small: fine (NOT_FOUND)
  EXPECT_EQ(big.error_code(), grpc::StatusCode::NOT_FOUND);
  auto stub = pb::KernelService::NewStub(testing::Connect(server->port()));
  pb::AttentionRequest req;
  *req.mutable_q()->mutable_tensor() = testing::RandomBf16({1, 1, 4096, 128}, 1);  // 1 MiB + header
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer tok-alice");
  pb::AttentionResponse resp;
  grpc::Status s = stub->Attention(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "larger than max")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "1048576")) << s.error_message();
}

// Device drain is admin only; a drained device refuses new work with
// UNAVAILABLE while downloads still work; undrain returns it to service.
TEST_F(SharedNodeTest, DrainIsAdminOnly) {
  auto devices = pb::DeviceService::NewStub(channel_);
  auto drain = [&](const std::string& token, bool undrain, pb::Device* out) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    pb::DrainDeviceRequest req;
    req.set_index(0);
    req.set_undrain(undrain);
    req.set_reason("maintenance");
    return devices->Drain(&ctx, req, out);
  };
  As alice(channel_, "tok-alice");
  pb::BufferInfo buf;
  ASSERT_TRUE(alice.Upload(testing::RandomBf16({64}, 1), &buf).ok());
  pb::Device d;
  grpc::Status denied = drain("tok-alice", false, &d);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(denied.error_message(), "admin")) << denied.error_message();
  EXPECT_EQ(drain("", false, &d).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(drain("tok-ops", false, &d).ok());
  EXPECT_EQ(d.state(), pb::DRAINING);
  EXPECT_EQ(d.state_reason(), "maintenance");
  grpc::Status refused = alice.Upload(testing::RandomBf16({64}, 2));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "draining")) << refused.error_message();
  EXPECT_EQ(alice.AttentionOnBuffer(buf.id()).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(alice.Download(buf.id()).ok()) << "data stays reachable while draining";
  ASSERT_TRUE(drain("tok-ops", true, &d).ok());
  EXPECT_EQ(d.state(), pb::HEALTHY);
  EXPECT_TRUE(alice.Upload(testing::RandomBf16({64}, 2)).ok());
}

// A fleet behind one name: the client library's round_robin policy spreads
// calls over every address (here an ipv4: list; a dns:/// name with several
// A records, like the headless Service, resolves the same way).
TEST(SharedNodeFleet, RoundRobinSpreadsCallsOverServers) {
  ServerOptions options;
  options.metrics_listen = "127.0.0.1:0";
  auto a = Start(options);
  auto b = Start(options);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  ClientOptions client_options;
  client_options.target = absl::StrCat("ipv4:127.0.0.1:", a->port(), ",127.0.0.1:", b->port());
  client_options.load_balancing = "round_robin";
  auto client = Client::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string line =
      "kernelserve_grpc_calls_total{service=\"kernelserve.v1.DeviceService\",method=\"List\",code=\"OK\"} ";
  auto calls_seen = [&](KernelServer* s) {
    const std::string text = testutil::ScrapeMetrics(s->metrics_port());
    const size_t at = text.find(line);
    return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + line.size());
  };
  // round_robin picks among the subchannels that are READY; on a loaded
  // machine one server's connection can come up well after the other's, and
  // until then every call goes to the first. Call until both have answered.
  int made = 0;
  for (const absl::Time give_up = absl::Now() + absl::Seconds(20);
       absl::Now() < give_up && (calls_seen(a.get()) == 0 || calls_seen(b.get()) == 0);) {
    ASSERT_TRUE((*client)->Devices().ok());
    ++made;
    absl::SleepFor(absl::Milliseconds(10));
  }
  const int a0 = calls_seen(a.get()), b0 = calls_seen(b.get());
  ASSERT_GT(a0, 0) << "server a got no call in " << made << " calls";
  ASSERT_GT(b0, 0) << "server b got no call in " << made << " calls";
  EXPECT_EQ(a0 + b0, made);
  // Both connected: the next calls alternate.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*client)->Devices().ok());
  const int da = calls_seen(a.get()) - a0, db = calls_seen(b.get()) - b0;
  EXPECT_GE(da, 7) << "round robin should give each server about half";
  EXPECT_GE(db, 7) << "round robin should give each server about half";
  EXPECT_EQ(da + db, 20);
}

// BenchService as one tenant (bearer token on every call).
class BenchAs {
 public:
  BenchAs(std::shared_ptr<grpc::Channel> channel, std::string token)
      : token_(std::move(token)), stub_(pb::BenchService::NewStub(channel)) {}

  grpc::Status Submit(const pb::BenchJobSpec& spec, pb::BenchJob* job) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::SubmitBenchRequest req;
    *req.mutable_spec() = spec;
    return stub_->Submit(&ctx, req, job);
  }
  grpc::Status Get(const std::string& id, pb::BenchJob* job) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::GetBenchRequest req;
    req.set_job_id(id);
    return stub_->Get(&ctx, req, job);
  }
  std::vector<std::string> List() {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::ListBenchResponse resp;
    EXPECT_TRUE(stub_->List(&ctx, pb::ListBenchRequest(), &resp).ok());
    std::vector<std::string> ids;
    for (const auto& j : resp.jobs()) ids.push_back(j.id());
    return ids;
  }
  // Polls until the job is in `state` or final; returns it as last seen.
  pb::BenchJob WaitFor(const std::string& id, pb::BenchJobState state) {
    pb::BenchJob job;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (absl::Now() < give_up) {
      if (!Get(id, &job).ok()) break;
      if (job.state() == state || (job.state() != pb::JOB_QUEUED && job.state() != pb::JOB_RUNNING)) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return job;
  }
  pb::BenchJob WaitFinal(const std::string& id) { return WaitFor(id, pb::JOB_DONE); }

 private:
  void Prepare(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  }
  std::string token_;
  std::unique_ptr<pb::BenchService::Stub> stub_;
};

// Attention B=1, Hq=Hkv=1, S=seq, D=64, bf16 in and out: 4 * seq * 128 bytes on the device.
pb::BenchJobSpec SmallAttention(int seq, double window_s = 0) {
  pb::BenchJobSpec s;
  s.set_name("attn");
  s.set_op(pb::OP_ATTENTION);
  s.mutable_attention()->set_batch(1);
  s.mutable_attention()->set_heads_q(1);
  s.mutable_attention()->set_seq_q(seq);
  s.mutable_attention()->set_head_dim(64);
  s.add_variants("cpu");
  s.mutable_method()->set_warmup(1);
  s.mutable_method()->set_iters(2);
  if (window_s > 0) {
    s.mutable_method()->set_method(pb::METHOD_SUSTAINED);
    s.mutable_method()->set_window_s(window_s);
  }
  return s;
}

// A job's device memory counts against its tenant's max_device_memory and the
// device's --memory_limit_mb while it runs, and only then: over a limit the
// job fails naming it, others run, and the accountant returns to zero.
TEST(SharedNodeJobs, JobDeviceMemoryCountsAgainstTenantAndDeviceLimits) {
  const std::string limits = TempPath("job_memory_limits");
  std::ofstream(limits) << "alice max_device_memory=64KiB\n";
  ServerOptions options;
  options.security.tokens_file = WriteTokens();
  options.security.limits_file = limits;
  options.metrics_listen = "127.0.0.1:0";
  options.memory_limit_mb = 1;
  options.bench.min_warmin_s = 0.02;
  options.bench.min_window_s = 0.05;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  auto channel = testing::Connect(server->port());
  BenchAs alice(channel, "tok-alice"), bob(channel, "tok-bob");
  As alice_buffers(channel, "tok-alice");

  // 128 KiB (q, k, v, out at S=256) > alice's 64 KiB: the job fails naming the limit.
  pb::BenchJob job;
  ASSERT_TRUE(alice.Submit(SmallAttention(256), &job).ok());
  job = alice.WaitFinal(job.id());
  EXPECT_EQ(job.state(), pb::JOB_FAILED);
  EXPECT_EQ(job.error_code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(absl::StrContains(job.error(), "tenant \"alice\" over limit max_device_memory")) << job.error();
  EXPECT_TRUE(absl::StrContains(job.error(), "131072 requested")) << job.error();
  // bob (no tenant limit) is unaffected; over the 1 MiB device limit (S=4096: 2 MiB) his job fails naming it.
  ASSERT_TRUE(bob.Submit(SmallAttention(256), &job).ok());
  EXPECT_EQ(bob.WaitFinal(job.id()).state(), pb::JOB_DONE);
  ASSERT_TRUE(bob.Submit(SmallAttention(4096), &job).ok());
  job = bob.WaitFinal(job.id());
  EXPECT_EQ(job.state(), pb::JOB_FAILED);
  EXPECT_TRUE(absl::StrContains(job.error(), "device 0 memory limit exceeded")) << job.error();
  EXPECT_TRUE(absl::StrContains(job.error(), "--memory_limit_mb")) << job.error();

  // 32 KiB at S=64 fits. While it runs it holds that memory: a 48 KiB upload is over.
  ASSERT_TRUE(alice.Submit(SmallAttention(64, /*window_s=*/1.5), &job).ok());
  const std::string held = "kernelserve_tenant_device_memory_bytes{tenant=\"alice\"} 32768\n";
  bool seen = false;
  for (const absl::Time give_up = absl::Now() + absl::Seconds(20); !seen && absl::Now() < give_up;) {
    seen = absl::StrContains(testutil::ScrapeMetrics(server->metrics_port()), held);
    if (!seen) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(seen) << "the running job's 32 KiB never showed in the metrics";
  pb::BenchJob now;
  ASSERT_TRUE(alice.Get(job.id(), &now).ok());
  EXPECT_EQ(now.state(), pb::JOB_RUNNING);
  grpc::Status over = alice_buffers.Upload(testing::RandomBf16({24576}, 1));
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(over.error_message(), "32768 bytes in use")) << over.error_message();
  job = alice.WaitFinal(job.id());
  EXPECT_EQ(job.state(), pb::JOB_DONE) << job.error();
  // Released when the job ended: nothing accounted, and the upload fits.
  const std::string text = testutil::ScrapeMetrics(server->metrics_port());
  EXPECT_FALSE(absl::StrContains(text, "kernelserve_tenant_device_memory_bytes{")) << text;
  EXPECT_TRUE(absl::StrContains(text, "kernelserve_device_memory_used_bytes{device=\"0\"} 0\n")) << text;
  EXPECT_TRUE(alice_buffers.Upload(testing::RandomBf16({24576}, 1)).ok());
}

// An admin's job is the admin's own: it reads the buffers the admin uploaded
// (they answered NOT_FOUND when admin jobs ran as tenant ""), while the admin
// still sees every tenant's jobs and tenants still see only their own.
TEST(SharedNodeJobs, AdminJobsReadTheAdminsOwnBuffers) {
  ServerOptions options;
  options.security.tokens_file = WriteTokens();
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  auto channel = testing::Connect(server->port());
  BenchAs ops(channel, "tok-ops"), alice(channel, "tok-alice");
  As ops_buffers(channel, "tok-ops");
  pb::BufferInfo q, k, v;
  ASSERT_TRUE(ops_buffers.Upload(testing::RandomBf16({1, 1, 64, 64}, 1), &q).ok());
  ASSERT_TRUE(ops_buffers.Upload(testing::RandomBf16({1, 1, 64, 64}, 2), &k).ok());
  ASSERT_TRUE(ops_buffers.Upload(testing::RandomBf16({1, 1, 64, 64}, 3), &v).ok());
  pb::BenchJobSpec spec = SmallAttention(64);
  spec.mutable_inputs()->set_kind(pb::INPUT_BUFFERS);
  (*spec.mutable_inputs()->mutable_buffers())["q"] = q.id();
  (*spec.mutable_inputs()->mutable_buffers())["k"] = k.id();
  (*spec.mutable_inputs()->mutable_buffers())["v"] = v.id();

  pb::BenchJob job;
  ASSERT_TRUE(ops.Submit(spec, &job).ok());
  EXPECT_EQ(job.tenant(), "ops");
  EXPECT_EQ(job.spec().submitter(), "ops");
  const std::string ops_job = job.id();
  job = ops.WaitFinal(ops_job);
  EXPECT_EQ(job.state(), pb::JOB_DONE) << job.error();
  ASSERT_EQ(job.results_size(), 1);
  EXPECT_TRUE(job.results(0).correct()) << job.results(0).gate_message();

  // alice cannot see the admin's job, nor read the admin's buffers in hers.
  EXPECT_EQ(alice.Get(ops_job, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(alice.List().empty());
  // Her submission answers exactly as for buffers that never existed, and
  // leaves no job.
  grpc::Status refused = alice.Submit(spec, &job);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::NOT_FOUND) << refused.error_message();
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "spec.inputs.buffers[\"k\"]")) << refused.error_message();
  EXPECT_TRUE(alice.List().empty());
  // The admin still sees and reads every tenant's jobs.
  ASSERT_TRUE(alice.Submit(SmallAttention(64), &job).ok());
  const std::string alice_job = job.id();
  const std::vector<std::string> all = ops.List();
  EXPECT_EQ(all.size(), 2u);
  ASSERT_TRUE(ops.Get(alice_job, &job).ok());
  EXPECT_EQ(job.tenant(), "alice");
  alice.WaitFinal(alice_job);
}

}  // namespace
}  // namespace kernelserve
