#include "common/grpc_wire.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernelserve/v1/tensor.pb.h"

namespace kernelserve {
namespace wire {
namespace {

namespace pb = ::kernelserve::v1;

// `bytes` split into slices at `cuts`, as a transport may deliver them.
grpc::ByteBuffer Split(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  cuts.push_back(bytes.size());
  for (size_t c : cuts) {
    slices.emplace_back(bytes.data() + at, c - at);
    at = c;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

std::string Join(const std::vector<absl::string_view>& pieces) {
  std::string out;
  for (absl::string_view p : pieces) out.append(p.data(), p.size());
  return out;
}

pb::UploadChunk SampleChunk(size_t n) {
  pb::UploadChunk c;
  c.mutable_header()->set_dtype(pb::DType(1));
  c.mutable_header()->add_shape(3);
  c.mutable_header()->add_shape(300);
  c.mutable_header()->set_label("label");
  std::string data(n, '\0');
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(i * 7 + 1);
  c.set_data(data);
  return c;
}

TEST(WireMessage, ReadsWhatProtobufWroteAcrossEverySliceBoundary) {
  const pb::UploadChunk c = SampleChunk(300);
  const std::string bytes = c.SerializeAsString();
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    WireMessage m;
    ASSERT_TRUE(m.Parse(Split(bytes, {cut}), "chunk").ok()) << cut;
    pb::UploadHeader h;
    ASSERT_TRUE(h.ParseFromString(m.Concatenated(1)));
    EXPECT_EQ(h.SerializeAsString(), c.header().SerializeAsString());
    EXPECT_EQ(Join(m.Bytes(2)), c.data()) << cut;
    EXPECT_EQ(m.BytesSize(2), 300);
  }
}

TEST(WireMessage, EmptyAndAbsentFields) {
  WireMessage m;
  ASSERT_TRUE(m.Parse(grpc::ByteBuffer(), "chunk").ok());
  EXPECT_FALSE(m.Has(1));
  EXPECT_TRUE(m.Bytes(2).empty());
  EXPECT_EQ(m.Varint(2), 0u);
}

TEST(WireMessage, RepeatedFieldsFollowProtobuf) {
  pb::DownloadChunk a, b;
  a.set_offset(5);
  a.set_data("first");
  a.mutable_info()->set_id("x");
  b.set_offset(9);
  b.set_data("second");
  b.mutable_info()->add_shape(4);
  const std::string bytes = a.SerializeAsString() + b.SerializeAsString();
  pb::DownloadChunk merged;
  ASSERT_TRUE(merged.ParseFromString(bytes));
  WireMessage m;
  ASSERT_TRUE(m.Parse(Split(bytes, {3, 11}), "chunk").ok());
  EXPECT_EQ(m.Varint(2), static_cast<uint64_t>(merged.offset()));
  EXPECT_EQ(Join(m.Bytes(3)), merged.data());
  pb::BufferInfo info;
  ASSERT_TRUE(info.ParseFromString(m.Concatenated(1)));
  EXPECT_EQ(info.SerializeAsString(), merged.info().SerializeAsString());
}

TEST(WireMessage, SkipsUnknownFields) {
  pb::DownloadChunk c;
  c.set_offset(7);
  c.set_data("abc");
  std::string bytes = c.SerializeAsString();
  bytes += std::string("\x28\x96\x01", 3);          // field 5, varint
  bytes += std::string("\x31") + std::string(8, 'f');  // field 6, fixed64
  bytes += std::string("\x3d") + std::string(4, 'g');  // field 7, fixed32
  WireMessage m;
  ASSERT_TRUE(m.Parse(Split(bytes, {1}), "chunk").ok());
  EXPECT_EQ(m.Varint(2), 7u);
  EXPECT_EQ(Join(m.Bytes(3)), "abc");
}

TEST(WireMessage, MalformedBytesGetAStatusNamingTheMessage) {
  const std::string good = SampleChunk(20).SerializeAsString();
  const std::vector<std::string> bad = {
      good.substr(0, good.size() - 1),     // data claims more than remains
      std::string("\x12\xff", 2),          // truncated length
      std::string("\x08\xff\xff", 3),      // truncated varint
      std::string("\x00\x01", 2),          // field number 0
      std::string("\x0b", 1),              // wire type 3 (group)
      std::string("\x12\x05" "ab", 4),     // 5 bytes claimed, 2 present
  };
  for (const std::string& b : bad) {
    pb::UploadChunk check;
    EXPECT_FALSE(check.ParseFromString(b));
    WireMessage m;
    absl::Status s = m.Parse(Split(b, {1}), "message 3 is not an UploadChunk");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("message 3 is not an UploadChunk ("), std::string::npos) << s;
  }
}

TEST(WithBytesField, WritesExactlyWhatProtobufWrites) {
  for (size_t n : {0, 1, 127, 128, 300, 70000}) {
    pb::UploadChunk c = SampleChunk(n);
    std::string header;
    AppendLengthPrefix(1, c.header().ByteSizeLong(), &header);
    header += c.header().SerializeAsString();
    const grpc::ByteBuffer b = WithBytesField(header, 2, grpc::Slice(c.data()));
    EXPECT_EQ(Flatten(b), c.SerializeAsString()) << n;
    pb::UploadChunk no_header;
    no_header.set_data(c.data());
    EXPECT_EQ(Flatten(WithBytesField("", 2, grpc::Slice(c.data()))), no_header.SerializeAsString()) << n;
  }
}

TEST(WithBytesField, PayloadIsReferencedNotCopied) {
  std::string payload(1000, 'p');
  int released = 0;
  {
    grpc::Slice s(payload.data(), payload.size(), [](void* p) { ++*static_cast<int*>(p); }, &released);
    const grpc::ByteBuffer b = WithBytesField("", 3, std::move(s));
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(b.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), payload.data());
  }
  EXPECT_EQ(released, 1);
}

}  // namespace
}  // namespace wire
}  // namespace kernelserve
