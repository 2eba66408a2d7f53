// The service itself over loopback (DESIGN §7): the round trip of a small
// call, and buffer upload / download throughput, through the client library
// (kernelserve::Client) as users call it. By default it starts a server in
// this process on 127.0.0.1:0 with the cpu backend (--backend=cuda on a GPU
// node: uploads then land in device memory); --server=HOST:PORT measures a
// running kernelserve instead. Last, DESIGN §7's "a remote attention call on
// server-resident inputs within 2 % of the bare kernel time" (and within
// 20 µs of a ~50 µs kernel): causal attention (B=1, D=128; H=16, S=16384 and
// H=16, S=2048 on a GPU; H=8, S=2048 and H=1, S=256 on the cpu) timed as a
// client call whose inputs and output stay in server buffers, and as the bare
// backend call (a second backend instance in this process, launch +
// synchronize); medians of 10 after 2 warm-ups. With the in-process server,
// each kernel call measured is also split into its phases (the call log's,
// plus receive and return between the client and the handler). Transfers are
// printed next to a bare memcpy of the same bytes in the same run and next to
// a bare TCP stream of them between two threads (the socket's own ceiling),
// over gRPC and, where the server is on this host, through shared memory
// (ClientOptions::shared_memory_transfer_min_bytes), and a
// small kernel call's round trip (p50 / p99) next to DeviceService.List's and
// next to a bare TCP ping-pong between two threads of this process (the host's
// floor for any cross-thread round trip over loopback).
// --cpu_dma_latency_us=N holds the host's CPU wake-up latency request for the
// run, as kernelserve --cpu_dma_latency_us does (server/cpu_latency.h): run
// with and without it to see what idle states cost a call.
// Prints a short markdown table.
//
//   bazel run //bench:loopback_bench -- [--backend=cpu|cuda|auto] [--server=HOST:PORT] [--mib=512]
//                                       [--attn_seq=N] [--attn_heads=N] [--small_attn_seq=N] [--small_attn_heads=N]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "client/client.h"
#include "kernels/api/backend.h"
#include "kernels/backends.h"
#include "kernels/numerics/test_inputs.h"
#include "server/cpu_latency.h"
#include "server/server.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace {

using bench::FlagValue;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr int kAttnWarmup = 2, kAttnReps = 10;

// Where a kernel call's time goes, from the in-process server's call log
// (server/call_log.h): while a PhaseCapture lives, the log's debug lines go to
// a ring buffer instead of the console; Row() pairs each kernel call's line
// with the client's own start and end times of that call (same process, same
// clock), so the time before the handler starts (client serialization,
// loopback, gRPC dispatch: "receive") and after it returns (response
// serialization, loopback, client parse: "return") are split out too. Debug
// logging costs a few µs per call, so the timed loops run without it.
class PhaseCapture {
 public:
  PhaseCapture()
      : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(8192)), saved_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("phases", sink_);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~PhaseCapture() { spdlog::set_default_logger(saved_); }

  void Client(absl::Time start, absl::Time end) { client_.push_back({start, end}); }

  // "receive 41.0 | resolve 3.1 | queue 0.5 | ... | reply 2.0 | return 30.2 µs" (medians), or why not.
  std::string Row() {
    std::vector<std::pair<std::string, std::vector<double>>> phases = {{"receive", {}}};
    std::vector<double> back;
    size_t call = 0;
    for (const auto& m : sink_->last_raw()) {
      const absl::string_view text(m.payload.data(), m.payload.size());
      const size_t at = text.find(" phases_ms: ");
      double ms = 0;
      const size_t ms_at = text.find(" ms=");
      if (at == absl::string_view::npos || ms_at == absl::string_view::npos || call >= client_.size() ||
          !absl::SimpleAtod(text.substr(ms_at + 4, text.find(' ', ms_at + 4) - ms_at - 4), &ms)) {
        continue;
      }
      const absl::Time end = absl::FromChrono(m.time);
      phases[0].second.push_back(absl::ToDoubleMicroseconds(end - absl::Milliseconds(ms) - client_[call].start));
      for (absl::string_view kv : absl::StrSplit(text.substr(at + 12), ' ', absl::SkipEmpty())) {
        const size_t eq = kv.find('=');
        double v = 0;
        if (eq == absl::string_view::npos || !absl::SimpleAtod(kv.substr(eq + 1), &v)) continue;
        const std::string name(kv.substr(0, eq));
        auto it = std::find_if(phases.begin(), phases.end(), [&](const auto& p) { return p.first == name; });
        if (it == phases.end()) it = phases.insert(phases.end(), {name, {}});
        it->second.push_back(1e3 * v);
      }
      back.push_back(absl::ToDoubleMicroseconds(client_[call].end - end));
      ++call;
    }
    if (call != client_.size()) {
      return "not available: " + std::to_string(call) + " call log lines for " + std::to_string(client_.size()) +
             " calls (--server runs no in-process server)";
    }
    phases.push_back({"return", back});
    std::string out;
    for (const auto& [name, v] : phases) {
      if (!out.empty()) out += " | ";
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%s %.1f", name.c_str(), v.empty() ? 0.0 : Median(v));
      out += buf;
    }
    return out + " µs";
  }

 private:
  struct Span {
    absl::Time start, end;
  };
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> saved_;
  std::vector<Span> client_;
};

// Median wall time (ms) of the bare backend call: inputs already in device
// memory, launch and synchronize, as the server's worker runs it.
absl::StatusOr<double> BareAttentionMs(const std::string& backend_name, const AttentionParams& p,
                                       const HostTensor& q, const HostTensor& k, const HostTensor& v) {
  auto backend = CreateBackend(backend_name, BackendOptions());
  if (!backend.ok()) return backend.status();
  Backend& be = **backend;
  std::vector<std::unique_ptr<DeviceMemory>> mem;
  auto upload = [&](const HostTensor& t) -> absl::StatusOr<TensorView> {
    auto m = be.Allocate(0, static_cast<size_t>(t.num_bytes()));
    if (!m.ok()) return m.status();
    absl::Status st = be.CopyToDevice(0, (*m)->data(), t.bytes(), static_cast<size_t>(t.num_bytes()));
    if (!st.ok()) return st;
    TensorView view{t.desc(), (*m)->data()};
    mem.push_back(std::move(*m));
    return view;
  };
  auto dq = upload(q), dk = upload(k), dv = upload(v);
  if (!dq.ok()) return dq.status();
  if (!dk.ok()) return dk.status();
  if (!dv.ok()) return dv.status();
  const TensorDesc od = p.OutputDesc();
  auto om = be.Allocate(0, static_cast<size_t>(od.num_bytes()));
  if (!om.ok()) return om.status();
  TensorView out{od, (*om)->data()};
  std::vector<double> ms;
  for (int i = 0; i < kAttnWarmup + kAttnReps; ++i) {
    const absl::Time t0 = absl::Now();
    absl::Status st = be.Attention(0, p, *dq, *dk, *dv, out);
    if (st.ok()) st = be.Synchronize(0);
    if (!st.ok()) return st;
    if (i >= kAttnWarmup) ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  return Median(ms);
}

struct AttentionShape {
  int64_t heads, seq;
  const char* target;  // DESIGN §7's bound for this size
};

// A causal attention B=1 H S D=128 as a client call whose inputs and output
// stay in server buffers, then (in-process server only) its phases and the
// bare backend call on the same inputs.
// The round trip of 32 bytes over a loopback TCP connection between this
// thread and one that echoes them (both blocked in read, TCP_NODELAY): what
// any RPC between two threads pays at least on this host; p50 / p99 in µs of
// 2000 after 200 warm-ups, or {-1, -1} if a socket call fails.
// Two ends of one TCP connection over 127.0.0.1 (TCP_NODELAY), or false if
// a socket call fails.
bool LoopbackTcpPair(int* a, int* b) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  *a = *b = -1;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && listen(listener, 1) == 0 &&
      (*a = socket(AF_INET, SOCK_STREAM, 0)) >= 0 &&
      connect(*a, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    *b = accept(listener, nullptr, nullptr);  // the connection is queued already
  }
  close(listener);
  if (*b < 0) {
    if (*a >= 0) close(*a);
    return false;
  }
  const int one = 1;
  setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return true;
}

std::pair<double, double> TcpPingPongUs() {
  int c = -1, e = -1;
  if (!LoopbackTcpPair(&c, &e)) return {-1, -1};
  std::thread echo([e] {
    char b[64];
    for (ssize_t n; (n = read(e, b, sizeof b)) > 0;) {
      if (write(e, b, static_cast<size_t>(n)) != n) break;
    }
  });
  std::vector<double> us;
  char b[32] = {};
  for (int i = 0; i < 2200; ++i) {
    const absl::Time t0 = absl::Now();
    if (write(c, b, sizeof b) != static_cast<ssize_t>(sizeof b)) break;
    size_t got = 0;
    for (ssize_t n; got < sizeof b && (n = read(c, b + got, sizeof b - got)) > 0;) got += static_cast<size_t>(n);
    if (got != sizeof b) break;
    if (i >= 200) us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  shutdown(c, SHUT_RDWR);  // the echo thread's read returns
  echo.join();
  close(c);
  close(e);
  if (us.size() < 2000) return {-1, -1};
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

// `n` bytes from one thread of this process to another over a loopback TCP
// connection, into `dst` (warm: its pages written before): the socket's own
// ceiling for a transfer over the stream. GB/s, or -1 if a socket call fails.
double TcpThroughputGBps(const uint8_t* bytes, int64_t n, uint8_t* dst) {
  int tx = -1, rx = -1;
  if (!LoopbackTcpPair(&tx, &rx)) return -1;
  int64_t got = 0;
  const absl::Time t0 = absl::Now();
  std::thread reader([&] {
    for (ssize_t k; got < n && (k = read(rx, dst + got, static_cast<size_t>(n - got))) > 0;) got += k;
  });
  for (int64_t sent = 0; sent < n;) {
    const ssize_t k = write(tx, bytes + sent, static_cast<size_t>(std::min<int64_t>(n - sent, 4 << 20)));
    if (k <= 0) break;
    sent += k;
  }
  reader.join();
  const double s = absl::ToDoubleSeconds(absl::Now() - t0);
  close(tx);
  close(rx);
  return got == n ? static_cast<double>(n) / 1e9 / s : -1;
}

int RemoteVsBare(Client& client, Client& session, Client& ring, bool in_process, const std::string& backend,
                 const AttentionShape& s) {
  const Shape shape = {1, s.heads, s.seq, 128};
  const HostTensor q = numerics::GaussianBf16(shape, 11), k = numerics::GaussianBf16(shape, 12),
                   v = numerics::GaussianBf16(shape, 13);
  AttentionArgs a;
  std::vector<std::string> ids;
  for (const HostTensor* t : {&q, &k, &v}) {
    auto info = client.UploadBuffer(*t, "loopback_bench attention");
    if (!info.ok()) {
      std::fprintf(stderr, "upload: %s\n", info.status().ToString().c_str());
      return 1;
    }
    ids.push_back(info->id());
  }
  a.q = TensorArg::Buffer(ids[0]);
  a.k = TensorArg::Buffer(ids[1]);
  a.v = TensorArg::Buffer(ids[2]);
  a.causal = true;
  a.output.to_buffer = true;
  std::vector<double> remote_ms, session_ms, ring_ms, queue_ms, run_ms;
  std::unique_ptr<PhaseCapture> phases;
  for (int i = 0; i < kAttnWarmup + 2 * kAttnReps; ++i) {
    // The second round of kAttnReps calls logs their phases (not timed: debug logging costs a little).
    if (i == kAttnWarmup + kAttnReps && in_process) phases = std::make_unique<PhaseCapture>();
    const absl::Time t0 = absl::Now();
    auto r = client.Attention(a);
    const absl::Time t1 = absl::Now();
    if (!r.ok()) {
      std::fprintf(stderr, "attention: %s\n", r.status().ToString().c_str());
      return 1;
    }
    if (phases) phases->Client(t0, t1);
    (void)client.FreeBuffer(r->out_buffer_id);  // logs no phases: not in the capture's rows
    if (i >= kAttnWarmup && i < kAttnWarmup + kAttnReps) {
      remote_ms.push_back(absl::ToDoubleMilliseconds(t1 - t0));
      queue_ms.push_back(r->info.queue_ms);
      run_ms.push_back(r->info.run_ms);
    }
    // The same call as a message on the session client's stream, and
    // through the ring client's shared memory, after each unary one.
    if (i < kAttnWarmup + kAttnReps) {
      for (auto [other, how, ms] : {std::make_tuple(&session, "over a session", &session_ms),
                                    std::make_tuple(&ring, "through the ring", &ring_ms)}) {
        const absl::Time s0 = absl::Now();
        auto rs = other->Attention(a);
        const absl::Time s1 = absl::Now();
        if (!rs.ok()) {
          std::fprintf(stderr, "attention %s: %s\n", how, rs.status().ToString().c_str());
          return 1;
        }
        (void)client.FreeBuffer(rs->out_buffer_id);
        if (i >= kAttnWarmup) ms->push_back(absl::ToDoubleMilliseconds(s1 - s0));
      }
    }
  }
  for (const std::string& id : ids) (void)client.FreeBuffer(id);
  const double remote = Median(remote_ms), over_session = Median(session_ms), over_ring = Median(ring_ms),
               queue = Median(queue_ms), run = Median(run_ms);
  const long long H = static_cast<long long>(s.heads), S = static_cast<long long>(s.seq);
  std::printf("| causal attention B=1 H=%lld S=%lld D=128, inputs and output in server buffers: client "
              "call / server queue_ms / run_ms (median of %d) | %.3f / %.3f / %.3f ms |\n",
              H, S, kAttnReps, remote, queue, run);
  std::printf("| the same call over a session (ClientOptions::kernel_session; alternated with the unary "
              "calls, median of %d) | %.3f ms |\n",
              kAttnReps, over_session);
  std::printf("| the same call through a shared-memory ring (kernel_session_ring_bytes%s; alternated, median of "
              "%d) | %.3f ms |\n",
              ring.kernel_session_ring_attached() ? "" : "; NOT attached: over the stream", kAttnReps, over_ring);
  if (!in_process) return 0;
  std::printf("| its phases, median of %d (call log; receive/return: client to handler and back) | %s |\n",
              kAttnReps, phases->Row().c_str());
  phases.reset();
  AttentionParams p;
  p.causal = true;
  if (!p.Validate(q.desc(), k.desc(), v.desc()).ok()) return 1;
  auto bare = BareAttentionMs(backend, p, q, k, v);
  if (!bare.ok()) {
    std::fprintf(stderr, "bare kernel: %s\n", bare.status().ToString().c_str());
    return 1;
  }
  std::printf("| the same on the bare backend (launch + synchronize, median of %d) | %.3f ms |\n", kAttnReps, *bare);
  std::printf("| remote call over the bare kernel (DESIGN §7: %s): unary / session / ring | %+.1f %%, %+.1f µs / "
              "%+.1f %%, %+.1f µs / %+.1f %%, %+.1f µs |\n",
              s.target, 100.0 * (remote / *bare - 1.0), 1e3 * (remote - *bare), 100.0 * (over_session / *bare - 1.0),
              1e3 * (over_session - *bare), 100.0 * (over_ring / *bare - 1.0), 1e3 * (over_ring - *bare));
  return 0;
}

int Main(int argc, char** argv) {
  std::string target;
  std::string backend = "cpu";
  int64_t mib = 512, attn_seq = 0, attn_heads = 0, small_seq = 0, small_heads = 0;
  int cpu_latency_us = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];  // FlagValue points into it
    if (const char* v = FlagValue(arg, "--server=")) {
      target = v;
    } else if (const char* v = FlagValue(arg, "--backend=")) {
      backend = v;
    } else if (const char* v = FlagValue(arg, "--attn_seq=")) {
      if (!absl::SimpleAtoi(v, &attn_seq) || attn_seq < 1) {
        std::fprintf(stderr, "--attn_seq: expected a positive integer, got %s\n", v);
        return 2;
      }
    } else if (const char* v = FlagValue(arg, "--attn_heads=")) {
      if (!absl::SimpleAtoi(v, &attn_heads) || attn_heads < 1) {
        std::fprintf(stderr, "--attn_heads: expected a positive integer, got %s\n", v);
        return 2;
      }
    } else if (const char* v = FlagValue(arg, "--small_attn_seq=")) {
      if (!absl::SimpleAtoi(v, &small_seq) || small_seq < 1) {
        std::fprintf(stderr, "--small_attn_seq: expected a positive integer, got %s\n", v);
        return 2;
      }
    } else if (const char* v = FlagValue(arg, "--small_attn_heads=")) {
      if (!absl::SimpleAtoi(v, &small_heads) || small_heads < 1) {
        std::fprintf(stderr, "--small_attn_heads: expected a positive integer, got %s\n", v);
        return 2;
      }
    } else if (const char* v = FlagValue(arg, "--cpu_dma_latency_us=")) {
      if (!absl::SimpleAtoi(v, &cpu_latency_us) || cpu_latency_us < -1) {
        std::fprintf(stderr, "--cpu_dma_latency_us: expected -1 (off) or a latency of 0 µs or more, got %s\n", v);
        return 2;
      }
    } else if (const char* v = FlagValue(arg, "--mib=")) {
      if (!absl::SimpleAtoi(v, &mib) || mib < 1) {
        std::fprintf(stderr, "--mib: expected a positive integer, got %s\n", v);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: loopback_bench [--backend=cpu|cuda|auto] [--server=HOST:PORT] [--mib=N] [--attn_seq=N] "
                   "[--attn_heads=N] [--small_attn_seq=N] [--small_attn_heads=N] [--cpu_dma_latency_us=N]\n");
      return 2;
    }
  }
  TuneHostAllocator();  // as kernelserve's main does
  spdlog::set_level(spdlog::level::warn);
  // For this whole process (client and in-process server) and the host, as
  // kernelserve --cpu_dma_latency_us holds it for a server and its host.
  std::unique_ptr<CpuLatencyRequest> cpu_latency;
  if (cpu_latency_us >= 0) {
    auto held = CpuLatencyRequest::Hold(cpu_latency_us);
    if (!held.ok()) {
      std::fprintf(stderr, "--cpu_dma_latency_us: %s\n", held.status().ToString().c_str());
      return 1;
    }
    cpu_latency = std::make_unique<CpuLatencyRequest>(std::move(*held));
    std::printf("(holding a CPU wake-up latency request of %d µs)\n", cpu_latency_us);
  }
  std::unique_ptr<KernelServer> server;
  if (target.empty()) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.backend = backend;
    auto started = KernelServer::Start(options);
    if (!started.ok()) {
      std::fprintf(stderr, "server: %s\n", started.status().ToString().c_str());
      return 1;
    }
    server = std::move(*started);
    target = "127.0.0.1:" + std::to_string(server->port());
  }

  ClientOptions copts;
  copts.target = target;
  copts.default_timeout = absl::Seconds(120);
  auto client = Client::Connect(copts);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  ClientOptions session_opts = copts;
  session_opts.kernel_session = true;
  auto session = Client::Connect(session_opts);
  if (!session.ok()) {
    std::fprintf(stderr, "connect: %s\n", session.status().ToString().c_str());
    return 1;
  }
  ClientOptions ring_opts = session_opts;
  ring_opts.kernel_session_ring_bytes = 1 << 20;
  auto ring = Client::Connect(ring_opts);
  if (!ring.ok()) {
    std::fprintf(stderr, "connect: %s\n", ring.status().ToString().c_str());
    return 1;
  }
  std::vector<double> us;
  for (int i = 0; i < 2000; ++i) {
    const absl::Time t0 = absl::Now();
    auto d = (*client)->Devices();
    if (!d.ok()) {
      std::fprintf(stderr, "devices: %s\n", d.status().ToString().c_str());
      return 1;
    }
    if (i >= 200) us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  std::sort(us.begin(), us.end());
  const std::string where = server ? "in-process server, " + backend + " backend" : target;
  std::printf("| measurement (%s) | value |\n| --- | --- |\n", where.c_str());
  std::printf("| DeviceService.List round trip p50 / p99 | %.1f / %.1f us |\n", us[us.size() / 2],
              us[us.size() * 99 / 100]);
  const auto [tcp_p50, tcp_p99] = TcpPingPongUs();
  std::printf("| bare TCP ping-pong between two threads of this process, 32 B, p50 / p99 | %.1f / %.1f us |\n",
              tcp_p50, tcp_p99);
  // A small kernel call with inline tensors (what DESIGN §7's "small call" is
  // for a user): attention B=1 H=1 S=16 D=64, 2 KiB per tensor.
  {
    const Shape small = {1, 1, 16, 64};
    const HostTensor sq = numerics::GaussianBf16(small, 21);
    AttentionArgs sa;
    sa.q = sq;
    sa.k = sq;
    sa.v = sq;
    // Each unary call is followed by the same call as a message on the
    // session client's stream and through the ring client's shared memory,
    // so all three see the same load.
    std::vector<double> call_us, run_us, queue_us, session_us, ring_us;
    for (int i = 0; i < 1200; ++i) {
      const absl::Time t0 = absl::Now();
      auto r = (*client)->Attention(sa);
      const absl::Time t1 = absl::Now();
      auto rs = (*session)->Attention(sa);
      const absl::Time t2 = absl::Now();
      auto rr = (*ring)->Attention(sa);
      const absl::Time t3 = absl::Now();
      if (!r.ok() || !rs.ok() || !rr.ok()) {
        std::fprintf(stderr, "small attention: %s\n",
                     (!r.ok() ? r.status() : !rs.ok() ? rs.status() : rr.status()).ToString().c_str());
        return 1;
      }
      if (rr->out.num_bytes() != r->out.num_bytes() ||
          std::memcmp(rr->out.bytes(), r->out.bytes(), static_cast<size_t>(r->out.num_bytes())) != 0) {
        std::fprintf(stderr, "small attention over the ring: not the unary call's bytes\n");
        return 1;
      }
      if (i >= 200) {
        call_us.push_back(absl::ToDoubleMicroseconds(t1 - t0));
        session_us.push_back(absl::ToDoubleMicroseconds(t2 - t1));
        ring_us.push_back(absl::ToDoubleMicroseconds(t3 - t2));
        run_us.push_back(1e3 * r->info.run_ms);
        queue_us.push_back(1e3 * r->info.queue_ms);
      }
    }
    std::sort(call_us.begin(), call_us.end());
    std::sort(session_us.begin(), session_us.end());
    std::sort(ring_us.begin(), ring_us.end());
    std::printf("| the same small call through a shared-memory ring (ClientOptions::kernel_session_ring_bytes%s), p50 / p99 | %.1f / %.1f us |\n",
                (*ring)->kernel_session_ring_attached() ? "" : "; NOT attached: these went over the stream",
                ring_us[ring_us.size() / 2], ring_us[ring_us.size() * 99 / 100]);
    std::printf("| small call (attention 1x1x16x64 inline) round trip p50 / p99; server run p50 | %.1f / %.1f us; "
                "%.1f us |\n",
                call_us[call_us.size() / 2], call_us[call_us.size() * 99 / 100], Median(run_us));
    std::printf("| the same small call over a session (ClientOptions::kernel_session), p50 / p99 | %.1f / %.1f us |\n",
                session_us[session_us.size() / 2], session_us[session_us.size() * 99 / 100]);
    std::printf("| the same call's server queue p50 (submit to start on the device) | %.1f us |\n", Median(queue_us));
    if (server != nullptr) {
      PhaseCapture phases;
      for (int i = 0; i < 200; ++i) {
        const absl::Time t0 = absl::Now();
        if (!(*client)->Attention(sa).ok()) return 1;
        phases.Client(t0, absl::Now());
      }
      std::printf("| the same call's phases, median of 200 (call log; receive/return: client to handler and back) "
                  "| %s |\n",
                  phases.Row().c_str());
    }
  }

  HostTensor t(DType::kUint8, {mib << 20});
  std::mt19937_64 rng(1);
  for (int64_t i = 0; i + 8 <= t.num_bytes(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(t.bytes() + i, &r, 8);
  }
  const double gb = static_cast<double>(t.num_bytes()) / 1e9;
  // The same bytes through a bare memcpy in this process: into a warm
  // destination (the copy ceiling the transfers are compared with) and into a
  // fresh one (new[], 4 KiB page faults included, as a download's new host
  // tensor has them; the CPU backend's buffers use huge pages and fault less,
  // so an upload can beat this one).
  double memcpy_fresh = 0, memcpy_warm = 0;
  {
    std::vector<double> fresh, warm;
    for (int rep = 0; rep < 3; ++rep) {
      const absl::Time t0 = absl::Now();
      std::unique_ptr<uint8_t[]> dst(new uint8_t[t.num_bytes()]);
      std::memcpy(dst.get(), t.bytes(), t.num_bytes());
      fresh.push_back(gb / absl::ToDoubleSeconds(absl::Now() - t0));
      const absl::Time t1 = absl::Now();
      std::memcpy(dst.get(), t.bytes(), t.num_bytes());
      warm.push_back(gb / absl::ToDoubleSeconds(absl::Now() - t1));
      if (dst[t.num_bytes() - 1] != t.bytes()[t.num_bytes() - 1]) return 1;  // keeps the copies
    }
    memcpy_fresh = Median(fresh);
    memcpy_warm = Median(warm);
    std::printf("| bare memcpy of the same %lld MiB, fresh / warm destination (median of 3) | %.2f / %.2f GB/s |\n",
                static_cast<long long>(mib), memcpy_fresh, memcpy_warm);
  }
  {
    std::vector<double> tcp;
    std::vector<uint8_t> dst(t.bytes(), t.bytes() + t.num_bytes());  // written: warm
    for (int rep = 0; rep < 3; ++rep) tcp.push_back(TcpThroughputGBps(t.bytes(), t.num_bytes(), dst.data()));
    std::sort(tcp.begin(), tcp.end());
    std::printf("| bare TCP stream of the same %lld MiB between two threads of this process, warm destination, "
                "median / best of 3 | %.2f / %.2f GB/s (%.0f %%) |\n",
                static_cast<long long>(mib), tcp[1], tcp[2], 100 * tcp[1] / memcpy_warm);
  }
  // Each chunk size three times (a fresh buffer each time, as a client's
  // upload gets); the median and the best of the three are printed. Over the
  // stream: shared memory off.
  // Three uploads and downloads of `t` by `c` (a fresh buffer each time, as
  // a client's upload gets; download checked against it), GB/s sorted.
  std::vector<double> up, down;
  auto transfers = [&](Client& c) -> bool {
    up.clear();
    down.clear();
    for (int rep = 0; rep < 3; ++rep) {
      const absl::Time t0 = absl::Now();
      auto info = c.UploadBuffer(t, "loopback_bench");
      if (!info.ok()) {
        std::fprintf(stderr, "upload: %s\n", info.status().ToString().c_str());
        return false;
      }
      up.push_back(gb / absl::ToDoubleSeconds(absl::Now() - t0));
      const absl::Time t1 = absl::Now();
      auto back = c.DownloadBuffer(info->id());
      if (!back.ok()) {
        std::fprintf(stderr, "download: %s\n", back.status().ToString().c_str());
        return false;
      }
      down.push_back(gb / absl::ToDoubleSeconds(absl::Now() - t1));
      if (back->num_bytes() != t.num_bytes() || std::memcmp(back->bytes(), t.bytes(), t.num_bytes()) != 0) {
        std::fprintf(stderr, "download: the bytes differ from the upload\n");
        return false;
      }
      (void)c.FreeBuffer(info->id());
    }
    std::sort(up.begin(), up.end());
    std::sort(down.begin(), down.end());
    return true;
  };
  auto print_rows = [&](const std::string& how) {
    for (const auto& [what, v] : {std::make_pair("upload", &up), std::make_pair("download", &down)}) {
      std::printf("| %s %lld MiB, %s, median / best of 3 (median / warm memcpy) | %.2f / %.2f GB/s (%.0f %%) |\n",
                  what, static_cast<long long>(mib), how.c_str(), (*v)[1], (*v)[2], 100 * (*v)[1] / memcpy_warm);
    }
  };
  ClientOptions stream_opts = copts;
  stream_opts.shared_memory_transfer_min_bytes = 0;  // over the stream
  for (int64_t chunk : {1 << 20, 4 << 20, 16 << 20}) {
    stream_opts.chunk_bytes = chunk;
    auto c = Client::Connect(stream_opts);
    if (!c.ok() || !transfers(**c)) return 1;
    print_rows(absl::StrCat(chunk >> 20, " MiB chunks"));
  }
  // Through shared memory (ClientOptions::shared_memory_transfer_min_bytes),
  // when the server is on this host: a first transfer that creates and
  // faults in the client's region, then three that reuse it.
  {
    auto c = Client::Connect(copts);
    if (!c.ok()) return 1;
    const absl::Time t0 = absl::Now();
    auto first = (*c)->UploadBuffer(t, "loopback_bench");
    if (!first.ok()) return 1;
    const double first_up = gb / absl::ToDoubleSeconds(absl::Now() - t0);
    (void)(*c)->FreeBuffer(first->id());
    if (!(*c)->shared_memory_transfers()) {
      std::printf("| shared memory | refused by the server (not on this host, or another user) |\n");
    } else {
      if (!transfers(**c)) return 1;
      std::printf("| upload %lld MiB through shared memory, the first (a fresh region) | %.2f GB/s |\n",
                  static_cast<long long>(mib), first_up);
      print_rows("through shared memory (shared_memory_transfer_min_bytes)");
    }
  }

  // A remote attention call on server-resident inputs against the bare kernel:
  // DESIGN §7's 16K attention (within 2 %), and a ~50 µs kernel on a GPU
  // (within 20 µs).
  auto devices = (*client)->Devices();
  if (!devices.ok() || devices->devices_size() == 0) return 1;
  const std::string device_backend = devices->devices(0).backend();
  const bool gpu = device_backend != "cpu";
  const AttentionShape big = {attn_heads > 0 ? attn_heads : gpu ? 16 : 8, attn_seq > 0 ? attn_seq : gpu ? 16384 : 2048,
                              "within 2 %"};
  const AttentionShape small = {small_heads > 0 ? small_heads : gpu ? 16 : 1,
                                small_seq > 0 ? small_seq : gpu ? 2048 : 256, "within 20 µs for a ~50 µs kernel"};
  for (const AttentionShape& shape : {big, small}) {
    if (RemoteVsBare(**client, **session, **ring, server != nullptr, device_backend, shape) != 0) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::Main(argc, argv); }
