#include "server/security/tokens.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace security {
namespace {

bool IsHex64(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

absl::StatusOr<std::string> GenerateToken() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    return absl::InternalError("RAND_bytes failed: no entropy for a token");
  }
  std::string encoded;
  absl::WebSafeBase64Escape(absl::string_view(reinterpret_cast<const char*>(raw), sizeof(raw)),
                            &encoded);
  return absl::StrCat("ks_", encoded);
}

std::string TokenFileLine(absl::string_view tenant, absl::string_view token, bool admin) {
  return absl::StrCat(tenant, " ", Sha256Hex(token), admin ? " admin" : "");
}

bool IsValidTenantName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) {
      return false;
    }
  }
  return true;
}

namespace {

// Adds `entry` under `key`: a revoked line wins over a live one, so revoking
// by appending a line works too; two live lines for one key are ambiguous.
absl::Status AddEntry(std::map<std::string, TokenEntry>* entries, std::string key, const TokenEntry& entry,
                      absl::string_view duplicate) {
  auto [it, inserted] = entries->emplace(std::move(key), entry);
  if (inserted) return absl::OkStatus();
  if (entry.revoked || it->second.revoked) {
    it->second.revoked = true;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(std::string(duplicate));
}

// "admin", "revoked" or nothing, into `entry`.
bool ParseFlag(absl::string_view flag, TokenEntry* entry) {
  if (flag == "admin") {
    entry->admin = true;
  } else if (flag == "revoked") {
    entry->revoked = true;
  } else {
    return false;
  }
  return true;
}

// A certificate binding's identity: subject:DN or san:NAME, the value
// double-quoted when it holds spaces. `rest` is what follows the tenant;
// on success it is left with what follows the identity.
absl::StatusOr<std::string> ParseIdentity(absl::string_view* rest) {
  absl::string_view r = absl::StripLeadingAsciiWhitespace(*rest);
  const size_t colon = r.find(':');
  const absl::string_view kind = r.substr(0, colon);
  r.remove_prefix(colon + 1);
  std::string value;
  if (!r.empty() && r[0] == '"') {
    const size_t close = r.find('"', 1);
    if (close == absl::string_view::npos) return absl::InvalidArgumentError("unterminated quote");
    value = std::string(r.substr(1, close - 1));
    r.remove_prefix(close + 1);
  } else {
    const size_t end = r.find_first_of(" \t\r");
    value = std::string(r.substr(0, end));
    r.remove_prefix(end == absl::string_view::npos ? r.size() : end);
  }
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat("empty ", kind));
  *rest = r;
  return absl::StrCat(kind, ":", value);
}

bool IsIdentityField(absl::string_view field) {
  return absl::StartsWith(field, "subject:") || absl::StartsWith(field, "san:");
}

}  // namespace

absl::StatusOr<TokenFile> ParseTokenFileWithBindings(absl::string_view text, absl::string_view source) {
  TokenFile file;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash_pos = line.find('#');
    if (hash_pos != absl::string_view::npos) line = line.substr(0, hash_pos);
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    auto where = [&] { return absl::StrCat(source, ":", line_no, ": "); };
    if (fields.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "expected \"tenant sha256hex [admin|revoked]\" or \"tenant subject:DN|san:NAME [admin|revoked]\""));
    }
    if (!IsValidTenantName(fields[0])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "tenant name must be 1..64 of [A-Za-z0-9_.-]"));
    }
    TokenEntry entry;
    entry.tenant = std::string(fields[0]);
    if (IsIdentityField(fields[1])) {
      absl::string_view rest = line.substr(line.find(fields[0]) + fields[0].size());
      auto identity = ParseIdentity(&rest);
      if (!identity.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where(), "certificate identity: ", identity.status().message()));
      }
      std::vector<absl::string_view> flags = absl::StrSplit(rest, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
      if (flags.size() > 1 || (flags.size() == 1 && !ParseFlag(flags[0], &entry))) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "after the certificate identity only \"admin\" or \"revoked\" may follow"));
      }
      absl::Status added = AddEntry(&file.identities, *std::move(identity), entry,
                                    absl::StrCat(where(), "certificate identity listed twice"));
      if (!added.ok()) return added;
      continue;
    }
    if (fields.size() > 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "expected \"tenant sha256hex [admin|revoked]\", got ",
                       fields.size(), " fields"));
    }
    if (!IsHex64(fields[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "second field must be a SHA-256 hash (64 hex digits), got ",
                       fields[1].size(), " characters"));
    }
    if (fields.size() == 3 && !ParseFlag(fields[2], &entry)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "third field must be \"admin\" or \"revoked\""));
    }
    absl::Status added = AddEntry(&file.tokens, absl::AsciiStrToLower(fields[1]), entry,
                                  absl::StrCat(where(), "duplicate token hash"));
    if (!added.ok()) return added;
  }
  for (const auto& [identity, e] : file.identities) file.bound_tenants.insert(e.tenant);
  return file;
}

absl::StatusOr<std::map<std::string, TokenEntry>> ParseTokenFile(absl::string_view text,
                                                                 absl::string_view source) {
  auto file = ParseTokenFileWithBindings(text, source);
  if (!file.ok()) return file.status();
  return std::move(file->tokens);
}

absl::StatusOr<std::unique_ptr<TokenStore>> TokenStore::Open(const std::string& path,
                                                             absl::Duration reload_interval) {
  std::unique_ptr<TokenStore> store(new TokenStore());
  store->path_ = path;
  store->reload_interval_ = reload_interval;
  absl::MutexLock lock(&store->mu_);
  absl::Status status = store->ReloadLocked();
  if (!status.ok()) return status;
  store->next_check_ = absl::Now() + reload_interval;
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    // Whoever can write the file can mint tokens.
    spdlog::warn("tokens file {} is writable by group or others (mode {:o}); make it 0600 or 0640",
                 path, st.st_mode & 0777);
  }
  return store;
}

absl::StatusOr<std::unique_ptr<TokenStore>> TokenStore::FromText(absl::string_view text) {
  auto parsed = ParseTokenFileWithBindings(text, "tokens");
  if (!parsed.ok()) return parsed.status();
  std::unique_ptr<TokenStore> store(new TokenStore());
  absl::MutexLock lock(&store->mu_);
  store->file_ = *std::move(parsed);
  return store;
}

absl::Status TokenStore::ReloadLocked() {
  const FileStamp stamp = StampOf(path_);
  if (stamp.inode < 0) {
    return absl::NotFoundError(
        absl::StrCat("tokens file ", path_, ": ", std::strerror(errno)));
  }
  if (stamp == stamp_) return absl::OkStatus();
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat("tokens file ", path_, ": cannot open"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto parsed = ParseTokenFileWithBindings(ss.str(), path_);
  if (!parsed.ok()) return parsed.status();
  file_ = *std::move(parsed);
  stamp_ = stamp;
  ++reloads_;
  return absl::OkStatus();
}

absl::Status TokenStore::Reload() {
  if (path_.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return ReloadLocked();
}

void TokenStore::MaybeReload() {
  if (path_.empty()) return;
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now < next_check_) return;
  next_check_ = now + reload_interval_;
  absl::Status status = ReloadLocked();
  if (!status.ok()) {
    spdlog::error("keeping the previous {} token(s): {}", file_.tokens.size(), status.ToString());
  }
}

absl::StatusOr<Tenant> TokenStore::Lookup(absl::string_view token) {
  MaybeReload();
  const std::string hash = Sha256Hex(token);
  absl::MutexLock lock(&mu_);
  auto it = file_.tokens.find(hash);
  if (it == file_.tokens.end()) return absl::UnauthenticatedError("invalid bearer token");
  if (it->second.revoked) return absl::UnauthenticatedError("revoked bearer token");
  return Tenant{it->second.tenant, it->second.admin};
}

absl::StatusOr<std::optional<Tenant>> TokenStore::LookupCertificate(const CertIdentity& cert) {
  MaybeReload();
  std::vector<std::string> keys;
  if (!cert.subject.empty()) keys.push_back(absl::StrCat("subject:", cert.subject));
  for (const std::string& san : cert.sans) keys.push_back(absl::StrCat("san:", san));
  absl::MutexLock lock(&mu_);
  std::optional<Tenant> found;
  for (const std::string& key : keys) {
    auto it = file_.identities.find(key);
    if (it == file_.identities.end()) continue;
    if (it->second.revoked) return absl::UnauthenticatedError("revoked client certificate");
    if (found.has_value() && found->name != it->second.tenant) {
      return absl::UnauthenticatedError("the client certificate's identities are bound to two tenants");
    }
    found = Tenant{it->second.tenant, (found.has_value() && found->admin) || it->second.admin};
  }
  return found;
}

bool TokenStore::RequiresCertificate(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  return file_.bound_tenants.count(tenant) > 0;
}

bool TokenStore::HasBindings() const {
  absl::MutexLock lock(&mu_);
  return !file_.identities.empty();
}

int64_t TokenStore::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(file_.tokens.size() + file_.identities.size());
}

int64_t TokenStore::reloads() const {
  absl::MutexLock lock(&mu_);
  return reloads_;
}

}  // namespace security
}  // namespace kernelserve
