// The kernelserve binary as a subprocess: --config applied before the command
// line, SIGTERM drains a running call (its buffer result still downloadable,
// new work refused) and exits 0, and the backends it was built with are
// reported (a missing GPU backend fails to start, saying why).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/client_context.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "local_config_cuda/config.h"
#include "local_config_hip/config.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "server/cpu_latency.h"
#include "server/security/test_certs.h"
#include "server/security/tls.h"
#include "server/test_util.h"

namespace kernelserve {
namespace {

namespace pb = ::kernelserve::v1;
using ::kernelserve::testing::Connect;
using ::kernelserve::testing::Download;
using ::kernelserve::testing::HealthCheck;
using ::kernelserve::testing::RandomBf16;
using ::kernelserve::testing::Upload;
using ::kernelserve::testing::WaitQueueDepth;

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// `stderr_path`: where the child's stderr goes (empty: inherited).
pid_t Spawn(const std::vector<std::string>& args, const std::string& stderr_path = "") {
  pid_t pid = fork();
  if (pid == 0) {
    if (!stderr_path.empty()) {
      const int fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

std::string TmpFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

const char kBinary[] = "server/kernelserve";

// Waits until the server answers DeviceService.List.
bool WaitReady(pb::DeviceService::Stub* devices, pb::ListDevicesResponse* resp) {
  for (int i = 0; i < 200; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    if (devices->List(&ctx, pb::ListDevicesRequest(), resp).ok()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

TEST(MainTest, ConfigFileThenCommandLineAndSigtermDrains) {
  const int port = FreePort();
  const std::string config = TmpFile("ks.conf",
                                     "# kernelserve config\n"
                                     "backend=cpu\n"
                                     "--queue_capacity=3\n"
                                     "\n"
                                     "log_level=debug\n"
                                     "max_message_mb=8\n");
  const pid_t pid = Spawn({kBinary, "--config=" + config, "--listen=127.0.0.1:" + std::to_string(port),
                           "--max_message_mb=16", "--shutdown_grace=20s"});
  ASSERT_GT(pid, 0);
  auto channel = Connect(port);
  auto devices = pb::DeviceService::NewStub(channel);
  auto buffers = pb::BufferService::NewStub(channel);
  auto kernels = pb::KernelService::NewStub(channel);
  pb::ListDevicesResponse list;
  ASSERT_TRUE(WaitReady(devices.get(), &list));
  ASSERT_EQ(list.devices_size(), 1);
  EXPECT_EQ(list.devices(0).backend(), "cpu");
  EXPECT_EQ(list.devices(0).queue_capacity(), 3);  // from the file

  // A call that takes a while: attention over buffers.
  pb::AttentionRequest req;
  for (int i = 0; i < 3; ++i) {
    pb::BufferInfo info;
    ASSERT_TRUE(Upload(buffers.get(), RandomBf16({1, 8, 4096, 128}, i), 4 << 20, &info).ok());
    pb::TensorRef* ref = i == 0 ? req.mutable_q() : i == 1 ? req.mutable_k() : req.mutable_v();
    ref->set_buffer_id(info.id());
  }
  req.mutable_output()->set_to_buffer(true);
  // Inline output of 8 MiB: over the file's 8 MiB limit, under the command line's 16.
  pb::AttentionRequest inline_req = req;
  inline_req.mutable_output()->set_to_buffer(false);
  std::string inline_out;
  {
    grpc::ClientContext ctx;
    pb::AttentionResponse resp;
    grpc::Status s = kernels->Attention(&ctx, inline_req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.out().tensor().data().size(), 8u << 20);
    inline_out = resp.out().tensor().data();
  }

  // The running call's result is a buffer: the client downloads it with a
  // second call after the first returns, which the drain must still serve.
  grpc::Status running, download;
  std::string buffer_out;
  absl::Time finished;
  std::thread call([&] {
    grpc::ClientContext ctx;
    pb::AttentionResponse resp;
    running = kernels->Attention(&ctx, req, &resp);
    finished = absl::Now();
    if (running.ok()) download = Download(buffers.get(), resp.out().buffer_id(), 4 << 20, &buffer_out);
  });
  // SIGTERM once the call is on the device worker (queued or running), not
  // after a fixed sleep: a loaded machine may not have sent it yet.
  ASSERT_TRUE(WaitQueueDepth(devices.get(), 1)) << "the long call never reached the device";
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const absl::Time signalled = absl::Now();
  // The server handles the signal on its own thread, late on a loaded
  // machine: wait for health to say NOT_SERVING, which comes after the
  // server refuses new work.
  std::string health;
  for (int i = 0; i < 500 && health != std::string("\x08\x02", 2); ++i) {
    ASSERT_TRUE(HealthCheck(channel.get(), "", &health).ok());
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(health, std::string("\x08\x02", 2)) << "health never said NOT_SERVING after SIGTERM";
  {
    // New work during the drain: refused, the running call unaffected.
    grpc::ClientContext ctx;
    pb::AttentionResponse resp;
    const grpc::Status refused = kernels->Attention(&ctx, inline_req, &resp);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  }
  EXPECT_EQ(WaitExit(pid), 0);
  call.join();
  EXPECT_TRUE(running.ok()) << running.error_message();  // drained, not cut off
  EXPECT_GT(finished, signalled);
  EXPECT_TRUE(download.ok()) << download.error_message();
  EXPECT_TRUE(buffer_out == inline_out) << "the buffer result differs from the inline one";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(MainTest, ListNamesTheBackendsOfThisBinaryAndWhyAutoChoseOne) {
  const int port = FreePort();
  const pid_t pid = Spawn({kBinary, "--listen=127.0.0.1:" + std::to_string(port), "--backend=auto"});
  ASSERT_GT(pid, 0);
  auto devices = pb::DeviceService::NewStub(Connect(port));
  pb::ListDevicesResponse list;
  ASSERT_TRUE(WaitReady(devices.get(), &list));
  ASSERT_EQ(list.backends_size(), 3);
  EXPECT_EQ(list.backends(0).name(), "cpu");
  EXPECT_TRUE(list.backends(0).built());
  EXPECT_EQ(list.backends(1).name(), "cuda");
  EXPECT_EQ(list.backends(1).built(), KERNELSERVE_HAVE_CUDA == 1) << list.backends(1).note();
  EXPECT_EQ(list.backends(2).name(), "hip");
  EXPECT_EQ(list.backends(2).built(), KERNELSERVE_HAVE_HIP == 1) << list.backends(2).note();
  int active = 0;
  for (const auto& b : list.backends()) {
    EXPECT_FALSE(b.note().empty()) << b.name();
    if (b.active()) {
      ++active;
      EXPECT_EQ(b.name(), list.devices(0).backend());
    }
  }
  EXPECT_EQ(active, 1);
  EXPECT_THAT(list.backend_selection(), ::testing::StartsWith("backend auto: using "));
  if (list.devices(0).backend() == "cpu") {
    EXPECT_THAT(list.backend_selection(), ::testing::HasSubstr(KERNELSERVE_HAVE_CUDA
                                                                    ? "cuda: no CUDA device"
                                                                    : "cuda: this build has no CUDA backend"));
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitExit(pid), 0);
}

void CopyInto(const std::string& from, const std::string& to) {
  {
    std::ifstream in(from, std::ios::binary);
    std::ofstream(to + ".tmp", std::ios::binary) << in.rdbuf();
  }
  ASSERT_EQ(std::rename((to + ".tmp").c_str(), to.c_str()), 0);
}

// The status of DeviceService.List over a new TLS connection trusting `ca`.
grpc::StatusCode ListOverTls(int port, const std::string& ca) {
  auto creds = security::ChannelCredentialsFromFiles({ca, "", ""});
  if (!creds.ok()) return grpc::StatusCode::INTERNAL;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto devices = pb::DeviceService::NewStub(
      grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), *creds, args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  pb::ListDevicesResponse resp;
  return devices->List(&ctx, pb::ListDevicesRequest(), &resp).error_code();
}

// SIGHUP re-reads the TLS files (no file watching here): a rotated server
// certificate is what new connections get, without a restart.
TEST(MainTest, SighupReloadsTheTlsCertificates) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  auto certs = security::MakeTestCerts(std::string(tmp ? tmp : "/tmp") + "/main_certs");
  ASSERT_TRUE(certs.ok()) << certs.status();
  const std::string cert = certs->dir + "/live.pem", key = certs->dir + "/live.key";
  CopyInto(certs->server_cert, cert);
  CopyInto(certs->server_key, key);
  const int port = FreePort();
  const pid_t pid = Spawn({kBinary, "--backend=cpu", "--listen=127.0.0.1:" + std::to_string(port),
                           "--tls_cert=" + cert, "--tls_key=" + key, "--tls_watch_interval=0"});
  ASSERT_GT(pid, 0);
  grpc::StatusCode code = grpc::StatusCode::UNAVAILABLE;
  for (int i = 0; i < 200 && code != grpc::StatusCode::OK; ++i) {
    code = ListOverTls(port, certs->ca);
    if (code != grpc::StatusCode::OK) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(code, grpc::StatusCode::OK) << "the server never answered over TLS";
  CopyInto(certs->rogue_server_cert, cert);
  CopyInto(certs->rogue_server_key, key);
  EXPECT_EQ(ListOverTls(port, certs->rogue_ca), grpc::StatusCode::UNAVAILABLE) << "not before the signal";
  ASSERT_EQ(kill(pid, SIGHUP), 0);
  code = grpc::StatusCode::UNAVAILABLE;
  for (int i = 0; i < 100 && code != grpc::StatusCode::OK; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    code = ListOverTls(port, certs->rogue_ca);
  }
  EXPECT_EQ(code, grpc::StatusCode::OK) << "SIGHUP did not load the rotated certificate";
  EXPECT_EQ(ListOverTls(port, certs->ca), grpc::StatusCode::UNAVAILABLE);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitExit(pid), 0);
}

TEST(MainTest, ABadCpuDeviceCountFailsToStartNamingTheFlag) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string err = std::string(dir ? dir : "/tmp") + "/cpu_devices_stderr.txt";
  const std::string listen = "--listen=127.0.0.1:" + std::to_string(FreePort());
  EXPECT_EQ(WaitExit(Spawn({kBinary, listen, "--backend=cpu", "--cpu_devices=65"}, err)), 1);
  EXPECT_THAT(ReadFile(err), ::testing::HasSubstr("--cpu_devices: expected 1..64 simulated cpu devices, got 65"));
}

// --cpu_dma_latency_us holds the host's CPU latency request while serving and
// gives it back on exit; a bad value or a file it cannot open fails the
// start naming the flag.
TEST(MainTest, CpuDmaLatencyHeldWhileServing) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string err = std::string(dir ? dir : "/tmp") + "/cpu_dma_latency_stderr.txt";
  const std::string listen = "--listen=127.0.0.1:" + std::to_string(FreePort());
  EXPECT_EQ(WaitExit(Spawn({kBinary, listen, "--backend=cpu", "--cpu_dma_latency_us=-2"}, err)), 1);
  EXPECT_THAT(ReadFile(err), ::testing::HasSubstr("--cpu_dma_latency_us: expected -1 (off) or a latency of 0 µs "
                                                  "or more, got -2"));
  if (access(kCpuDmaLatencyPath, W_OK) != 0) {
    EXPECT_EQ(WaitExit(Spawn({kBinary, listen, "--backend=cpu", "--cpu_dma_latency_us=0"}, err)), 1);
    EXPECT_THAT(ReadFile(err), ::testing::HasSubstr("--cpu_dma_latency_us=0: cannot open /dev/cpu_dma_latency"));
    GTEST_SKIP() << "the rest needs " << kCpuDmaLatencyPath << " writable (root and the device node)";
  }
  const absl::StatusOr<int32_t> before = CurrentCpuLatency();
  ASSERT_TRUE(before.ok()) << before.status();
  if (*before == 0) GTEST_SKIP() << "another process holds a request of 0 µs";
  const int port = FreePort();
  const pid_t pid = Spawn({kBinary, "--listen=127.0.0.1:" + std::to_string(port), "--backend=cpu",
                           "--cpu_dma_latency_us=0"});
  ASSERT_GT(pid, 0);
  auto devices = pb::DeviceService::NewStub(Connect(port));
  pb::ListDevicesResponse list;
  ASSERT_TRUE(WaitReady(devices.get(), &list));
  EXPECT_EQ(CurrentCpuLatency().value_or(-1), 0);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitExit(pid), 0);
  // Gone with the process (cpu_latency_test may hold a request of its own meanwhile).
  int32_t after = 0;
  for (int i = 0; i < 100 && after == 0; ++i) {
    after = CurrentCpuLatency().value_or(-1);
    if (after == 0) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_NE(after, 0) << "the server's request outlived it";
}

TEST(MainTest, AGpuBackendTheBinaryLacksFailsToStartSayingWhy) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string err = std::string(dir ? dir : "/tmp") + "/backend_stderr.txt";
  const std::string listen = "--listen=127.0.0.1:" + std::to_string(FreePort());
  EXPECT_EQ(WaitExit(Spawn({kBinary, listen, "--backend=hip"}, err)), 1);
  if (!KERNELSERVE_HAVE_HIP) {
    EXPECT_THAT(ReadFile(err), ::testing::HasSubstr("--backend=hip: this build has no HIP (AMD) backend ("));
  } else {
    // No AMD GPU exists on these machines: without ROCm the runtime does not
    // load (each library tried is named); with Debian's libamdhip64 it finds
    // no device.
    const std::string text = ReadFile(err);
    EXPECT_TRUE(text.find("--backend=hip: cannot load the HIP runtime") != std::string::npos ||
                text.find("--backend=hip: no HIP device: hipGetDeviceCount: ") != std::string::npos)
        << text;
    if (text.find("cannot load") != std::string::npos) {
      EXPECT_THAT(text, ::testing::HasSubstr("tried libamdhip64.so ("));
    }
  }
  if (!KERNELSERVE_HAVE_CUDA) {
    EXPECT_EQ(WaitExit(Spawn({kBinary, listen, "--backend=cuda"}, err)), 1);
    EXPECT_THAT(ReadFile(err),
                ::testing::HasSubstr("--backend=cuda: this build has no CUDA backend (built without nvcc; set "
                                     "CUDA_PATH and rebuild)"));
  }
}

TEST(MainTest, BadConfigLineExitsWithUsageError) {
  const std::string config = TmpFile("bad.conf", "queue_capacity 3\n");
  EXPECT_EQ(WaitExit(Spawn({kBinary, "--config=" + config})), 2);
  EXPECT_EQ(WaitExit(Spawn({kBinary, "--config=/nonexistent/ks.conf"})), 2);
  EXPECT_EQ(WaitExit(Spawn({kBinary, "--log_level=loud"})), 2);
}

}  // namespace
}  // namespace kernelserve
