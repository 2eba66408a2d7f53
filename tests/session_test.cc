// KernelService.Session end to end: a real server (CPU backend) on
// 127.0.0.1:0, the real client with ClientOptions::kernel_session, and the
// raw stream where the client would hide what is checked (order, ids, bytes
// that do not decode). A session's calls must give what the unary calls give
// (same bytes, same errors), a failed call must leave the session serving,
// and a session must not hold up a shutdown.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/shm_ring.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/impl/codegen/sync_stream.h"
#include "gtest/gtest.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "server/security/tokens.h"
#include "server/server.h"
#include "tests/test_util.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;
using testutil::FreshSeed;

class SessionTest : public ::testing::Test {
 protected:
  void StartServer(const std::string& tokens_file = "") {
    ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.backend = "cpu";
    so.cpu_threads = 2;
    so.security.tokens_file = tokens_file;
    auto server = KernelServer::Start(so);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  void SetUp() override { StartServer(); }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(1));
  }
  std::string Target() const { return absl::StrCat("127.0.0.1:", server_->port()); }
  std::unique_ptr<Client> Connect(bool session, const std::string& token = "") {
    ClientOptions o;
    o.target = Target();
    o.kernel_session = session;
    o.bearer_token = token;
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::unique_ptr<KernelServer> server_;
};

AttentionArgs SmallAttention(const HostTensor& q, const HostTensor& k, const HostTensor& v) {
  AttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.causal = true;
  return a;
}

TEST_F(SessionTest, CallsGiveTheUnaryCallsBytesAndMeetTheOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  auto unary = Connect(false);
  auto session = Connect(true);
  ASSERT_TRUE(unary && session);
  const HostTensor q = numerics::GaussianBf16({1, 2, 37, 64}, seed);
  const HostTensor k = numerics::GaussianBf16({1, 2, 37, 64}, seed + 1);
  const HostTensor v = numerics::GaussianBf16({1, 2, 37, 64}, seed + 2);
  const AttentionArgs a = SmallAttention(q, k, v);
  auto u = unary->Attention(a);
  ASSERT_TRUE(u.ok()) << u.status();
  for (int i = 0; i < 3; ++i) {  // one stream carries them all
    auto s = session->Attention(a);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->out.num_bytes(), u->out.num_bytes());
    EXPECT_EQ(std::memcmp(s->out.bytes(), u->out.bytes(), u->out.num_bytes()), 0) << "call " << i;
    EXPECT_EQ(s->info.backend, "cpu");
  }
  EXPECT_EQ(session->kernel_sessions_opened(), 1);
  EXPECT_EQ(unary->kernel_sessions_opened(), 0);
  AttentionParams p;
  p.causal = true;
  ASSERT_TRUE(p.Validate(q.desc(), k.desc(), v.desc()).ok());
  auto ref = oracle::Attention(p, q, k, v);
  ASSERT_TRUE(ref.ok());
  testutil::ExpectBf16MatchesOracle(u->out, *ref, Rounding::kRtne);

  // Inputs in server buffers, output kept in one: the ids work across the two paths.
  std::vector<std::string> ids;
  for (const HostTensor* t : {&q, &k, &v}) {
    auto info = unary->UploadBuffer(*t);
    ASSERT_TRUE(info.ok()) << info.status();
    ids.push_back(info->id());
  }
  AttentionArgs b;
  b.q = TensorArg::Buffer(ids[0]);
  b.k = TensorArg::Buffer(ids[1]);
  b.v = TensorArg::Buffer(ids[2]);
  b.causal = true;
  b.output.to_buffer = true;
  auto sb = session->Attention(b);
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto back = unary->DownloadBuffer(sb->out_buffer_id);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::memcmp(back->bytes(), u->out.bytes(), u->out.num_bytes()), 0);
  for (const std::string& id : ids) EXPECT_TRUE(unary->FreeBuffer(id).ok());
  EXPECT_TRUE(unary->FreeBuffer(sb->out_buffer_id).ok());
}

// The calls through a shared-memory ring give the unary calls' bytes, a failed call its own status, a response over
// the ring's capacity RESOURCE_EXHAUSTED naming the way out, and dropping the
// client ends the server's side.
TEST_F(SessionTest, RingCallsGiveTheUnaryCallsBytes) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed=", seed));
  auto unary = Connect(false);
  ClientOptions o;
  o.target = Target();
  o.kernel_session = true;
  o.kernel_session_ring_bytes = 64 << 10;
  auto ring = Client::Connect(o);
  ASSERT_TRUE(unary && ring.ok()) << ring.status();
  const HostTensor q = numerics::GaussianBf16({1, 2, 37, 64}, seed);
  const HostTensor k = numerics::GaussianBf16({1, 2, 37, 64}, seed + 1);
  const AttentionArgs a = SmallAttention(q, k, k);
  auto u = unary->Attention(a);
  ASSERT_TRUE(u.ok()) << u.status();
  for (int i = 0; i < 3; ++i) {
    auto r = (*ring)->Attention(a);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->out.num_bytes(), u->out.num_bytes());
    EXPECT_EQ(std::memcmp(r->out.bytes(), u->out.bytes(), u->out.num_bytes()), 0) << "call " << i;
  }
  const HostTensor k32 = numerics::GaussianBf16({1, 2, 37, 32}, seed);
  auto bad = (*ring)->Attention(SmallAttention(q, k32, k32));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("k.shape[3]"), std::string::npos) << bad.status();
  // 2 x 2 x 2048 x 64 bf16 out = 1 MiB: over the 64 KiB ring.
  const HostTensor big = numerics::GaussianBf16({1, 2, 2048, 64}, seed + 3);
  AttentionArgs large = SmallAttention(big, big, big);
  auto over = (*ring)->Attention(large);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  auto after = (*ring)->Attention(a);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*ring)->kernel_sessions_opened(), 1);
  EXPECT_TRUE((*ring)->kernel_session_ring_attached());
  ring->reset();  // the server's loop ends with the client
}

TEST_F(SessionTest, AFailedCallGetsItsOwnStatusAndTheSessionGoesOn) {
  auto unary = Connect(false);
  auto session = Connect(true);
  ASSERT_TRUE(unary && session);
  const uint64_t seed = FreshSeed();
  const HostTensor q = numerics::GaussianBf16({1, 2, 16, 64}, seed);
  const HostTensor k_bad = numerics::GaussianBf16({1, 2, 16, 32}, seed + 1);  // head dim differs from q's
  const AttentionArgs bad = SmallAttention(q, k_bad, q);
  auto su = unary->Attention(bad);
  auto ss = session->Attention(bad);
  ASSERT_FALSE(su.ok());
  ASSERT_FALSE(ss.ok());
  EXPECT_EQ(ss.status().code(), absl::StatusCode::kInvalidArgument) << ss.status();
  EXPECT_EQ(ss.status(), su.status()) << "the session's error is the unary call's";
  AttentionArgs missing = SmallAttention(q, q, q);
  missing.k = TensorArg::Buffer("buf-does-not-exist");
  auto sm = session->Attention(missing);
  EXPECT_EQ(sm.status().code(), absl::StatusCode::kNotFound) << sm.status();
  EXPECT_THAT(std::string(sm.status().message()), HasSubstr("k"));
  auto ok = session->Attention(SmallAttention(q, q, q));
  EXPECT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(session->kernel_sessions_opened(), 1) << "a failed call must not end the session";
  auto buffers = unary->ListBuffers();
  ASSERT_TRUE(buffers.ok());
  EXPECT_TRUE(buffers->empty()) << "a failed call left a buffer behind";
}

// The raw stream: requests written ahead are answered in order with their
// ids; a request with no call is INVALID_ARGUMENT for itself alone.
TEST_F(SessionTest, RawStreamAnswersInOrderWithTheirIds) {
  auto channel = grpc::CreateChannel(Target(), grpc::InsecureChannelCredentials());
  auto stub = v1::KernelService::NewStub(channel);
  grpc::ClientContext ctx;
  auto rw = stub->Session(&ctx);
  const HostTensor q = numerics::GaussianBf16({1, 1, 8, 64}, FreshSeed());
  v1::SessionRequest good;
  for (v1::TensorRef* r : {good.mutable_attention()->mutable_q(), good.mutable_attention()->mutable_k(),
                           good.mutable_attention()->mutable_v()}) {
    *r->mutable_tensor() = ToProtoTensor(q);
  }
  const uint64_t ids[] = {7, 8, 9, 3};
  for (uint64_t id : ids) {
    v1::SessionRequest r = id == 8 ? v1::SessionRequest() : good;
    r.set_id(id);
    ASSERT_TRUE(rw->Write(r));
  }
  for (uint64_t id : ids) {
    v1::SessionResponse resp;
    ASSERT_TRUE(rw->Read(&resp));
    EXPECT_EQ(resp.id(), id);
    if (id == 8) {
      EXPECT_EQ(resp.code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
      EXPECT_THAT(resp.message(), HasSubstr("call: none set"));
      EXPECT_EQ(resp.result_case(), v1::SessionResponse::RESULT_NOT_SET);
    } else {
      EXPECT_EQ(resp.code(), 0) << resp.message();
      ASSERT_TRUE(resp.has_attention());
      EXPECT_EQ(resp.attention().out().tensor().data().size(), static_cast<size_t>(q.num_bytes()));
    }
  }
  ASSERT_TRUE(rw->WritesDone());
  EXPECT_TRUE(rw->Finish().ok());
}

// The server attaches only the caller's own ring (its owner the
// uid of the process at the other end of the loopback socket) and a missing
// one is refused; either way the session goes on over the stream.
TEST_F(SessionTest, RingsOfOthersOrNoneAreRefusedAndTheStreamGoesOn) {
  auto channel = grpc::CreateChannel(Target(), grpc::InsecureChannelCredentials());
  auto stub = v1::KernelService::NewStub(channel);
  grpc::ClientContext ctx;
  auto rw = stub->Session(&ctx);
  auto attach = [&](const std::string& name, uint64_t id) {
    v1::SessionRequest r;
    r.set_id(id);
    r.mutable_attach_ring()->set_shm_name(name);
    EXPECT_TRUE(rw->Write(r));
    v1::SessionResponse resp;
    EXPECT_TRUE(rw->Read(&resp));
    EXPECT_EQ(resp.id(), id);
    return resp;
  };
  v1::SessionResponse missing = attach("/kernelserve-ring-none", 1);
  EXPECT_EQ(missing.code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION)) << missing.message();
  EXPECT_THAT(missing.message(), HasSubstr("attach_ring.shm_name: shm_open /kernelserve-ring-none"));
  if (getuid() == 0) {
    absl::StatusOr<ShmRing> other = ShmRing::Create(4096);
    ASSERT_TRUE(other.ok()) << other.status();
    ASSERT_EQ(chown(("/dev/shm" + other->name()).c_str(), 12345, 12345), 0);
    v1::SessionResponse denied = attach(other->name(), 2);
    EXPECT_EQ(denied.code(), static_cast<int>(grpc::StatusCode::PERMISSION_DENIED)) << denied.message();
    EXPECT_THAT(denied.message(), HasSubstr("belongs to uid 12345, the caller is uid 0"));
  }
  const HostTensor q = numerics::GaussianBf16({1, 1, 8, 64}, FreshSeed());
  v1::SessionRequest call;
  call.set_id(3);
  for (v1::TensorRef* r : {call.mutable_attention()->mutable_q(), call.mutable_attention()->mutable_k(),
                           call.mutable_attention()->mutable_v()}) {
    *r->mutable_tensor() = ToProtoTensor(q);
  }
  ASSERT_TRUE(rw->Write(call));
  v1::SessionResponse resp;
  ASSERT_TRUE(rw->Read(&resp));
  EXPECT_EQ(resp.code(), 0) << resp.message();
  EXPECT_TRUE(resp.has_attention());
  ASSERT_TRUE(rw->WritesDone());
  EXPECT_TRUE(rw->Finish().ok());
}

// Bytes that are not a SessionRequest end the session with INVALID_ARGUMENT
// (not an OK end that looks like the client closing it).
TEST_F(SessionTest, UndecodableRequestEndsTheSessionWithInvalidArgument) {
  auto channel = grpc::CreateChannel(Target(), grpc::InsecureChannelCredentials());
  grpc::internal::RpcMethod method("/kernelserve.v1.KernelService/Session",
                                   grpc::internal::RpcMethod::BIDI_STREAMING);
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> rw(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(channel.get(), method,
                                                                                          &ctx));
  const std::string garbage = "\xff\xff\xff\xff\x0f not a protobuf";
  grpc::Slice slice(garbage);
  ASSERT_TRUE(rw->Write(grpc::ByteBuffer(&slice, 1)));
  rw->WritesDone();
  grpc::ByteBuffer ignored;
  while (rw->Read(&ignored)) {
  }
  const grpc::Status s = rw->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("not a valid protobuf SessionRequest"));
}

TEST_F(SessionTest, ADeadlineEndsTheStreamAndTheNextCallOpensAnother) {
  auto session = Connect(true);
  ASSERT_TRUE(session);
  const uint64_t seed = FreshSeed();
  const HostTensor q = numerics::GaussianBf16({1, 1, 8, 64}, seed + 1);
  ASSERT_TRUE(session->Attention(SmallAttention(q, q, q)).ok());  // the stream is open
  // Tens of milliseconds on the CPU backend, inline (under the client's 1 MiB
  // upload threshold), so the 1 ms deadline passes while the session waits
  // for the answer.
  const HostTensor big = numerics::GaussianBf16({1, 4, 1024, 64}, seed);
  CallOptions quick;
  quick.timeout = absl::Milliseconds(1);
  AttentionArgs a = SmallAttention(big, big, big);
  a.causal = false;
  auto late = session->Attention(a, quick);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  auto next = session->Attention(SmallAttention(q, q, q));
  EXPECT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(session->kernel_sessions_opened(), 2);
}

TEST_F(SessionTest, ConcurrentCallersOnOneClientTakeTurns) {
  auto session = Connect(true);
  auto unary = Connect(false);
  ASSERT_TRUE(session && unary);
  const uint64_t seed = FreshSeed();
  std::vector<HostTensor> qs;
  std::vector<HostTensor> want;
  for (int t = 0; t < 4; ++t) {
    qs.push_back(numerics::GaussianBf16({1, 1, 8 + t, 64}, seed + t));
    auto r = unary->Attention(SmallAttention(qs.back(), qs.back(), qs.back()));
    ASSERT_TRUE(r.ok()) << r.status();
    want.push_back(std::move(r->out));
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        auto r = session->Attention(SmallAttention(qs[t], qs[t], qs[t]));
        if (!r.ok() || r->out.num_bytes() != want[t].num_bytes() ||
            std::memcmp(r->out.bytes(), want[t].bytes(), want[t].num_bytes()) != 0) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0) << "a caller got another caller's answer or an error";
  EXPECT_EQ(session->kernel_sessions_opened(), 1);
}

// An idle session waits in its read; the shutdown's drain must not wait for
// it, and the session's next call gets a status, not a hang.
TEST_F(SessionTest, ShutdownEndsIdleSessionsPromptly) {
  auto session = Connect(true);
  ASSERT_TRUE(session);
  const HostTensor q = numerics::GaussianBf16({1, 1, 8, 64}, FreshSeed());
  ASSERT_TRUE(session->Attention(SmallAttention(q, q, q)).ok());
  const absl::Time t0 = absl::Now();
  server_->Shutdown(absl::Seconds(20));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5)) << "the shutdown waited for an idle session";
  CallOptions c;
  c.timeout = absl::Seconds(5);
  auto after = session->Attention(SmallAttention(q, q, q), c);
  EXPECT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status();
  server_.reset();
}

// A session on a ring ends with the server's shutdown as promptly, and its
// next call says the server is gone.
TEST_F(SessionTest, ShutdownEndsIdleRingSessionsPromptly) {
  ClientOptions o;
  o.target = Target();
  o.kernel_session = true;
  o.kernel_session_ring_bytes = 64 << 10;
  auto ring = Client::Connect(o);
  ASSERT_TRUE(ring.ok()) << ring.status();
  const HostTensor q = numerics::GaussianBf16({1, 1, 8, 64}, FreshSeed());
  ASSERT_TRUE((*ring)->Attention(SmallAttention(q, q, q)).ok());
  ASSERT_TRUE((*ring)->kernel_session_ring_attached());
  const absl::Time t0 = absl::Now();
  server_->Shutdown(absl::Seconds(20));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5)) << "the shutdown waited for an idle ring session";
  CallOptions c;
  c.timeout = absl::Seconds(5);
  auto after = (*ring)->Attention(SmallAttention(q, q, q), c);
  EXPECT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status();
  server_.reset();
}

// A server that dies mid-call (SIGKILL: no word on the ring) must not leave
// the ring's caller waiting out its deadline: the stream's end says so.
TEST(SessionRingCrashTest, ACallWhoseServerDiesIsUnavailableAtOnce) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string log = absl::StrCat(tmp ? tmp : "/tmp", "/ring_crash_server.log");
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::string bin = absl::StrCat(srcdir ? srcdir : ".", "/kernelserve/server/kernelserve");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    // One CPU thread: the call below then takes seconds on any machine.
    execl(bin.c_str(), bin.c_str(), "--listen=127.0.0.1:0", "--backend=cpu", "--cpu_threads=1",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int port = 0;
  const std::regex re("listening on port ([0-9]+)");
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::smatch m;
    if (std::regex_search(text, m, re)) port = std::stoi(m[1]);
    if (port == 0) absl::SleepFor(absl::Milliseconds(50));
  }
  if (port == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    FAIL() << "kernelserve did not start";
  }
  ClientOptions o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.kernel_session = true;
  o.kernel_session_ring_bytes = 64 << 10;
  o.default_timeout = absl::Seconds(120);
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  const uint64_t seed = FreshSeed();
  const HostTensor small = numerics::GaussianBf16({1, 1, 8, 64}, seed);
  ASSERT_TRUE((*client)->Attention(SmallAttention(small, small, small)).ok());
  ASSERT_TRUE((*client)->kernel_session_ring_attached());
  // 16 heads x 4096 x 4096 x 128, not causal: ~137 GFLOP on one CPU thread.
  const HostTensor big = numerics::GaussianBf16({1, 16, 4096, 128}, seed + 1);
  auto id = (*client)->UploadBuffer(big);
  ASSERT_TRUE(id.ok()) << id.status();
  AttentionArgs a;
  a.q = TensorArg::Buffer(id->id());
  a.k = TensorArg::Buffer(id->id());
  a.v = TensorArg::Buffer(id->id());
  a.output.to_buffer = true;
  absl::Time killed_at = absl::InfiniteFuture();
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(300));
    killed_at = absl::Now();
    kill(pid, SIGKILL);
  });
  auto r = (*client)->Attention(a);
  const absl::Time done = absl::Now();
  killer.join();
  waitpid(pid, nullptr, 0);
  ASSERT_FALSE(r.ok()) << "the call ended before the server was killed: make it longer";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_LT(done - killed_at, absl::Seconds(5)) << "the caller waited " << (done - killed_at) << " on a dead server";
}

// With metrics on, each request of a session counts under its own method,
// as the unary call would, and the session itself once when it ends.
TEST(SessionMetricsTest, EachRequestCountsUnderItsMethod) {
  ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.backend = "cpu";
  so.metrics_listen = "127.0.0.1:0";
  auto server = KernelServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  {
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", (*server)->port());
    o.kernel_session = true;
    auto client = Client::Connect(o);
    ASSERT_TRUE(client.ok());
    const HostTensor q = numerics::GaussianBf16({1, 1, 8, 64}, FreshSeed());
    ASSERT_TRUE((*client)->Attention(SmallAttention(q, q, q)).ok());
    ASSERT_TRUE((*client)->Attention(SmallAttention(q, q, q)).ok());
    AttentionArgs bad = SmallAttention(q, q, q);
    bad.v = TensorArg::Buffer("buf-missing");
    ASSERT_FALSE((*client)->Attention(bad).ok());
  }  // the client closes its session
  const std::string text = testutil::ScrapeMetrics((*server)->metrics_port());
  const std::string calls = "kernelserve_grpc_calls_total{service=\"kernelserve.v1.KernelService\",method=";
  for (const std::string& want : {calls + "\"Attention\",code=\"OK\"} 2\n", calls + "\"Attention\",code=\"NOT_FOUND\"} 1\n"}) {
    EXPECT_THAT(text, HasSubstr(want));
  }
  (*server)->Shutdown(absl::Seconds(1));
  EXPECT_THAT(testutil::ScrapeMetrics((*server)->metrics_port()), HasSubstr("method=\"Session\""));
}

class SessionAuthTest : public SessionTest {
 protected:
  void SetUp() override {
    const std::string path = absl::StrCat(::testing::TempDir(), "/session_tokens");
    std::ofstream out(path);
    out << security::TokenFileLine("alice", "alice-token", false) << "\n"
        << security::TokenFileLine("bob", "bob-token", false) << "\n";
    out.close();
    StartServer(path);
  }
};

TEST_F(SessionAuthTest, TokensAndTenantsAsForUnaryCalls) {
  const HostTensor q = numerics::GaussianBf16({1, 1, 8, 64}, FreshSeed());
  auto anonymous = Connect(true);
  ASSERT_TRUE(anonymous);
  auto refused = anonymous->Attention(SmallAttention(q, q, q));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();

  auto alice = Connect(false, "alice-token");
  auto bob = Connect(true, "bob-token");
  ASSERT_TRUE(alice && bob);
  auto info = alice->UploadBuffer(q);
  ASSERT_TRUE(info.ok()) << info.status();
  AttentionArgs a = SmallAttention(q, q, q);
  a.k = TensorArg::Buffer(info->id());
  auto other = bob->Attention(a);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound) << "bob's session reached alice's buffer";
  auto own = bob->Attention(SmallAttention(q, q, q));
  EXPECT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(bob->kernel_sessions_opened(), 1);
}

}  // namespace
}  // namespace kernelserve
