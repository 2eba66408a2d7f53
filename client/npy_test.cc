#include "client/npy.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

// A .npy file built by hand the way numpy.save writes it (v1.0, 64-byte aligned).
std::string HandNpy(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(header.size());
  out += static_cast<char>(len & 0xFF);
  out += static_cast<char>(len >> 8);
  if (major != 1) {
    out += static_cast<char>(len >> 16);
    out += static_cast<char>(len >> 24);
  }
  return out + header + data;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Reference bf16 rounding by exhaustive neighbour search: the nearest of the
// two bf16 values around x (ties to the even mantissa). Independent of the
// code under test's arithmetic.
uint16_t ReferenceBf16(double x) {
  if (std::isnan(x)) return 0x7FFF;
  const float f = static_cast<float>(x);  // only to find the neighbourhood
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t base = static_cast<uint16_t>(bits >> 16);
  uint16_t best = base;
  double best_err = std::numeric_limits<double>::infinity();
  for (int delta = -2; delta <= 2; ++delta) {
    const uint16_t cand = static_cast<uint16_t>(base + delta);
    if ((cand & 0x7F80) == 0x7F80 && (cand & 0x7F)) continue;  // NaN
    if (((cand ^ base) & 0x8000) != 0) continue;                // sign flip
    const double v = NpyBf16ToFloat(cand);
    const double err = std::fabs(v - x);
    if (err < best_err || (err == best_err && (cand & 1) == 0)) {
      best = cand;
      best_err = err;
    }
  }
  return best;
}

TEST(NpyTest, Float32RoundTripThroughFile) {
  NpyArray a;
  a.kind = 'f';
  a.itemsize = 4;
  a.shape = {2, 3, 5};
  std::vector<float> v(30);
  for (int i = 0; i < 30; ++i) v[i] = 0.25f * i - 3.0f;
  a.data.assign(reinterpret_cast<uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(v.data()) + 120);
  const std::string path = TempPath("rt.npy");
  ASSERT_TRUE(WriteNpyFile(path, a).ok());
  absl::StatusOr<NpyArray> b = ReadNpyFile(path);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->kind, 'f');
  EXPECT_EQ(b->itemsize, 4);
  EXPECT_EQ(b->shape, a.shape);
  EXPECT_EQ(b->data, a.data);
}

TEST(NpyTest, SerializedHeaderIsAlignedAndParsesBack) {
  for (const Shape& shape : {Shape{}, Shape{7}, Shape{1, 1, 1, 1}, Shape{3, 0}}) {
    NpyArray a;
    a.kind = 'i';
    a.itemsize = 8;
    a.shape = shape;
    a.data.assign(static_cast<size_t>(NumElements(shape)) * 8, 0x11);
    const std::string s = SerializeNpy(a);
    const uint16_t hlen = static_cast<uint8_t>(s[8]) | (static_cast<uint8_t>(s[9]) << 8);
    EXPECT_EQ((10 + hlen) % 64, 0u);
    EXPECT_EQ(s[10 + hlen - 1], '\n');
    absl::StatusOr<NpyArray> b = ParseNpy(s, "x.npy");
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->shape, shape);
    EXPECT_EQ(b->data, a.data);
  }
}

TEST(NpyTest, ReadsNumpyStyleHeadersV1V2) {
  std::vector<int32_t> v = {1, -2, 3, 4, 5, 6};
  for (int major : {1, 2}) {
    const std::string file =
        HandNpy("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", Bytes(v), major);
    absl::StatusOr<NpyArray> a = ParseNpy(file, "idx.npy");
    ASSERT_TRUE(a.ok()) << a.status();
    NpyAccept acc;
    acc.int_as = DType::kInt32;
    absl::StatusOr<HostTensor> t = NpyToTensor(*a, acc, "idx.npy");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->dtype(), DType::kInt32);
    EXPECT_EQ(t->shape(), (Shape{2, 3}));
    EXPECT_EQ(t->data<int32_t>()[1], -2);
  }
  // Scalar and 1-d shapes, double-quoted keys, no trailing comma.
  const std::string scalar = HandNpy("{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": ()}",
                                     Bytes(std::vector<double>{2.5}));
  absl::StatusOr<NpyArray> s = ParseNpy(scalar, "s.npy");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->num_elements(), 1);
}

TEST(NpyTest, FloatsRoundToBf16WithRtneOnce) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<double> v;
  for (int i = 0; i < 20000; ++i) v.push_back(normal(rng) * std::ldexp(1.0, static_cast<int>(rng() % 40) - 20));
  // Exact ties between two bf16 values and values just past them: a double
  // rounding through fp32 would get the latter wrong.
  v.push_back(1.0 + std::ldexp(1.0, -8));                        // tie -> 1.0 (even)
  v.push_back(1.0 + 3 * std::ldexp(1.0, -8));                    // tie -> up (even)
  v.push_back(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40));  // just above the tie -> up
  v.push_back(std::ldexp(1.0, -133) * 0.5);                       // half the smallest subnormal -> 0
  v.push_back(std::ldexp(1.0, -133) * 0.75);
  v.push_back(3.5e38);                                            // overflows -> inf
  v.push_back(-0.0);
  const std::string file = HandNpy(
      absl::StrCat("{'descr': '<f8', 'fortran_order': False, 'shape': (", v.size(), ",), }"), Bytes(v));
  absl::StatusOr<NpyArray> a = ParseNpy(file, "q.npy");
  ASSERT_TRUE(a.ok()) << a.status();
  NpyAccept acc;
  acc.float_as = DType::kBf16;
  absl::StatusOr<HostTensor> t = NpyToTensor(*a, acc, "q.npy");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->dtype(), DType::kBf16);
  const uint16_t* b = t->data<uint16_t>();
  for (size_t i = 0; i + 2 < v.size(); ++i) {
    ASSERT_EQ(b[i], ReferenceBf16(v[i])) << "value " << v[i] << " index " << i;
  }
  EXPECT_EQ(b[v.size() - 7 + 0], 0x3F80);  // 1 + 2^-8 -> 1.0
  EXPECT_EQ(b[v.size() - 7 + 1], 0x3F82);
  EXPECT_EQ(b[v.size() - 7 + 2], 0x3F81);
  EXPECT_EQ(b[v.size() - 7 + 3], 0x0000);
  EXPECT_EQ(b[v.size() - 7 + 4], 0x0001);
  EXPECT_EQ(b[v.size() - 2], 0x7F80);
  EXPECT_EQ(b[v.size() - 1], 0x8000);
  EXPECT_EQ(NpyDoubleToBf16(std::nan("")), 0x7FFF);
  EXPECT_EQ(NpyDoubleToBf16(3.5e38, Rounding::kRtz), 0x7F7F);
  EXPECT_EQ(NpyDoubleToBf16(-1.0 - std::ldexp(1.0, -8), Rounding::kRtna), 0xBF81);
}

TEST(NpyTest, Float16AndFloat32Inputs) {
  // float16 1.0, -2.0, 65504, smallest subnormal.
  std::vector<uint16_t> h = {0x3C00, 0xC000, 0x7BFF, 0x0001};
  absl::StatusOr<NpyArray> a =
      ParseNpy(HandNpy("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", Bytes(h)), "h.npy");
  ASSERT_TRUE(a.ok()) << a.status();
  NpyAccept acc;
  acc.float_as = DType::kFp32;
  absl::StatusOr<HostTensor> t = NpyToTensor(*a, acc, "h.npy");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data<float>()[0], 1.0f);
  EXPECT_EQ(t->data<float>()[1], -2.0f);
  EXPECT_EQ(t->data<float>()[2], 65504.0f);
  EXPECT_EQ(t->data<float>()[3], std::ldexp(1.0f, -24));
}

TEST(NpyTest, Uint8CodesAndPackedFp4) {
  std::vector<uint8_t> codes(2 * 3 * 16);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7);
  const std::string file = HandNpy("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 16), }", Bytes(codes));
  absl::StatusOr<NpyArray> a = ParseNpy(file, "w13.npy");
  ASSERT_TRUE(a.ok()) << a.status();
  NpyAccept fp4;
  fp4.uint8_as = DType::kFp4E2M1;
  absl::StatusOr<HostTensor> t = NpyToTensor(*a, fp4, "w13.npy");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->dtype(), DType::kFp4E2M1);
  EXPECT_EQ(t->shape(), (Shape{2, 3, 32}));
  EXPECT_EQ(t->num_bytes(), 96);
  EXPECT_EQ(std::memcmp(t->bytes(), codes.data(), codes.size()), 0);
  // And back: the packed bytes come out as uint8 [.., K/2].
  absl::StatusOr<NpyArray> back = TensorToNpy(*t);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->shape, (Shape{2, 3, 16}));
  EXPECT_EQ(back->DescrString(), "|u1");

  NpyAccept fp8;
  fp8.uint8_as = DType::kFp8E4M3Fnuz;
  t = NpyToTensor(*a, fp8, "kv.npy");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->dtype(), DType::kFp8E4M3Fnuz);
  EXPECT_EQ(t->shape(), (Shape{2, 3, 16}));
}

TEST(NpyTest, Bf16OutputIsFloat32WithExactValues) {
  HostTensor t(DType::kBf16, {3});
  t.data<uint16_t>()[0] = 0x3F81;  // 1.0078125
  t.data<uint16_t>()[1] = 0xC2F7;  // -123.5
  t.data<uint16_t>()[2] = 0x7FFF;  // NaN
  const std::string path = TempPath("out.npy");
  ASSERT_TRUE(WriteNpyTensor(path, t).ok());
  absl::StatusOr<NpyArray> a = ReadNpyFile(path);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->DescrString(), "<f4");
  const float* f = reinterpret_cast<const float*>(a->data.data());
  EXPECT_EQ(f[0], 1.0078125f);
  EXPECT_EQ(f[1], -123.5f);
  EXPECT_TRUE(std::isnan(f[2]));
  // Reading it back as bf16 gives the same bits.
  NpyAccept acc;
  acc.float_as = DType::kBf16;
  absl::StatusOr<HostTensor> back = NpyToTensor(*a, acc, path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->storage(), t.storage());
}

TEST(NpyTest, WrongDtypeNamesFileAndExpectation) {
  std::vector<float> v(4, 1.0f);
  absl::StatusOr<NpyArray> a =
      ParseNpy(HandNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", Bytes(v)), "ids.npy");
  ASSERT_TRUE(a.ok());
  NpyAccept acc;
  acc.int_as = DType::kInt32;
  acc.what = "topk_ids";
  absl::StatusOr<HostTensor> t = NpyToTensor(*a, acc, "ids.npy");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("ids.npy"));
  EXPECT_THAT(t.status().message(), HasSubstr("float32"));
  EXPECT_THAT(t.status().message(), HasSubstr("topk_ids"));
  EXPECT_THAT(t.status().message(), HasSubstr("int32/int64"));

  // int64 out of int32 range.
  std::vector<int64_t> big = {1, int64_t{1} << 40};
  a = ParseNpy(HandNpy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", Bytes(big)), "b.npy");
  ASSERT_TRUE(a.ok());
  t = NpyToTensor(*a, acc, "b.npy");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("does not fit int32"));

  // Unsupported numpy types.
  for (const char* descr : {"|b1", "<u2", "<c8", "|i1", "<U3"}) {
    absl::StatusOr<NpyArray> bad = ParseNpy(
        HandNpy(absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (0,), }"), ""), "t.npy");
    ASSERT_FALSE(bad.ok()) << descr;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bad.status().message(), HasSubstr("t.npy"));
    EXPECT_THAT(bad.status().message(), HasSubstr("unsupported dtype"));
  }
}

TEST(NpyTest, FortranOrderAndBigEndianAreClearErrors) {
  std::vector<float> v(6, 1.0f);
  absl::StatusOr<NpyArray> a =
      ParseNpy(HandNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", Bytes(v)), "f.npy");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("f.npy"));
  EXPECT_THAT(a.status().message(), HasSubstr("fortran_order"));
  a = ParseNpy(HandNpy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", Bytes(v)), "be.npy");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("big-endian"));
}

TEST(NpyTest, MalformedFiles) {
  std::vector<float> v(6, 1.0f);
  const std::string good = HandNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", Bytes(v));
  ASSERT_TRUE(ParseNpy(good, "g.npy").ok());
  struct Case {
    std::string bytes;
    std::string expect;
  };
  std::string bad_version = good;
  bad_version[6] = 9;
  const Case cases[] = {
      {"", "magic"},
      {"PK\x03\x04 not numpy at all", "magic"},
      {bad_version, "version"},
      {good.substr(0, 20), "truncated header"},
      {good.substr(0, good.size() - 1), "needs 24 data bytes"},
      {good + "x", "needs 24 data bytes"},
      {HandNpy("{'descr': '<f4', 'shape': (2, 3), }", Bytes(v)), "lacks"},
      {HandNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", Bytes(v)), "dimension"},
      {HandNpy("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", Bytes(v)), "tuple"},
      {HandNpy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }", Bytes(v)), "fortran_order"},
      {HandNpy("'descr': '<f4'", Bytes(v)), "'{'"},
      {HandNpy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", Bytes(v)), "structured"},
      {HandNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", Bytes(v)), "unexpected"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<NpyArray> a = ParseNpy(c.bytes, "m.npy");
    ASSERT_FALSE(a.ok()) << c.expect;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << c.expect;
    EXPECT_THAT(a.status().message(), HasSubstr("m.npy")) << c.expect;
    EXPECT_THAT(a.status().message(), HasSubstr(c.expect));
  }
  absl::StatusOr<NpyArray> missing = ReadNpyFile(TempPath("does_not_exist.npy"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("does_not_exist.npy"));
}

}  // namespace
}  // namespace kernelserve
