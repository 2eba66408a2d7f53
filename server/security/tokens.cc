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

absl::StatusOr<std::map<std::string, TokenEntry>> ParseTokenFile(absl::string_view text,
                                                                 absl::string_view source) {
  std::map<std::string, TokenEntry> entries;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash_pos = line.find('#');
    if (hash_pos != absl::string_view::npos) line = line.substr(0, hash_pos);
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    auto where = [&] { return absl::StrCat(source, ":", line_no, ": "); };
    if (fields.size() < 2 || fields.size() > 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "expected \"tenant sha256hex [admin|revoked]\", got ",
                       fields.size(), " fields"));
    }
    if (!IsValidTenantName(fields[0])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "tenant name must be 1..64 of [A-Za-z0-9_.-]"));
    }
    if (!IsHex64(fields[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "second field must be a SHA-256 hash (64 hex digits), got ",
                       fields[1].size(), " characters"));
    }
    TokenEntry entry;
    entry.tenant = std::string(fields[0]);
    if (fields.size() == 3) {
      if (fields[2] == "admin") {
        entry.admin = true;
      } else if (fields[2] == "revoked") {
        entry.revoked = true;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "third field must be \"admin\" or \"revoked\""));
      }
    }
    std::string hash = absl::AsciiStrToLower(fields[1]);
    auto [it, inserted] = entries.emplace(std::move(hash), entry);
    if (!inserted) {
      // The same token listed twice: a revoked line wins, so revoking by
      // appending a line works too; two live lines are ambiguous.
      if (entry.revoked || it->second.revoked) {
        it->second.revoked = true;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(where(), "duplicate token hash"));
      }
    }
  }
  return entries;
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
  auto parsed = ParseTokenFile(text, "tokens");
  if (!parsed.ok()) return parsed.status();
  std::unique_ptr<TokenStore> store(new TokenStore());
  absl::MutexLock lock(&store->mu_);
  store->entries_ = *std::move(parsed);
  return store;
}

absl::Status TokenStore::ReloadLocked() {
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("tokens file ", path_, ": ", std::strerror(errno)));
  }
  FileStamp stamp;
  stamp.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  stamp.size = st.st_size;
  stamp.inode = st.st_ino;
  if (stamp == stamp_) return absl::OkStatus();
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat("tokens file ", path_, ": cannot open"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto parsed = ParseTokenFile(ss.str(), path_);
  if (!parsed.ok()) return parsed.status();
  entries_ = *std::move(parsed);
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
    spdlog::error("keeping the previous {} token(s): {}", entries_.size(), status.ToString());
  }
}

absl::StatusOr<Tenant> TokenStore::Lookup(absl::string_view token) {
  MaybeReload();
  const std::string hash = Sha256Hex(token);
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end()) return absl::UnauthenticatedError("invalid bearer token");
  if (it->second.revoked) return absl::UnauthenticatedError("revoked bearer token");
  return Tenant{it->second.tenant, it->second.admin};
}

int64_t TokenStore::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

int64_t TokenStore::reloads() const {
  absl::MutexLock lock(&mu_);
  return reloads_;
}

}  // namespace security
}  // namespace kernelserve
