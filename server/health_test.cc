// A device fault: the call fails, the device is marked unhealthy (later calls
// to it get UNAVAILABLE, DeviceService.List says UNHEALTHY, grpc.health.v1
// says NOT_SERVING), and the rest of the server keeps answering. The fault is
// injected by a wrapper around the real cpu backend.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "kernels/backends.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/server.h"
#include "server/test_util.h"

namespace kernelserve {
namespace {

namespace pb = ::kernelserve::v1;
using ::kernelserve::testing::Connect;
using ::kernelserve::testing::Download;
using ::kernelserve::testing::RandomBf16;
using ::kernelserve::testing::Upload;
using ::testing::HasSubstr;

// Forwards to a real backend; after Arm(), the next Attention faults the device.
class FaultingBackend : public ::kernelserve::testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void Arm() { armed_ = true; }

  DeviceInfo GetDeviceInfo(int device) const override {
    DeviceInfo info = ForwardingBackend::GetDeviceInfo(device);
    if (faulted_) {
      info.healthy = false;
      info.health_reason = "injected fault: illegal memory access";
    }
    return info;
  }
  absl::Status Attention(int device, const AttentionParams& p, const TensorView& q, const TensorView& k,
                         const TensorView& v, TensorView& out) override {
    if (armed_) {
      faulted_ = true;
      return absl::InternalError("attention kernel: illegal memory access (injected)");
    }
    return ForwardingBackend::Attention(device, p, q, k, v, out);
  }

 private:
  std::atomic<bool> armed_{false};
  std::atomic<bool> faulted_{false};
};

// grpc.health.v1.Health/Check with a hand-encoded request; returns the status enum.
int HealthStatus(grpc::Channel* channel, const std::string& service) {
  std::string req;
  if (!service.empty()) {
    req.push_back(0x0a);
    req.push_back(static_cast<char>(service.size()));
    req += service;
  }
  grpc::Slice slice(req);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel,
      grpc::internal::RpcMethod("/grpc.health.v1.Health/Check", grpc::internal::RpcMethod::NORMAL_RPC),
      &ctx, request, &response);
  if (!s.ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  if (bytes.size() != 2 || bytes[0] != 0x08) return -1;
  return bytes[1];
}

TEST(HealthTest, DeviceFaultMarksUnhealthyAndServerKeepsAnswering) {
  auto inner = CreateBackend("cpu", BackendOptions());
  ASSERT_TRUE(inner.ok());
  auto backend = std::make_unique<FaultingBackend>(std::move(*inner));
  FaultingBackend* faulting = backend.get();
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  auto server = KernelServer::Start(options, std::move(backend));
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = Connect((*server)->port());
  auto kernels = pb::KernelService::NewStub(channel);
  auto buffers = pb::BufferService::NewStub(channel);
  auto devices = pb::DeviceService::NewStub(channel);
  constexpr int kServing = 1, kNotServing = 2;
  EXPECT_EQ(HealthStatus(channel.get(), ""), kServing);
  EXPECT_EQ(HealthStatus(channel.get(), "kernelserve.v1.KernelService"), kServing);

  pb::Tensor t = RandomBf16({1, 2, 16, 64}, 1);
  pb::BufferInfo info;
  ASSERT_TRUE(Upload(buffers.get(), t, 1 << 20, &info).ok());
  pb::AttentionRequest req;
  req.mutable_q()->set_buffer_id(info.id());
  req.mutable_k()->set_buffer_id(info.id());
  req.mutable_v()->set_buffer_id(info.id());
  {
    grpc::ClientContext ctx;
    pb::AttentionResponse resp;
    ASSERT_TRUE(kernels->Attention(&ctx, req, &resp).ok());
  }
  faulting->Arm();
  {
    grpc::ClientContext ctx;
    pb::AttentionResponse resp;
    grpc::Status s = kernels->Attention(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
    EXPECT_THAT(s.error_message(), HasSubstr("illegal memory access"));
  }
  {
    grpc::ClientContext ctx;
    pb::AttentionResponse resp;
    grpc::Status s = kernels->Attention(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(s.error_message(), HasSubstr("device 0 is unhealthy"));
  }
  EXPECT_EQ(HealthStatus(channel.get(), ""), kNotServing);
  EXPECT_EQ(HealthStatus(channel.get(), "kernelserve.v1.KernelService"), kNotServing);
  grpc::ClientContext ctx;
  pb::ListDevicesResponse list;
  ASSERT_TRUE(devices->List(&ctx, pb::ListDevicesRequest(), &list).ok());
  ASSERT_EQ(list.devices_size(), 1);
  EXPECT_EQ(list.devices(0).state(), pb::UNHEALTHY);
  EXPECT_THAT(list.devices(0).state_reason(), HasSubstr("injected fault"));
  // The server itself still answers: listing buffers works, nothing aborted.
  grpc::ClientContext lctx;
  pb::ListBuffersResponse buffers_list;
  EXPECT_TRUE(buffers->List(&lctx, pb::ListBuffersRequest(), &buffers_list).ok());
  EXPECT_EQ(buffers_list.buffers_size(), 1);
  (*server)->Shutdown(absl::Seconds(1));
}

}  // namespace
}  // namespace kernelserve
