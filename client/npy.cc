#include "client/npy.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace kernelserve {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

absl::Status Malformed(absl::string_view name, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": not a valid .npy file: ", why));
}

// A tiny parser for the header's Python dict literal, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view s) : s_(s) {}

  void SkipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool String(std::string* out) {
    SkipSpace();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return false;
    const char quote = s_[pos_++];
    const size_t end = s_.find(quote, pos_);
    if (end == absl::string_view::npos) return false;
    *out = std::string(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }
  bool Word(std::string* out) {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' || s_[pos_] == '-')) {
      ++pos_;
    }
    *out = std::string(s_.substr(start, pos_ - start));
    return !out->empty();
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == s_.size();
  }

 private:
  absl::string_view s_;
  size_t pos_ = 0;
};

absl::Status ParseHeaderDict(absl::string_view header, absl::string_view name, std::string* descr,
                             bool* fortran, Shape* shape) {
  HeaderParser p(header);
  bool have_descr = false, have_fortran = false, have_shape = false;
  if (!p.Consume('{')) return Malformed(name, "header does not start with '{'");
  while (!p.Consume('}')) {
    std::string key;
    if (!p.String(&key)) return Malformed(name, "expected a quoted key in the header");
    if (!p.Consume(':')) return Malformed(name, absl::StrCat("expected ':' after '", key, "'"));
    if (key == "descr") {
      if (!p.String(descr)) return Malformed(name, "'descr' is not a string (structured dtypes are not supported)");
      have_descr = true;
    } else if (key == "fortran_order") {
      std::string w;
      if (!p.Word(&w) || (w != "True" && w != "False")) {
        return Malformed(name, "'fortran_order' is not True or False");
      }
      *fortran = w == "True";
      have_fortran = true;
    } else if (key == "shape") {
      if (!p.Consume('(')) return Malformed(name, "'shape' is not a tuple");
      shape->clear();
      while (!p.Consume(')')) {
        std::string w;
        int64_t d = 0;
        if (!p.Word(&w)) return Malformed(name, "bad 'shape' tuple");
        absl::string_view digits = w;
        absl::ConsumeSuffix(&digits, "L");  // Python 2 longs
        if (!absl::SimpleAtoi(digits, &d) || d < 0) {
          return Malformed(name, absl::StrCat("bad dimension '", w, "' in 'shape'"));
        }
        shape->push_back(d);
        if (!p.Consume(',') && !p.Peek(')')) return Malformed(name, "bad 'shape' tuple");
      }
      have_shape = true;
    } else {
      return Malformed(name, absl::StrCat("unexpected header key '", key, "'"));
    }
    if (!p.Consume(',') && !p.Peek('}')) return Malformed(name, "expected ',' or '}' in the header");
  }
  if (!p.AtEnd()) return Malformed(name, "trailing characters after the header dict");
  if (!have_descr || !have_fortran || !have_shape) {
    return Malformed(name, "header lacks one of 'descr', 'fortran_order', 'shape'");
  }
  return absl::OkStatus();
}

template <typename T>
T LoadLe(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // x86-64 is little-endian, as .npy data here is
  return v;
}

std::string KindName(char kind, int itemsize) {
  switch (kind) {
    case 'f': return absl::StrCat("float", itemsize * 8);
    case 'i': return absl::StrCat("int", itemsize * 8);
    case 'u': return absl::StrCat("uint", itemsize * 8);
    default: return absl::StrCat("'", std::string(1, kind), itemsize, "'");
  }
}

std::string AcceptString(const NpyAccept& a) {
  std::vector<std::string> parts;
  if (a.float_as != DType::kInvalid) {
    parts.push_back(absl::StrCat("float16/float32/float64 (converted to ", DTypeName(a.float_as), ")"));
  }
  if (a.uint8_as != DType::kInvalid) {
    parts.push_back(a.uint8_as == DType::kFp4E2M1
                        ? std::string("uint8 packed fp4_e2m1 codes (two per byte, last dim K/2)")
                        : absl::StrCat("uint8 ", DTypeName(a.uint8_as), " codes"));
  }
  if (a.int_as != DType::kInvalid) parts.push_back(absl::StrCat("int32/int64 (as ", DTypeName(a.int_as), ")"));
  if (parts.empty()) return "nothing";
  return absl::StrJoin(parts, " or ");
}

}  // namespace

std::string NpyArray::DescrString() const {
  return absl::StrCat(itemsize == 1 ? "|" : "<", std::string(1, kind), itemsize);
}

// ------------------------------------------------------------- conversions

uint16_t NpyDoubleToBf16(double x, Rounding mode) {
  if (std::isnan(x)) return 0x7FFF;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a == 0) return sign;
  const uint16_t inf = sign | 0x7F80;
  const uint16_t max_finite = sign | 0x7F7F;
  if (std::isinf(a)) return mode == Rounding::kRtz ? max_finite : inf;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): leading bit is 2^(e-1)
  // bf16 keeps 8 significant bits; below 2^-126 its spacing stays at 2^-133.
  const int ulp_exp = std::max(e - 1, -126) - 7;
  const double q = std::ldexp(a, -ulp_exp);  // exact: a power-of-two scaling
  double r = std::floor(q);
  const double frac = q - r;  // exact: q has at most 53 significant bits
  switch (mode) {
    case Rounding::kRtz:
      break;
    case Rounding::kRtna:
      if (frac >= 0.5) r += 1;
      break;
    case Rounding::kRtne:
    default:
      if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
      break;
  }
  const double v = std::ldexp(r, ulp_exp);
  if (v >= 0x1p128) return mode == Rounding::kRtz ? max_finite : inf;
  const float f = static_cast<float>(v);  // exact: v has at most 8 significant bits
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return sign | static_cast<uint16_t>(bits >> 16);
}

float NpyBf16ToFloat(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

double NpyHalfToDouble(uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exp = (bits >> 10) & 0x1F;
  const int mant = bits & 0x3FF;
  if (exp == 0x1F) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// ------------------------------------------------------------------ parse

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view name) {
  if (bytes.size() < kMagicLen + 4 || bytes.substr(0, kMagicLen) != absl::string_view(kMagic, kMagicLen)) {
    return Malformed(name, "missing the \\x93NUMPY magic");
  }
  const uint8_t major = static_cast<uint8_t>(bytes[6]);
  const uint8_t minor = static_cast<uint8_t>(bytes[7]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = LoadLe<uint16_t>(reinterpret_cast<const uint8_t*>(bytes.data()) + 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Malformed(name, "truncated header length");
    header_len = LoadLe<uint32_t>(reinterpret_cast<const uint8_t*>(bytes.data()) + 8);
    offset = 12;
  } else {
    return Malformed(name, absl::StrCat("unsupported format version ", major, ".", minor,
                                        " (expected 1.0, 2.0 or 3.0)"));
  }
  if (bytes.size() < offset + header_len) return Malformed(name, "truncated header");
  const absl::string_view header = bytes.substr(offset, header_len);
  std::string descr;
  bool fortran = false;
  Shape shape;
  absl::Status st = ParseHeaderDict(header, name, &descr, &fortran, &shape);
  if (!st.ok()) return st;
  if (fortran) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": fortran_order is True; only C-order arrays are supported "
              "(save np.ascontiguousarray(a) instead)"));
  }
  if (descr.size() < 3) return Malformed(name, absl::StrCat("bad descr '", descr, "'"));
  NpyArray a;
  const char order = descr[0];
  a.kind = descr[1];
  int itemsize = 0;
  if (!absl::SimpleAtoi(absl::string_view(descr).substr(2), &itemsize) || itemsize <= 0) {
    return Malformed(name, absl::StrCat("bad descr '", descr, "'"));
  }
  a.itemsize = itemsize;
  if (order == '>' && itemsize > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": big-endian data (descr '", descr, "') is not supported; save it little-endian"));
  }
  if (order != '<' && order != '|' && order != '=' && order != '>') {
    return Malformed(name, absl::StrCat("bad descr '", descr, "'"));
  }
  const bool supported = (a.kind == 'f' && (itemsize == 2 || itemsize == 4 || itemsize == 8)) ||
                         (a.kind == 'i' && (itemsize == 4 || itemsize == 8)) ||
                         (a.kind == 'u' && itemsize == 1);
  if (!supported) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": unsupported dtype '", descr,
        "'; expected float16/float32/float64, int32/int64 or uint8"));
  }
  a.shape = shape;
  const int64_t n = NumElements(shape);
  if (n < 0 || n > std::numeric_limits<int64_t>::max() / itemsize) {
    return Malformed(name, "shape too large");
  }
  const size_t data_bytes = static_cast<size_t>(n * itemsize);
  const size_t have = bytes.size() - offset - header_len;
  if (have != data_bytes) {
    return Malformed(name, absl::StrCat("shape ", ShapeString(shape), " of ", descr, " needs ",
                                        data_bytes, " data bytes but the file has ", have));
  }
  const auto* begin = reinterpret_cast<const uint8_t*>(bytes.data()) + offset + header_len;
  a.data.assign(begin, begin + data_bytes);
  return a;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open for reading"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return ParseNpy(ss.str(), path);
}

std::string SerializeNpy(const NpyArray& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i) {
    absl::StrAppend(&shape, a.shape[i], a.shape.size() == 1 ? "," : (i + 1 < a.shape.size() ? ", " : ""));
  }
  shape += ")";
  std::string dict = absl::StrCat("{'descr': '", a.DescrString(), "', 'fortran_order': False, 'shape': ",
                                  shape, ", }");
  // Pad with spaces and end with '\n' so the data starts 64-byte aligned.
  size_t prefix = kMagicLen + 2 + 2;
  bool v2 = false;
  if (dict.size() + 1 + prefix + 64 > 65535) {
    v2 = true;
    prefix = kMagicLen + 2 + 4;
  }
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(v2 ? 2 : 1);
  out += static_cast<char>(0);
  const uint32_t len = static_cast<uint32_t>(dict.size());
  out += static_cast<char>(len & 0xFF);
  out += static_cast<char>((len >> 8) & 0xFF);
  if (v2) {
    out += static_cast<char>((len >> 16) & 0xFF);
    out += static_cast<char>((len >> 24) & 0xFF);
  }
  out += dict;
  out.append(reinterpret_cast<const char*>(a.data.data()), a.data.size());
  return out;
}

absl::Status WriteNpyFile(const std::string& path, const NpyArray& array) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  const std::string bytes = SerializeNpy(array);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

// --------------------------------------------------------------- tensors

absl::StatusOr<HostTensor> NpyToTensor(const NpyArray& a, const NpyAccept& accept,
                                       absl::string_view name) {
  const std::string what = accept.what.empty() ? std::string() : absl::StrCat(" for ", accept.what);
  auto wrong = [&]() {
    return absl::InvalidArgumentError(absl::StrCat(name, ": array of ", KindName(a.kind, a.itemsize),
                                                   ShapeString(a.shape), " is not accepted", what,
                                                   "; expected ", AcceptString(accept)));
  };
  const int64_t n = a.num_elements();
  const uint8_t* src = a.data.data();
  if (a.kind == 'f') {
    if (accept.float_as == DType::kInvalid) return wrong();
    auto value = [&](int64_t i) -> double {
      switch (a.itemsize) {
        case 2: return NpyHalfToDouble(LoadLe<uint16_t>(src + 2 * i));
        case 4: return LoadLe<float>(src + 4 * i);
        default: return LoadLe<double>(src + 8 * i);
      }
    };
    HostTensor t(accept.float_as, a.shape);
    if (accept.float_as == DType::kBf16) {
      auto* dst = t.data<uint16_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = NpyDoubleToBf16(value(i), Rounding::kRtne);
    } else if (accept.float_as == DType::kFp32) {
      auto* dst = t.data<float>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(value(i));
    } else if (accept.float_as == DType::kFp64) {
      auto* dst = t.data<double>();
      for (int64_t i = 0; i < n; ++i) dst[i] = value(i);
    } else {
      return absl::InternalError(absl::StrCat("npy: cannot convert floats to ", DTypeName(accept.float_as)));
    }
    return t;
  }
  if (a.kind == 'u') {
    if (accept.uint8_as == DType::kInvalid) return wrong();
    if (accept.uint8_as == DType::kFp4E2M1) {
      if (a.shape.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": packed fp4_e2m1 codes", what, " need at least one dimension (the packed K/2 bytes)"));
      }
      Shape shape = a.shape;
      shape.back() *= 2;
      return HostTensor(TensorDesc{DType::kFp4E2M1, shape}, a.data);
    }
    return HostTensor(TensorDesc{accept.uint8_as, a.shape}, a.data);
  }
  if (a.kind == 'i') {
    if (accept.int_as == DType::kInvalid) return wrong();
    HostTensor t(accept.int_as, a.shape);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = a.itemsize == 4 ? LoadLe<int32_t>(src + 4 * i) : LoadLe<int64_t>(src + 8 * i);
      if (accept.int_as == DType::kInt32) {
        if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
          return absl::InvalidArgumentError(
              absl::StrCat(name, ": element ", i, " = ", v, " does not fit int32", what));
        }
        t.data<int32_t>()[i] = static_cast<int32_t>(v);
      } else {
        t.data<int64_t>()[i] = v;
      }
    }
    return t;
  }
  return wrong();
}

absl::StatusOr<HostTensor> ReadNpyTensor(const std::string& path, const NpyAccept& accept) {
  absl::StatusOr<NpyArray> a = ReadNpyFile(path);
  if (!a.ok()) return a.status();
  return NpyToTensor(*a, accept, path);
}

absl::StatusOr<NpyArray> TensorToNpy(const HostTensor& t) {
  NpyArray a;
  a.shape = t.shape();
  const int64_t n = t.num_elements();
  if (n < 0) return absl::InvalidArgumentError("npy: tensor has an invalid shape");
  if (t.num_bytes() != t.desc().num_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("npy: tensor ", t.desc().DebugString(), " holds ",
                                                   t.num_bytes(), " bytes, not the ",
                                                   t.desc().num_bytes(), " its shape needs"));
  }
  auto raw = [&](char kind, int itemsize) {
    a.kind = kind;
    a.itemsize = itemsize;
    a.data.assign(t.bytes(), t.bytes() + t.num_bytes());
  };
  switch (t.dtype()) {
    case DType::kBf16: {
      a.kind = 'f';
      a.itemsize = 4;
      a.data.resize(static_cast<size_t>(n) * 4);
      for (int64_t i = 0; i < n; ++i) {
        const float f = NpyBf16ToFloat(t.data<uint16_t>()[i]);
        std::memcpy(a.data.data() + 4 * i, &f, 4);
      }
      break;
    }
    case DType::kFp16: raw('f', 2); break;
    case DType::kFp32: raw('f', 4); break;
    case DType::kFp64: raw('f', 8); break;
    case DType::kInt32: raw('i', 4); break;
    case DType::kInt64: raw('i', 8); break;
    case DType::kFp8E4M3Fn:
    case DType::kFp8E4M3Fnuz:
    case DType::kFp8E5M2:
    case DType::kE8M0:
    case DType::kUint8: raw('u', 1); break;
    case DType::kFp4E2M1:
      if (a.shape.empty() || a.shape.back() % 2 != 0) {
        return absl::InvalidArgumentError("npy: packed fp4 tensor needs an even last dimension");
      }
      a.shape.back() /= 2;
      raw('u', 1);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("npy: cannot write dtype ", DTypeName(t.dtype())));
  }
  return a;
}

absl::Status WriteNpyTensor(const std::string& path, const HostTensor& t) {
  absl::StatusOr<NpyArray> a = TensorToNpy(t);
  if (!a.ok()) return absl::Status(a.status().code(), absl::StrCat(path, ": ", a.status().message()));
  return WriteNpyFile(path, *a);
}

}  // namespace kernelserve
