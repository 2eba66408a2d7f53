// TLS, mTLS and bearer tokens end to end over loopback gRPC: a DeviceService
// whose handler authenticates every call and answers with the caller's tenant.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "server/security/auth.h"
#include "server/security/test_certs.h"
#include "server/security/tls.h"
#include "server/security/tokens.h"

namespace kernelserve {
namespace security {
namespace {

class WhoAmI final : public v1::DeviceService::Service {
 public:
  explicit WhoAmI(const Authenticator* auth) : auth_(auth) {}
  grpc::Status List(grpc::ServerContext* ctx, const v1::ListDevicesRequest*,
                    v1::ListDevicesResponse* resp) override {
    auto tenant = auth_->Authenticate(*ctx);
    if (!tenant.ok()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(tenant.status().message()));
    }
    resp->add_devices()->set_name(tenant->name + (tenant->admin ? "+admin" : ""));
    return grpc::Status::OK;
  }

 private:
  const Authenticator* auth_;
};

class TlsAuthTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = MakeTestCerts(absl::StrCat(testing::TempDir(), "/certs_", getpid()));
    ASSERT_TRUE(c.ok()) << c.status();
    certs_ = new TestCerts(*c);
  }
  static void TearDownTestSuite() { delete certs_; }

  void StartServer(const ServerTlsFiles& files, std::shared_ptr<TokenStore> tokens) {
    auth_ = std::make_unique<Authenticator>(std::move(tokens));
    service_ = std::make_unique<WhoAmI>(auth_.get());
    auto creds = ServerCredentialsFromFiles(files);
    ASSERT_TRUE(creds.ok()) << creds.status();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", *creds, &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  // The call's status, and the tenant it ran as in *who.
  grpc::Status Call(std::shared_ptr<grpc::ChannelCredentials> creds, const std::string& token,
                    std::string* who = nullptr) {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), creds);
    auto stub = v1::DeviceService::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::ListDevicesResponse resp;
    grpc::Status s = stub->List(&ctx, v1::ListDevicesRequest(), &resp);
    if (s.ok() && who != nullptr && resp.devices_size() == 1) *who = resp.devices(0).name();
    return s;
  }
  std::shared_ptr<grpc::ChannelCredentials> Client(ClientTlsFiles files) {
    auto c = ChannelCredentialsFromFiles(files);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }

  static TestCerts* certs_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<WhoAmI> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};
TestCerts* TlsAuthTest::certs_ = nullptr;

TEST_F(TlsAuthTest, TlsHandshake) {
  StartServer({certs_->server_cert, certs_->server_key, ""}, nullptr);
  std::string who = "unset";
  EXPECT_TRUE(Call(Client({certs_->ca, "", ""}), "", &who).ok());
  EXPECT_EQ(who, "+admin");  // auth off: the anonymous admin tenant
  // Plaintext to a TLS port, and a client that trusts another CA, both fail.
  EXPECT_EQ(Call(grpc::InsecureChannelCredentials(), "").error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Call(Client({certs_->rogue_ca, "", ""}), "").error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsAuthTest, MutualTlsHandshake) {
  StartServer({certs_->server_cert, certs_->server_key, certs_->ca}, nullptr);
  EXPECT_TRUE(Call(Client({certs_->ca, certs_->client_cert, certs_->client_key}), "").ok());
  EXPECT_EQ(Call(Client({certs_->ca, "", ""}), "").error_code(), grpc::StatusCode::UNAVAILABLE)
      << "no client certificate";
  EXPECT_EQ(Call(Client({certs_->ca, certs_->rogue_cert, certs_->rogue_key}), "").error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "client certificate from an unknown CA";
}

TEST_F(TlsAuthTest, BearerTokensOverMutualTls) {
  const std::string path = absl::StrCat(certs_->dir, "/tokens");
  std::ofstream(path) << TokenFileLine("alice", "tok-alice", false) << "\n"
                      << TokenFileLine("ops", "tok-ops", true) << "\n";
  auto store = TokenStore::Open(path, absl::ZeroDuration());
  ASSERT_TRUE(store.ok()) << store.status();
  StartServer({certs_->server_cert, certs_->server_key, certs_->ca},
              std::shared_ptr<TokenStore>(std::move(*store)));
  auto creds = Client({certs_->ca, certs_->client_cert, certs_->client_key});

  std::string who;
  ASSERT_TRUE(Call(creds, "tok-alice", &who).ok());
  EXPECT_EQ(who, "alice");
  ASSERT_TRUE(Call(creds, "tok-ops", &who).ok());
  EXPECT_EQ(who, "ops+admin");

  grpc::Status missing = Call(creds, "");
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(missing.error_message().find("missing bearer token"), std::string::npos);
  grpc::Status wrong = Call(creds, "tok-alicf");
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(wrong.error_message().find("tok-"), std::string::npos) << "no secret echoed";

  // Revoke alice by marking her line; the next call is refused, ops still works.
  {
    std::ofstream out(path + ".new");
    out << TokenFileLine("alice", "tok-alice", false) << " revoked\n"
        << TokenFileLine("ops", "tok-ops", true) << "\n";
  }
  ASSERT_EQ(std::rename((path + ".new").c_str(), path.c_str()), 0);
  grpc::Status revoked = Call(creds, "tok-alice");
  EXPECT_EQ(revoked.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(revoked.error_message().find("revoked"), std::string::npos);
  EXPECT_TRUE(Call(creds, "tok-ops").ok());
}

TEST(TlsFiles, ConfigurationErrors) {
  EXPECT_EQ(ServerCredentialsFromFiles({"cert.pem", "", ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ServerCredentialsFromFiles({"", "", "ca.pem"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ServerCredentialsFromFiles({"/nonexistent.pem", "/nonexistent.key", ""}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(ServerCredentialsFromFiles({"", "", ""}).ok());  // plaintext
  EXPECT_EQ(ChannelCredentialsFromFiles({"", "c.pem", ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace security
}  // namespace kernelserve
