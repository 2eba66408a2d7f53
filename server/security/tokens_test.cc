#include "server/security/tokens.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/security/auth.h"

namespace kernelserve {
namespace security {
namespace {

TEST(Sha256Hex, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(GenerateToken, RandomAndWellFormed) {
  auto a = GenerateToken();
  auto b = GenerateToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(a->substr(0, 3), "ks_");
  EXPECT_GE(a->size(), 3u + 43u);
}

TEST(ParseTokenFile, FormatAndErrors) {
  const std::string h1 = Sha256Hex("t1"), h2 = Sha256Hex("t2"), h3 = Sha256Hex("t3");
  auto ok = ParseTokenFile(absl::StrCat("# comment\n\nalice ", h1, "\n  ops\t", h2,
                                        " admin # trailing\nbob ", h3, " revoked\n"),
                           "f");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 3u);
  EXPECT_EQ(ok->at(h1).tenant, "alice");
  EXPECT_FALSE(ok->at(h1).admin);
  EXPECT_TRUE(ok->at(h2).admin);
  EXPECT_TRUE(ok->at(h3).revoked);

  auto bad_hash = ParseTokenFile("alice deadbeef\n", "f");
  EXPECT_EQ(bad_hash.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_hash.status().message().find("f:1:"), std::string::npos);
  EXPECT_EQ(bad_hash.status().message().find("deadbeef"), std::string::npos) << "no hash echoed";

  EXPECT_FALSE(ParseTokenFile(absl::StrCat("al/ice ", h1), "f").ok());
  EXPECT_FALSE(ParseTokenFile(absl::StrCat("alice ", h1, " root"), "f").ok());
  EXPECT_FALSE(ParseTokenFile(absl::StrCat("alice ", h1, "\nbob ", h1), "f").ok());
  // A later "revoked" line for the same hash revokes it.
  auto rev = ParseTokenFile(absl::StrCat("alice ", h1, "\nalice ", h1, " revoked"), "f");
  ASSERT_TRUE(rev.ok());
  EXPECT_TRUE(rev->at(h1).revoked);
}

TEST(ParseTokenFile, CertificateBindings) {
  const std::string h1 = Sha256Hex("t1");
  auto ok = ParseTokenFileWithBindings(absl::StrCat("alice ", h1, "\n",
                                                    "alice subject:CN=alice,O=Lab\n",
                                                    "alice san:alice.lab.example # a DNS name\n",
                                                    "ops subject:\"CN=Ops Team,O=Lab\" admin\n",
                                                    "bob san:bob@lab.example revoked\n"),
                                       "f");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->tokens.size(), 1u);
  ASSERT_EQ(ok->identities.size(), 4u);
  EXPECT_EQ(ok->identities.at("subject:CN=alice,O=Lab").tenant, "alice");
  EXPECT_EQ(ok->identities.at("san:alice.lab.example").tenant, "alice");
  EXPECT_TRUE(ok->identities.at("subject:CN=Ops Team,O=Lab").admin);
  EXPECT_TRUE(ok->identities.at("san:bob@lab.example").revoked);
  EXPECT_EQ(ok->bound_tenants, (std::set<std::string>{"alice", "bob", "ops"}));

  struct Bad {
    std::string text, substr;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"alice subject:\"CN=alice\n", "f:1: certificate identity: unterminated quote"},
           {"alice san:\n", "f:1: certificate identity: empty san"},
           {"alice san:a.lab root\n", "f:1: after the certificate identity"},
           {"alice san:a.lab\nbob san:a.lab\n", "f:2: certificate identity listed twice"},
       }) {
    auto parsed = ParseTokenFileWithBindings(bad.text, "f");
    ASSERT_FALSE(parsed.ok()) << bad.text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(bad.substr), std::string::npos) << parsed.status();
  }
  // The token-only parser reads such a file and keeps its tokens.
  auto tokens = ParseTokenFile(absl::StrCat("alice ", h1, "\nalice san:a.lab\n"), "f");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->size(), 1u);
}

TEST(Authenticator, TokensAndCertificatesMustAgree) {
  auto store = TokenStore::FromText(absl::StrCat(TokenFileLine("alice", "secret-a", false), "\n",
                                                 TokenFileLine("carol", "secret-c", false), "\n",
                                                 "alice subject:CN=alice\n", "ops san:ops.lab admin\n"));
  ASSERT_TRUE(store.ok()) << store.status();
  Authenticator auth(std::shared_ptr<TokenStore>(std::move(*store)));
  const CertIdentity alice{"CN=alice", {}}, ops{"CN=x", {"ops.lab"}}, stranger{"CN=carol", {}}, none;
  auto who = [&](absl::optional<absl::string_view> header, const CertIdentity& cert) {
    auto t = auth.AuthenticateHeader(header, cert);
    return t.ok() ? absl::StrCat(t->name, t->admin ? "+admin" : "") : std::string(t.status().message());
  };
  EXPECT_EQ(who("Bearer secret-a", alice), "alice");
  EXPECT_EQ(who(absl::nullopt, alice), "alice");
  EXPECT_EQ(who(absl::nullopt, ops), "ops+admin");
  EXPECT_EQ(who("Bearer secret-c", stranger), "carol");
  EXPECT_EQ(who("Bearer secret-c", none), "carol");
  EXPECT_EQ(who("Bearer secret-c", alice), "the bearer token and the client certificate belong to different tenants");
  EXPECT_EQ(who("Bearer secret-a", stranger),
            "this bearer token's tenant is bound to a client certificate; present it with the token");
  EXPECT_EQ(who("Bearer secret-a", none),
            "this bearer token's tenant is bound to a client certificate; present it with the token");
  EXPECT_NE(who(absl::nullopt, stranger).find("missing bearer token"), std::string::npos);
}

TEST(TokenStore, LookupFromText) {
  auto store = TokenStore::FromText(absl::StrCat(TokenFileLine("alice", "secret-a", false), "\n",
                                                 TokenFileLine("ops", "secret-o", true), "\n"));
  ASSERT_TRUE(store.ok());
  auto a = (*store)->Lookup("secret-a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->name, "alice");
  EXPECT_FALSE(a->admin);
  EXPECT_TRUE((*store)->Lookup("secret-o")->admin);
  auto bad = (*store)->Lookup("secret-x");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(bad.status().message().find("secret"), std::string::npos);
}

TEST(TokenStore, ReloadsOnChangeForRevocation) {
  const std::string path = absl::StrCat(testing::TempDir(), "/tokens_", getpid());
  auto write = [&](const std::string& text) {
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << text;
    ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0);
  };
  write(TokenFileLine("alice", "tok-a", false) + "\n" + TokenFileLine("bob", "tok-b", false) + "\n");
  auto store = TokenStore::Open(path, absl::ZeroDuration());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->Lookup("tok-b").ok());

  // Marked revoked.
  write(TokenFileLine("alice", "tok-a", false) + "\n" + TokenFileLine("bob", "tok-b", false) +
        " revoked\n");
  auto revoked = (*store)->Lookup("tok-b");
  EXPECT_EQ(revoked.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(revoked.status().message().find("revoked"), std::string::npos);
  EXPECT_TRUE((*store)->Lookup("tok-a").ok());

  // Removed.
  write(TokenFileLine("bob", "tok-b", false) + "\n");
  EXPECT_EQ((*store)->Lookup("tok-a").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE((*store)->Lookup("tok-b").ok());

  // A broken file keeps the last good set.
  write("garbage line here\n");
  EXPECT_TRUE((*store)->Lookup("tok-b").ok());
  EXPECT_FALSE((*store)->Reload().ok());

  EXPECT_EQ(TokenStore::Open(path + ".missing").status().code(), absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST(Authenticator, HeaderForms) {
  auto store = TokenStore::FromText(TokenFileLine("alice", "tok-a", false));
  ASSERT_TRUE(store.ok());
  Authenticator auth(std::shared_ptr<TokenStore>(std::move(*store)));
  EXPECT_EQ(auth.AuthenticateHeader("Bearer tok-a")->name, "alice");
  EXPECT_EQ(auth.AuthenticateHeader("bearer   tok-a ")->name, "alice");
  for (absl::string_view bad : {"", "Bearer", "Bearer ", "Basic tok-a", "tok-a", "Bearer tok-b"}) {
    auto r = auth.AuthenticateHeader(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << bad;
  }
  auto missing = auth.AuthenticateHeader(absl::nullopt);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(missing.status().message().find("missing"), std::string::npos);

  Authenticator off(nullptr);
  auto anon = off.AuthenticateHeader(absl::nullopt);
  ASSERT_TRUE(anon.ok());
  EXPECT_EQ(anon->name, "");
  EXPECT_TRUE(anon->admin);

  EXPECT_EQ(Authenticator::RequireAdmin(Tenant{"alice", false}, "DrainDevice").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Authenticator::RequireAdmin(Tenant{"ops", true}, "DrainDevice").ok());
}

}  // namespace
}  // namespace security
}  // namespace kernelserve
