#include "server/security/listen_policy.h"

#include "gtest/gtest.h"

namespace kernelserve {
namespace security {
namespace {

TEST(IsLoopbackListen, Addresses) {
  for (const char* a : {"127.0.0.1:50051", "127.1.2.3:1", "localhost:50051", "[::1]:50051",
                        "unix:/tmp/ks.sock", "unix-abstract:ks", "ipv4:127.0.0.1:5", "::1"}) {
    EXPECT_TRUE(IsLoopbackListen(a)) << a;
  }
  for (const char* a : {"0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.5:50051",
                        "gpu-node-1:50051", "[2001:db8::1]:50051", "128.0.0.1:1", "localhost.evil:1"}) {
    EXPECT_FALSE(IsLoopbackListen(a)) << a;
  }
}

TEST(CheckListenSecurity, Rule) {
  EXPECT_TRUE(CheckListenSecurity("127.0.0.1:1", false, false, false).ok());
  EXPECT_TRUE(CheckListenSecurity("0.0.0.0:1", true, true, false).ok());
  EXPECT_TRUE(CheckListenSecurity("0.0.0.0:1", false, false, true).ok());
  absl::Status s = CheckListenSecurity("0.0.0.0:1", true, false, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--tokens_file"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--insecure"), std::string::npos) << s;
  s = CheckListenSecurity("[::]:1", false, true, false);
  EXPECT_NE(s.message().find("TLS"), std::string::npos) << s;
}

}  // namespace
}  // namespace security
}  // namespace kernelserve
