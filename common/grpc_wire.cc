#include "common/grpc_wire.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace wire {
namespace {

// A cursor over the bytes of several slices.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : slices_(slices) { Skip(); }
  bool AtEnd() const { return slice_ >= slices_.size(); }
  uint64_t Remaining() const { return remaining_; }
  void SetTotal(uint64_t total) { remaining_ = total; }

  bool ReadByte(uint8_t* b) {
    if (AtEnd()) return false;
    *b = slices_[slice_].begin()[pos_];
    Advance(1);
    return true;
  }
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }
  // Views of the next `n` bytes; false if fewer remain.
  bool Take(uint64_t n, std::vector<absl::string_view>* pieces) {
    if (n > remaining_) return false;
    while (n > 0) {
      const grpc::Slice& s = slices_[slice_];
      const uint64_t here = std::min<uint64_t>(n, s.size() - pos_);
      if (pieces != nullptr) {
        pieces->emplace_back(reinterpret_cast<const char*>(s.begin()) + pos_, static_cast<size_t>(here));
      }
      Advance(here);
      n -= here;
    }
    return true;
  }

 private:
  void Advance(uint64_t n) {
    pos_ += n;
    remaining_ -= n;
    Skip();
  }
  void Skip() {
    while (slice_ < slices_.size() && pos_ >= slices_[slice_].size()) {
      ++slice_;
      pos_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0;
  uint64_t pos_ = 0;
  uint64_t remaining_ = 0;
};

const std::vector<absl::string_view> kNoPieces;

}  // namespace

absl::Status WireMessage::Parse(const grpc::ByteBuffer& buffer, absl::string_view what) {
  slices_.clear();
  fields_.clear();
  if (buffer.Valid() && !buffer.Dump(&slices_).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " (its bytes could not be read)"));
  }
  uint64_t total = 0;
  for (const grpc::Slice& s : slices_) total += s.size();
  Cursor in(slices_);
  in.SetTotal(total);
  while (!in.AtEnd()) {
    const uint64_t at = total - in.Remaining();
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " (", why, " at byte ", at, ")"));
    };
    uint64_t tag;
    if (!in.ReadVarint(&tag)) return bad("truncated field tag");
    const uint64_t number = tag >> 3;
    const int type = static_cast<int>(tag & 7);
    if (number == 0 || number > (1u << 29) - 1) return bad("field number out of range");
    Field f;
    f.number = static_cast<int>(number);
    switch (type) {
      case 0:
        if (!in.ReadVarint(&f.varint)) return bad("truncated varint");
        break;
      case 1:
        if (!in.Take(8, nullptr)) return bad("truncated fixed64");
        break;
      case 5:
        if (!in.Take(4, nullptr)) return bad("truncated fixed32");
        break;
      case 2: {
        uint64_t n;
        if (!in.ReadVarint(&n)) return bad("truncated length");
        if (!in.Take(n, &f.pieces)) {
          return bad(absl::StrCat("field ", number, " claims ", n, " bytes, ", in.Remaining(), " remain"));
        }
        break;
      }
      default:
        return bad(absl::StrCat("unsupported wire type ", type));
    }
    fields_.push_back(std::move(f));
  }
  return absl::OkStatus();
}

const WireMessage::Field* WireMessage::Last(int number) const {
  for (auto it = fields_.rbegin(); it != fields_.rend(); ++it) {
    if (it->number == number) return &*it;
  }
  return nullptr;
}

bool WireMessage::Has(int number) const { return Last(number) != nullptr; }

uint64_t WireMessage::Varint(int number) const {
  const Field* f = Last(number);
  return f == nullptr ? 0 : f->varint;
}

const std::vector<absl::string_view>& WireMessage::Bytes(int number) const {
  const Field* f = Last(number);
  return f == nullptr ? kNoPieces : f->pieces;
}

int64_t WireMessage::BytesSize(int number) const {
  int64_t n = 0;
  for (absl::string_view p : Bytes(number)) n += static_cast<int64_t>(p.size());
  return n;
}

std::string WireMessage::Concatenated(int number) const {
  std::string out;
  for (const Field& f : fields_) {
    if (f.number != number) continue;
    for (absl::string_view p : f.pieces) out.append(p.data(), p.size());
  }
  return out;
}

void AppendLengthPrefix(int number, uint64_t size, std::string* out) {
  uint64_t v = (static_cast<uint64_t>(number) << 3) | 2;
  for (int i = 0; i < 2; ++i) {
    while (v >= 0x80) {
      out->push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out->push_back(static_cast<char>(v));
    v = size;
  }
}

grpc::ByteBuffer WithBytesField(const std::string& prefix, int number, grpc::Slice payload) {
  std::string head = prefix;
  if (payload.size() > 0) AppendLengthPrefix(number, payload.size(), &head);
  grpc::Slice slices[2] = {grpc::Slice(head), std::move(payload)};
  return grpc::ByteBuffer(slices, slices[1].size() > 0 ? 2 : 1);
}

}  // namespace wire
}  // namespace kernelserve
