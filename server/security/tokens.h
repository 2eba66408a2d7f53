// Bearer tokens mapped to tenants (DESIGN §5).
//
// The server never stores tokens, only their SHA-256 hashes, in a text file:
//
//   # tenant   sha256(token) as 64 hex digits   [admin | revoked]
//   alice      2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
//   ops        fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9 admin
//   mallory    baa5a0964d3320fbc0c6a922140453c8513ea24ab8fd0577034804a967248096 revoked
//
// Blank lines and text after '#' are ignored. A tenant may have several lines
// (one per token); a hash may appear only once.
//
// With mTLS, a tenant may also be bound to client-certificate identities:
//
//   # tenant   subject:DN | san:NAME (double-quoted when it has spaces)   [admin | revoked]
//   alice      subject:CN=alice,O=Lab
//   alice      san:alice.lab.example
//   ops        subject:"CN=Ops Team,O=Lab" admin
//
// DN is the certificate's subject in RFC 2253 form, as gRPC reports it
// (most specific first: "CN=alice,O=Lab" for /O=Lab/CN=alice); NAME any of
// its subject alternative names (DNS name, e-mail address, URI, IP address).
// A certificate with a bound identity authenticates its tenant by itself, and
// a bound tenant's tokens are accepted only with its certificate: a token
// presented with another tenant's certificate, or a bound tenant's token
// without one, is refused (auth.h). `revoked` refuses the certificate. A token whose line is removed
// or marked `revoked` stops working: the store re-reads the file when it
// changes (checked at most once per `reload_interval`), so revocation needs no
// restart. `token_tool` (this package) makes a token and its line.
#ifndef KERNELSERVE_SERVER_SECURITY_TOKENS_H_
#define KERNELSERVE_SERVER_SECURITY_TOKENS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/security/tls.h"

namespace kernelserve {
namespace security {

// The identity a call runs as. With authentication off every caller is the
// anonymous tenant "" with admin rights (single-user loopback mode).
struct Tenant {
  std::string name;
  bool admin = false;
};

// Lowercase hex SHA-256 of `data` (OpenSSL libcrypto).
std::string Sha256Hex(absl::string_view data);

// A fresh random token: "ks_" + 43 base64url characters (256 bits, RAND_bytes).
absl::StatusOr<std::string> GenerateToken();

// The token-file line for `token`: "tenant sha256hex[ admin]".
std::string TokenFileLine(absl::string_view tenant, absl::string_view token, bool admin);

// Tenant names: 1..64 of [A-Za-z0-9_.-]. They appear in metrics labels and logs.
bool IsValidTenantName(absl::string_view name);

struct TokenEntry {
  std::string tenant;
  bool admin = false;
  bool revoked = false;
};

// A client certificate's identities as gRPC reports them.
struct CertIdentity {
  std::string subject;            // RFC 2253, "CN=alice,O=Lab"; empty without a certificate
  std::vector<std::string> sans;  // subject alternative names
};

struct TokenFile {
  std::map<std::string, TokenEntry> tokens;      // by sha256 hex
  std::map<std::string, TokenEntry> identities;  // by "subject:DN" / "san:NAME"
  std::set<std::string> bound_tenants;           // tenants with an identity line
};

// The whole file: tokens and certificate bindings.
absl::StatusOr<TokenFile> ParseTokenFileWithBindings(absl::string_view text, absl::string_view source);

// Parses a token file's text; errors name the line ("tokens:3: ...") but
// never echo a hash.
absl::StatusOr<std::map<std::string, TokenEntry>> ParseTokenFile(absl::string_view text,
                                                                 absl::string_view source);

class TokenStore {
 public:
  // Reads `path` now; later lookups re-read it when its mtime, size or inode
  // changed. A later unreadable or malformed file keeps the last good set
  // (logged), so a typo does not lock everyone out.
  static absl::StatusOr<std::unique_ptr<TokenStore>> Open(
      const std::string& path, absl::Duration reload_interval = absl::Seconds(1));
  // A fixed set (tests, tools); never reloads.
  static absl::StatusOr<std::unique_ptr<TokenStore>> FromText(absl::string_view text);

  // UNAUTHENTICATED for unknown and revoked tokens.
  absl::StatusOr<Tenant> Lookup(absl::string_view token);
  // The tenant bound to any of the certificate's identities; nullopt when
  // none is. UNAUTHENTICATED for a revoked binding or identities bound to
  // two tenants.
  absl::StatusOr<std::optional<Tenant>> LookupCertificate(const CertIdentity& cert);
  // Whether `tenant` is bound to a certificate (its tokens then need it).
  bool RequiresCertificate(const std::string& tenant);
  bool HasBindings() const;

  // Re-reads the file now (no-op for FromText stores).
  absl::Status Reload();

  int64_t size() const;
  int64_t reloads() const;

 private:
  TokenStore() = default;
  void MaybeReload();
  absl::Status ReloadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string path_;
  absl::Duration reload_interval_ = absl::Seconds(1);
  mutable absl::Mutex mu_;
  TokenFile file_ ABSL_GUARDED_BY(mu_);
  FileStamp stamp_ ABSL_GUARDED_BY(mu_);
  absl::Time next_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t reloads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace security
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SECURITY_TOKENS_H_
