// End-to-end tests: the real client library against a real in-process server
// (CPU backend) on 127.0.0.1:0. Results are checked against the fp64 oracle on
// fresh random inputs.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"
#include "server/server.h"
#include "tests/test_util.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;
using testutil::ExpectBf16MatchesOracle;
using testutil::FreshSeed;

class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.backend = "cpu";
    so.cpu_threads = 2;
    auto server = KernelServer::Start(so);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = Connect(ClientOptions());
  }
  void TearDown() override {
    client_.reset();
    if (server_) server_->Shutdown(absl::Seconds(1));
  }

  std::unique_ptr<Client> Connect(ClientOptions o) {
    o.target = absl::StrCat("127.0.0.1:", server_->port());
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::unique_ptr<KernelServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(E2eTest, DevicesAndHealth) {
  auto devices = client_->Devices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_GE(devices->devices_size(), 1);
  EXPECT_EQ(devices->devices(0).backend(), "cpu");
  EXPECT_EQ(devices->devices(0).state(), v1::HEALTHY);
  EXPECT_FALSE(devices->server_version().empty());
  auto health = client_->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthState::kServing);
}

struct AttnCase {
  int64_t b, hq, hkv, sq, skv, d;
  bool causal;
  Layout layout;
  Rounding rounding;
};

TEST_F(E2eTest, AttentionMatchesOracle) {
  const AttnCase cases[] = {
      {1, 2, 2, 33, 33, 128, false, Layout::kBhsd, Rounding::kRtne},
      {2, 4, 2, 17, 70, 128, true, Layout::kBhsd, Rounding::kRtne},   // GQA, cross, causal
      {1, 2, 1, 64, 40, 64, true, Layout::kBshd, Rounding::kRtz},     // Sq > Skv: empty rows
      {1, 2, 2, 5, 129, 256, false, Layout::kBshd, Rounding::kRtna},
  };
  for (const AttnCase& c : cases) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(absl::StrCat("seed=", seed, " d=", c.d, " causal=", c.causal, " sq=", c.sq, " skv=", c.skv));
    auto shape = [&](int64_t h, int64_t s) {
      return c.layout == Layout::kBhsd ? Shape{c.b, h, s, c.d} : Shape{c.b, s, h, c.d};
    };
    HostTensor q = numerics::GaussianBf16(shape(c.hq, c.sq), seed);
    HostTensor k = numerics::GaussianBf16(shape(c.hkv, c.skv), seed + 1);
    HostTensor v = numerics::GaussianBf16(shape(c.hkv, c.skv), seed + 2, 0.5);
    AttentionArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.causal = c.causal;
    a.layout = c.layout;
    a.rounding = c.rounding;
    a.report_error = true;
    auto r = client_->Attention(a);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->out.dtype(), DType::kBf16);
    ASSERT_EQ(r->out.shape(), q.shape());

    AttentionParams p;
    p.layout = c.layout;
    p.causal = c.causal;
    p.rounding = c.rounding;
    ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
    auto ref = oracle::Attention(p, q, k, v);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ExpectBf16MatchesOracle(r->out, *ref, c.rounding);
    ASSERT_TRUE(r->error.has_value());
    EXPECT_LT(r->error->rel_rms, 4e-3);
    EXPECT_EQ(r->error->nonfinite, 0);
    EXPECT_EQ(r->info.backend, "cpu");
  }
}

TEST_F(E2eTest, ExplicitSoftmaxScaleIsUsed) {
  const uint64_t seed = FreshSeed();
  HostTensor q = numerics::GaussianBf16({1, 1, 8, 64}, seed);
  HostTensor k = numerics::GaussianBf16({1, 1, 24, 64}, seed + 1);
  HostTensor v = numerics::GaussianBf16({1, 1, 24, 64}, seed + 2);
  AttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.softmax_scale = 0.7;
  auto r = client_->Attention(a);
  ASSERT_TRUE(r.ok()) << r.status();
  AttentionParams p;
  p.softmax_scale = 0.7;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
  auto ref = oracle::Attention(p, q, k, v);
  ASSERT_TRUE(ref.ok());
  ExpectBf16MatchesOracle(r->out, *ref, Rounding::kRtne);
}

// A 64 MB tensor through a client whose messages are capped at 4 MB: the
// upload must be chunked and the download streamed.
TEST_F(E2eTest, LargeBufferUploadDownloadRoundTrip) {
  ClientOptions o;
  o.max_message_mb = 4;
  auto client = Connect(o);
  HostTensor big(DType::kBf16, {32, 1024, 1024});  // 64 MiB
  std::mt19937_64 rng(FreshSeed());
  for (int64_t i = 0; i < big.num_bytes() / 8; ++i) {
    const uint64_t x = rng();
    std::memcpy(big.bytes() + 8 * i, &x, 8);
  }
  auto info = client->UploadBuffer(big, "big");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size_bytes(), 64 << 20);
  auto list = client->ListBuffers();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].label(), "big");
  auto back = client->DownloadBuffer(info->id());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape(), big.shape());
  EXPECT_EQ(back->dtype(), DType::kBf16);
  ASSERT_EQ(back->num_bytes(), big.num_bytes());
  EXPECT_EQ(std::memcmp(back->bytes(), big.bytes(), big.num_bytes()), 0);
  ASSERT_TRUE(client->FreeBuffer(info->id()).ok());
  auto gone = client->DownloadBuffer(info->id());
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
}

// Attention whose inputs and output exceed the 4 MB message cap: inputs go up
// as temporary buffers, the output comes back through one, all are freed.
TEST_F(E2eTest, LargeOpInputsAndOutputTravelAsBuffers) {
  ClientOptions o;
  o.max_message_mb = 4;
  auto client = Connect(o);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  HostTensor q = numerics::GaussianBf16({1, 16, 1536, 128}, seed);  // 6 MiB, output likewise
  HostTensor k = numerics::GaussianBf16({1, 16, 16, 128}, seed + 1);
  HostTensor v = numerics::GaussianBf16({1, 16, 16, 128}, seed + 2);
  AttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  auto r = client->Attention(a);
  ASSERT_TRUE(r.ok()) << r.status();
  AttentionParams p;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
  auto ref = oracle::Attention(p, q, k, v);
  ASSERT_TRUE(ref.ok());
  ExpectBf16MatchesOracle(r->out, *ref, Rounding::kRtne);
  auto list = client->ListBuffers();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty()) << "temporary buffers were not freed: " << list->size();
  EXPECT_EQ(client->leaked_temp_buffers(), 0);

  // The same call with automatic upload off hits the message cap: the limit is real.
  ClientOptions inline_only = o;
  inline_only.upload_threshold_bytes = int64_t{1} << 40;
  auto c2 = Connect(inline_only);
  auto too_big = c2->Attention(a);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted) << too_big.status();
  // ... and the next call on that client works.
  AttentionArgs small;
  HostTensor sq = numerics::GaussianBf16({1, 1, 4, 64}, seed + 3);
  small.q = sq;
  small.k = sq;
  small.v = sq;
  EXPECT_TRUE(c2->Attention(small).ok());
}

TEST_F(E2eTest, OutputToBufferThenDownload) {
  const uint64_t seed = FreshSeed();
  HostTensor q = numerics::GaussianBf16({1, 2, 16, 64}, seed);
  AttentionArgs a;
  a.q = q;
  a.k = q;
  a.v = q;
  a.output.to_buffer = true;
  a.output.label = "attn-out";
  auto r = client_->Attention(a);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(r->out_buffer_id.empty());
  EXPECT_EQ(r->out.num_bytes(), 0);
  auto out = client_->DownloadBuffer(r->out_buffer_id);
  ASSERT_TRUE(out.ok()) << out.status();
  AttentionParams p;
  ASSERT_TRUE(p.Validate(q.desc(), q.desc(), q.desc()).ok());
  auto ref = oracle::Attention(p, q, q, q);
  ASSERT_TRUE(ref.ok());
  ExpectBf16MatchesOracle(*out, *ref, Rounding::kRtne);
  // The output buffer can feed the next op.
  AttentionArgs b;
  b.q = TensorArg::Buffer(r->out_buffer_id);
  b.k = q;
  b.v = q;
  auto r2 = client_->Attention(b);
  ASSERT_TRUE(r2.ok()) << r2.status();
  auto ref2 = oracle::Attention(p, *out, q, q);
  ASSERT_TRUE(ref2.ok());
  ExpectBf16MatchesOracle(r2->out, *ref2, Rounding::kRtne);
  auto list = client_->ListBuffers();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].label(), "attn-out");
  EXPECT_TRUE(client_->FreeBuffer(r->out_buffer_id).ok());
}

TEST_F(E2eTest, DeadlineExceededThenNextCallWorks) {
  const uint64_t seed = FreshSeed();
  HostTensor q = numerics::GaussianBf16({1, 8, 1024, 128}, seed);
  CallOptions tight;
  tight.timeout = absl::Milliseconds(2);
  // With host inputs the deadline expires during the automatic upload.
  AttentionArgs a;
  a.q = q;
  a.k = q;
  a.v = q;
  absl::Time start = absl::Now();
  auto r = client_->Attention(a, tight);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // With server-resident inputs it expires while the op waits or runs.
  auto buf = client_->UploadBuffer(q, "q");
  ASSERT_TRUE(buf.ok()) << buf.status();
  a.q = a.k = a.v = TensorArg::Buffer(buf->id());
  start = absl::Now();
  r = client_->Attention(a, tight);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Temporary buffers of the first call were freed despite the deadline.
  auto list = client_->ListBuffers();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].id(), buf->id());
  EXPECT_TRUE(client_->Devices().ok());
  AttentionArgs small;
  HostTensor sq = numerics::GaussianBf16({1, 1, 4, 64}, seed + 1);
  small.q = sq;
  small.k = sq;
  small.v = sq;
  EXPECT_TRUE(client_->Attention(small).ok());
}

TEST_F(E2eTest, BadInputsGiveTheRightCodesAndTheNextCallWorks) {
  const uint64_t seed = FreshSeed();
  HostTensor q = numerics::GaussianBf16({1, 2, 8, 64}, seed);
  HostTensor k = numerics::GaussianBf16({1, 2, 8, 128}, seed + 1);  // head dim mismatch
  AttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = k;
  auto r = client_->Attention(a);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_FALSE(r.status().message().empty());

  // Hq not a multiple of Hkv.
  HostTensor k3 = numerics::GaussianBf16({1, 3, 8, 64}, seed + 2);
  a.k = k3;
  a.v = k3;
  r = client_->Attention(a);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();

  // Wrong dtype: fp32 where bf16 is required.
  HostTensor f32(DType::kFp32, {1, 2, 8, 64});
  a.q = f32;
  a.k = q;
  a.v = q;
  r = client_->Attention(a);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();

  // Unknown buffer.
  a.q = TensorArg::Buffer("no-such-buffer");
  r = client_->Attention(a);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_EQ(client_->DownloadBuffer("no-such-buffer").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->FreeBuffer("no-such-buffer").code(), absl::StatusCode::kNotFound);

  // A tensor whose bytes do not match its shape is refused by the client.
  HostTensor broken(TensorDesc{DType::kBf16, {4}}, std::vector<uint8_t>(3));
  EXPECT_EQ(client_->UploadBuffer(broken).status().code(), absl::StatusCode::kInvalidArgument);

  a.q = q;
  a.k = q;
  a.v = q;
  r = client_->Attention(a);
  ASSERT_TRUE(r.ok()) << r.status();
  AttentionParams p;
  ASSERT_TRUE(p.Validate(q.desc(), q.desc(), q.desc()).ok());
  auto ref = oracle::Attention(p, q, q, q);
  ASSERT_TRUE(ref.ok());
  ExpectBf16MatchesOracle(r->out, *ref, Rounding::kRtne);
}

// Idempotent calls are retried while the server is away; calls that create
// state are not, so nothing is created twice.
TEST_F(E2eTest, RetriesOnlyIdempotentCallsAndNeverDuplicate) {
  const int port = server_->port();
  server_->Shutdown(absl::ZeroDuration());
  server_.reset();
  ClientOptions o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.max_retries = 20;
  o.initial_backoff = absl::Milliseconds(20);
  o.max_backoff = absl::Milliseconds(200);
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok());
  Client& client = **c;

  // Nothing listens: a buffer upload fails at once and is not retried.
  HostTensor t = numerics::GaussianBf16({4, 64}, FreshSeed());
  CallOptions longish;
  longish.timeout = absl::Seconds(20);
  auto up = client.UploadBuffer(t, "once", 0, longish);
  ASSERT_FALSE(up.ok());
  EXPECT_EQ(up.status().code(), absl::StatusCode::kUnavailable) << up.status();
  AttentionArgs a;
  a.q = t;
  a.output.to_buffer = true;
  auto op = client.Attention(a, longish);
  EXPECT_EQ(op.status().code(), absl::StatusCode::kUnavailable) << op.status();

  // Bring a server up on the same port while an idempotent call is retrying.
  std::unique_ptr<KernelServer> later;
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(400));
    ServerOptions so;
    so.listen = absl::StrCat("127.0.0.1:", port);
    so.backend = "cpu";
    so.cpu_threads = 2;
    auto s = KernelServer::Start(so);
    if (s.ok()) later = std::move(*s);
  });
  auto devices = client.Devices(longish);
  starter.join();
  ASSERT_NE(later, nullptr) << "could not restart the server on port " << port;
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_GE(devices->devices_size(), 1);

  // The refused upload and op were not replayed against the new server.
  auto list = client.ListBuffers(longish);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->empty()) << list->size() << " buffers appeared";

  // One successful upload gives exactly one buffer.
  auto up2 = client.UploadBuffer(t, "once");
  ASSERT_TRUE(up2.ok()) << up2.status();
  list = client.ListBuffers();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
  later->Shutdown(absl::ZeroDuration());
}

TEST_F(E2eTest, UnreachableServerIsUnavailableWithinTheDeadline) {
  ClientOptions o;
  o.target = "127.0.0.1:1";  // nothing listens on port 1
  o.default_timeout = absl::Milliseconds(800);
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok());
  const absl::Time start = absl::Now();
  auto d = (*c)->Devices();
  EXPECT_FALSE(d.ok());
  EXPECT_TRUE(d.status().code() == absl::StatusCode::kUnavailable ||
              d.status().code() == absl::StatusCode::kDeadlineExceeded)
      << d.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

}  // namespace
}  // namespace kernelserve
