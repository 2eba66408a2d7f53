#include "tests/fuzz/request_fuzzer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/support/sync_stream.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/pool.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/security/tokens.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace fuzz {
namespace {

namespace pb = ::kernelserve::v1;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

enum class Kind { kUnary, kClientStream, kServerStream };

struct Method {
  const char* path;
  Kind kind;
  const Message* request;  // prototype, for the "B"/"P" substitution
};

const std::vector<Method>& Methods() {
  static const auto* methods = new std::vector<Method>{
      {"/kernelserve.v1.KernelService/Attention", Kind::kUnary, &pb::AttentionRequest::default_instance()},
      {"/kernelserve.v1.KernelService/Fp8Attention", Kind::kUnary, &pb::Fp8AttentionRequest::default_instance()},
      {"/kernelserve.v1.KernelService/MlaDecode", Kind::kUnary, &pb::MlaDecodeRequest::default_instance()},
      {"/kernelserve.v1.KernelService/Moe", Kind::kUnary, &pb::MoeRequest::default_instance()},
      {"/kernelserve.v1.BufferService/Upload", Kind::kClientStream, &pb::UploadChunk::default_instance()},
      {"/kernelserve.v1.BufferService/Download", Kind::kServerStream, &pb::DownloadRequest::default_instance()},
      {"/kernelserve.v1.BufferService/Free", Kind::kUnary, &pb::FreeBufferRequest::default_instance()},
      {"/kernelserve.v1.BufferService/List", Kind::kUnary, &pb::ListBuffersRequest::default_instance()},
      {"/kernelserve.v1.PoolService/Create", Kind::kUnary, &pb::CreatePoolRequest::default_instance()},
      {"/kernelserve.v1.PoolService/Write", Kind::kClientStream, &pb::WritePoolChunk::default_instance()},
      {"/kernelserve.v1.PoolService/Read", Kind::kServerStream, &pb::ReadPoolRequest::default_instance()},
      {"/kernelserve.v1.PoolService/Stats", Kind::kUnary, &pb::PoolStatsRequest::default_instance()},
      {"/kernelserve.v1.PoolService/Delete", Kind::kUnary, &pb::DeletePoolRequest::default_instance()},
      {"/kernelserve.v1.PoolService/List", Kind::kUnary, &pb::ListPoolsRequest::default_instance()},
      {"/kernelserve.v1.DeviceService/List", Kind::kUnary, &pb::ListDevicesRequest::default_instance()},
  };
  return *methods;
}

constexpr char kToken[] = "fuzz-token";

struct Target {
  std::unique_ptr<KernelServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::string buffer_id, pool_id;  // what "B" and "P" become
  std::mutex mu;
  std::map<std::string, int64_t> codes;
  int64_t inputs = 0;
};

Target* target = nullptr;

void Die(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

void Prepare(grpc::ClientContext* ctx, const std::string* auth) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  ctx->AddMetadata("authorization", auth ? *auth : absl::StrCat("Bearer ", kToken));
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

grpc::Status Unary(const char* path, const std::string& request, const std::string* auth,
                   std::string* response = nullptr) {
  grpc::ClientContext ctx;
  Prepare(&ctx, auth);
  grpc::ByteBuffer req = ToBuffer(request), resp;
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      target->channel.get(), grpc::internal::RpcMethod(path, grpc::internal::RpcMethod::NORMAL_RPC),
      &ctx, req, &resp);
  if (s.ok() && response != nullptr) {
    std::vector<grpc::Slice> slices;
    (void)resp.Dump(&slices);
    response->clear();
    for (auto& sl : slices) response->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  return s;
}

grpc::Status ClientStream(const char* path, const std::vector<std::string>& messages,
                          const std::string* auth, std::string* response = nullptr) {
  grpc::ClientContext ctx;
  Prepare(&ctx, auth);
  grpc::ByteBuffer resp;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
          target->channel.get(),
          grpc::internal::RpcMethod(path, grpc::internal::RpcMethod::CLIENT_STREAMING), &ctx, &resp));
  for (const std::string& m : messages) {
    if (!writer->Write(ToBuffer(m))) break;
  }
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  if (s.ok() && response != nullptr) {
    std::vector<grpc::Slice> slices;
    (void)resp.Dump(&slices);
    response->clear();
    for (auto& sl : slices) response->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  return s;
}

grpc::Status ServerStream(const char* path, const std::string& request, const std::string* auth) {
  grpc::ClientContext ctx;
  Prepare(&ctx, auth);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          target->channel.get(),
          grpc::internal::RpcMethod(path, grpc::internal::RpcMethod::SERVER_STREAMING), &ctx,
          ToBuffer(request)));
  grpc::ByteBuffer chunk;
  int chunks = 0;
  while (reader->Read(&chunk) && ++chunks < 4096) {
  }
  if (chunks >= 4096) ctx.TryCancel();
  return reader->Finish();
}

// buffer_id "B" / pool_id "P" anywhere in the message become the real ids.
void Substitute(Message* m) {
  const auto* d = m->GetDescriptor();
  const auto* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->type() == FieldDescriptor::TYPE_STRING && !f->is_repeated()) {
      const std::string v = r->GetString(*m, f);
      if ((f->name() == "buffer_id" || f->name() == "id") && v == "B") {
        r->SetString(m, f, target->buffer_id);
      } else if (f->name() == "pool_id" && v == "P") {
        r->SetString(m, f, target->pool_id);
      }
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE && !f->is_repeated() && r->HasField(*m, f)) {
      Substitute(r->MutableMessage(m, f));
    }
  }
}

std::string Prepared(const Method& method, const std::string& bytes) {
  std::unique_ptr<Message> m(method.request->New());
  if (!m->ParseFromString(bytes)) return bytes;  // malformed: the server decodes it
  Substitute(m.get());
  std::string out;
  return m->SerializeToString(&out) ? out : bytes;
}

bool Finding(grpc::StatusCode code) {
  return code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::UNKNOWN ||
         code == grpc::StatusCode::DATA_LOSS || code == grpc::StatusCode::UNAVAILABLE;
}

const char* CodeName(grpc::StatusCode c) {
  static const char* const kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                       "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                                       "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(c);
  return i >= 0 && i < 17 ? kNames[i] : "?";
}

// Frees what inputs created (other than B and P) so the memory limit keeps
// rejecting only the inputs that ask for too much.
void CleanUp() {
  std::string bytes;
  if (Unary("/kernelserve.v1.BufferService/List", "", nullptr, &bytes).ok()) {
    pb::ListBuffersResponse list;
    list.ParseFromString(bytes);
    for (const auto& b : list.buffers()) {
      if (b.id() == target->buffer_id) continue;
      pb::FreeBufferRequest req;
      req.set_buffer_id(b.id());
      Unary("/kernelserve.v1.BufferService/Free", req.SerializeAsString(), nullptr);
    }
  }
  if (Unary("/kernelserve.v1.PoolService/List", "", nullptr, &bytes).ok()) {
    pb::ListPoolsResponse list;
    list.ParseFromString(bytes);
    for (const auto& p : list.pools()) {
      if (p.id() == target->pool_id) continue;
      pb::DeletePoolRequest req;
      req.set_pool_id(p.id());
      Unary("/kernelserve.v1.PoolService/Delete", req.SerializeAsString(), nullptr);
    }
  }
  pb::ListDevicesResponse devices;
  if (!Unary("/kernelserve.v1.DeviceService/List", "", nullptr, &bytes).ok() ||
      !devices.ParseFromString(bytes) || devices.devices_size() == 0 ||
      devices.devices(0).state() != pb::HEALTHY) {
    Die("the device is no longer healthy or the server stopped answering");
  }
}

pb::Tensor Tensor(pb::DType dtype, std::vector<int64_t> shape, std::string data) {
  pb::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::move(data));
  return t;
}
// bf16 values in [-2, 2): bit patterns with a small exponent, never NaN/Inf.
std::string Bf16Bytes(int64_t n, uint32_t seed) {
  std::string out(static_cast<size_t>(2 * n), '\0');
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    const uint16_t v = static_cast<uint16_t>(0x3C00 | (seed >> 16 & 0x83FF));
    std::memcpy(&out[static_cast<size_t>(2 * i)], &v, 2);
  }
  return out;
}
std::string Int32Bytes(std::vector<int32_t> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size());
}

std::string Framed(const std::vector<std::string>& messages) {
  std::string out;
  for (const std::string& m : messages) {
    const uint16_t n = static_cast<uint16_t>(m.size());
    out.append(reinterpret_cast<const char*>(&n), 2);
    out.append(m);
  }
  return out;
}

int MethodIndex(const char* path) {
  for (size_t i = 0; i < Methods().size(); ++i) {
    if (std::strcmp(Methods()[i].path, path) == 0) return static_cast<int>(i);
  }
  return 0;
}

std::string Input(const char* path, const std::string& payload) {
  return std::string(1, static_cast<char>(MethodIndex(path))) + std::string(1, '\x01') + payload;
}

}  // namespace

std::vector<std::string> SeedInputs() {
  std::vector<std::string> seeds;
  {
    pb::AttentionRequest r;
    *r.mutable_q()->mutable_tensor() = Tensor(pb::BF16, {1, 2, 4, 64}, Bf16Bytes(512, 1));
    *r.mutable_k()->mutable_tensor() = Tensor(pb::BF16, {1, 1, 6, 64}, Bf16Bytes(384, 2));
    *r.mutable_v()->mutable_tensor() = Tensor(pb::BF16, {1, 1, 6, 64}, Bf16Bytes(384, 3));
    r.set_causal(true);
    r.set_report_error(true);
    seeds.push_back(Input(Methods()[0].path, r.SerializeAsString()));
    r.mutable_q()->set_buffer_id("B");  // q from the server buffer [1,1,4,128]
    *r.mutable_k()->mutable_tensor() = Tensor(pb::BF16, {1, 1, 6, 128}, Bf16Bytes(768, 2));
    *r.mutable_v()->mutable_tensor() = Tensor(pb::BF16, {1, 1, 6, 128}, Bf16Bytes(768, 3));
    r.mutable_output()->set_to_buffer(true);
    seeds.push_back(Input(Methods()[0].path, r.SerializeAsString()));
  }
  {
    pb::Fp8AttentionRequest r;
    *r.mutable_q()->mutable_tensor() = Tensor(pb::BF16, {1, 1, 4, 128}, Bf16Bytes(512, 4));
    *r.mutable_k()->mutable_tensor() = Tensor(pb::BF16, {1, 1, 70, 128}, Bf16Bytes(70 * 128, 5));
    *r.mutable_v()->mutable_tensor() = Tensor(pb::BF16, {1, 1, 70, 128}, Bf16Bytes(70 * 128, 6));
    r.set_causal(true);
    r.set_p_mode(pb::LEAN);
    r.set_hadamard(true);
    r.set_report_error_split(true);
    seeds.push_back(Input(Methods()[1].path, r.SerializeAsString()));
  }
  {
    pb::MlaDecodeRequest r;
    *r.mutable_q_lat()->mutable_tensor() = Tensor(pb::BF16, {1, 2, 2, 512}, Bf16Bytes(2048, 7));
    *r.mutable_q_pe()->mutable_tensor() = Tensor(pb::BF16, {1, 2, 2, 64}, Bf16Bytes(256, 8));
    r.set_pool_id("P");
    *r.mutable_seq_lens()->mutable_tensor() = Tensor(pb::INT32, {1}, Int32Bytes({3}));
    *r.mutable_kv_indices()->mutable_tensor() = Tensor(pb::INT32, {3}, Int32Bytes({2, 0, 1}));
    *r.mutable_kv_indptr()->mutable_tensor() = Tensor(pb::INT32, {2}, Int32Bytes({0, 3}));
    r.set_num_splits(2);
    seeds.push_back(Input(Methods()[2].path, r.SerializeAsString()));
    pb::MlaDecodeRequest c;  // contiguous KV
    *c.mutable_q_lat() = r.q_lat();
    *c.mutable_q_pe() = r.q_pe();
    *c.mutable_kv()->mutable_tensor() = Tensor(pb::FP8_E4M3FN, {1, 3, 576}, std::string(3 * 576, '\x30'));
    c.set_kv_scale(0.5);
    seeds.push_back(Input(Methods()[2].path, c.SerializeAsString()));
  }
  {
    pb::MoeRequest r;  // gate/up: T=1, K=32, E=2, I=32, top-1
    r.set_stage(pb::GATEUP);
    *r.mutable_x()->mutable_tensor() = Tensor(pb::BF16, {1, 32}, Bf16Bytes(32, 9));
    *r.mutable_topk_ids()->mutable_tensor() = Tensor(pb::INT32, {1, 1}, Int32Bytes({1}));
    *r.mutable_w13()->mutable_tensor() = Tensor(pb::FP4_E2M1, {2, 64, 32}, std::string(2 * 64 * 16, '\x25'));
    *r.mutable_w13_scales()->mutable_tensor() = Tensor(pb::E8M0, {2, 64, 1}, std::string(128, '\x7f'));
    r.set_swiglu(true);
    seeds.push_back(Input(Methods()[3].path, r.SerializeAsString()));
  }
  {
    pb::UploadChunk header;
    header.mutable_header()->set_dtype(pb::BF16);
    header.mutable_header()->add_shape(4);
    header.mutable_header()->add_shape(8);
    pb::UploadChunk a, b;
    a.set_data(Bf16Bytes(16, 10));
    b.set_data(Bf16Bytes(16, 11));
    seeds.push_back(Input(Methods()[4].path, Framed({header.SerializeAsString(), a.SerializeAsString(),
                                                     b.SerializeAsString()})));
  }
  {
    pb::DownloadRequest r;
    r.set_buffer_id("B");
    r.set_chunk_bytes(256);
    seeds.push_back(Input(Methods()[5].path, r.SerializeAsString()));
    pb::FreeBufferRequest f;
    f.set_buffer_id("buf-does-not-exist");
    seeds.push_back(Input(Methods()[6].path, f.SerializeAsString()));
    seeds.push_back(Input(Methods()[7].path, ""));
  }
  {
    pb::CreatePoolRequest r;
    r.set_kind(pb::PER_HEAD_KV);
    r.set_num_slots(4);
    r.set_dtype(pb::BF16);
    r.set_num_heads(2);
    r.set_head_dim(64);
    seeds.push_back(Input(Methods()[8].path, r.SerializeAsString()));
    pb::WritePoolChunk w;
    w.set_pool_id("P");
    *w.mutable_slots() = Tensor(pb::INT32, {2}, Int32Bytes({5, 1}));
    *w.mutable_rows() = Tensor(pb::FP8_E4M3FN, {2, 576}, std::string(2 * 576, '\x38'));
    seeds.push_back(Input(Methods()[9].path, Framed({w.SerializeAsString()})));
    pb::ReadPoolRequest rd;
    rd.set_pool_id("P");
    rd.set_start(0);
    rd.set_count(8);
    rd.set_chunk_rows(3);
    seeds.push_back(Input(Methods()[10].path, rd.SerializeAsString()));
    pb::PoolStatsRequest st;
    st.set_pool_id("P");
    seeds.push_back(Input(Methods()[11].path, st.SerializeAsString()));
    pb::DeletePoolRequest del;
    del.set_pool_id("pool-nope");
    seeds.push_back(Input(Methods()[12].path, del.SerializeAsString()));
    seeds.push_back(Input(Methods()[13].path, ""));
    seeds.push_back(Input(Methods()[14].path, ""));
  }
  // A malformed auth header and a truncated message.
  seeds.push_back(std::string("\x0e\x00\x05" "Basic", 8));
  seeds.push_back(seeds[0].substr(0, seeds[0].size() / 2));
  return seeds;
}

namespace {

// One random change to one field somewhere in the message tree.
void MutateField(Message* m, std::mt19937_64& rng, int depth) {
  const auto* d = m->GetDescriptor();
  const auto* r = m->GetReflection();
  if (d->field_count() == 0) return;
  const FieldDescriptor* f = d->field(static_cast<int>(rng() % d->field_count()));
  static const int64_t kInts[] = {0, 1, -1, 2, 3, 7, 8, 31, 32, 64, 127, 128, 255, 256, 576,
                                  1 << 16, int64_t{1} << 31, int64_t{1} << 40,
                                  std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  const int64_t v = kInts[rng() % (sizeof(kInts) / sizeof(kInts[0]))] + (rng() % 4 == 0 ? 1 : 0);
  if (f->is_repeated()) {
    const int n = r->FieldSize(*m, f);
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT64:
        if (n > 0 && rng() % 3 != 0) {
          r->SetRepeatedInt64(m, f, static_cast<int>(rng() % n), v);
        } else if (n > 0 && rng() % 2 == 0) {
          r->RemoveLast(m, f);
        } else {
          r->AddInt64(m, f, v);
        }
        return;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        if (n > 0 && depth < 6) MutateField(r->MutableRepeatedMessage(m, f, static_cast<int>(rng() % n)), rng, depth + 1);
        return;
      default:
        return;
    }
  }
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      r->SetInt32(m, f, static_cast<int32_t>(v));
      return;
    case FieldDescriptor::CPPTYPE_INT64:
      r->SetInt64(m, f, v);
      return;
    case FieldDescriptor::CPPTYPE_BOOL:
      r->SetBool(m, f, !r->GetBool(*m, f));
      return;
    case FieldDescriptor::CPPTYPE_ENUM:
      r->SetEnumValue(m, f, static_cast<int>(rng() % 16) - 1);
      return;
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      static const double kDoubles[] = {0, -1, 1, 0.5, 1e-300, 1e300,
                                        std::numeric_limits<double>::quiet_NaN(),
                                        std::numeric_limits<double>::infinity()};
      r->SetDouble(m, f, kDoubles[rng() % 8]);
      return;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s = r->GetString(*m, f);
      if (f->type() == FieldDescriptor::TYPE_STRING) {
        static const char* const kIds[] = {"B", "P", "", "buf-x", "../../etc/passwd"};
        r->SetString(m, f, kIds[rng() % 5]);
      } else if (!s.empty() && rng() % 2 == 0) {
        s.resize(rng() % s.size());  // truncate the data: byte-count checks
        r->SetString(m, f, s);
      } else {
        s.append(static_cast<size_t>(rng() % 64), static_cast<char>(rng()));
        r->SetString(m, f, s);
      }
      return;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (depth < 6) MutateField(r->MutableMessage(m, f), rng, depth + 1);
      return;
    default:
      return;
  }
}

}  // namespace

std::string MutateStructured(const std::string& input, uint64_t seed) {
  std::mt19937_64 rng(seed);
  if (input.size() < 2) return input;
  const Method& method = Methods()[static_cast<uint8_t>(input[0]) % Methods().size()];
  if ((input[1] & 7) == 0) return input;  // custom auth header: leave to byte mutations
  const std::string payload = input.substr(2);
  const std::string head = input.substr(0, 2);
  if (method.kind == Kind::kClientStream) {
    std::vector<std::string> messages;
    size_t p = 0;
    while (p + 2 <= payload.size()) {
      uint16_t n;
      std::memcpy(&n, payload.data() + p, 2);
      p += 2;
      const size_t take = std::min<size_t>(n, payload.size() - p);
      messages.push_back(payload.substr(p, take));
      p += take;
    }
    if (messages.empty()) return input;
    std::string& victim = messages[rng() % messages.size()];
    std::unique_ptr<Message> m(method.request->New());
    if (!m->ParseFromString(victim)) return input;
    for (int i = 1 + static_cast<int>(rng() % 3); i > 0; --i) MutateField(m.get(), rng, 0);
    victim = m->SerializeAsString();
    return head + Framed(messages);
  }
  std::unique_ptr<Message> m(method.request->New());
  if (!m->ParseFromString(payload)) return input;
  for (int i = 1 + static_cast<int>(rng() % 3); i > 0; --i) MutateField(m.get(), rng, 0);
  return head + m->SerializeAsString();
}

std::string CodeSummary() {
  std::lock_guard<std::mutex> lock(target->mu);
  std::string out = absl::StrCat(target->inputs, " inputs:");
  for (const auto& [code, n] : target->codes) absl::StrAppend(&out, " ", code, "=", n);
  return out;
}

}  // namespace fuzz
}  // namespace kernelserve

using namespace kernelserve::fuzz;  // NOLINT: the two C entry points below

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  if (getenv("KS_FUZZ_LOG") == nullptr) {
    // One line per refused call (and protobuf's invalid-UTF-8 complaints) otherwise.
    spdlog::set_level(spdlog::level::off);
    google::protobuf::SetLogHandler(nullptr);
  }
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                                       "/ks_fuzz_", getpid());
  mkdir(dir.c_str(), 0700);
  const std::string tokens = dir + "/tokens";
  std::ofstream(tokens) << kernelserve::security::TokenFileLine("fuzzer", kToken, false) << "\n";
  kernelserve::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.backend = "cpu";
  options.cpu_threads = 1;
  options.memory_limit_mb = 64;
  options.max_message_mb = 8;
  options.security.tokens_file = tokens;
  auto server = kernelserve::KernelServer::Start(options);
  if (!server.ok()) Die(absl::StrCat("cannot start the server: ", server.status().ToString()));
  target = new Target;
  target->server = std::move(*server);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  target->channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", target->server->port()),
                                              grpc::InsecureChannelCredentials(), args);
  // The B buffer and the P pool the inputs may name.
  namespace pb = ::kernelserve::v1;
  pb::UploadChunk header;
  header.mutable_header()->set_dtype(pb::BF16);
  for (int64_t d : {1, 1, 4, 128}) header.mutable_header()->add_shape(d);
  header.set_data(Bf16Bytes(512, 99));
  std::string bytes;
  if (!ClientStream("/kernelserve.v1.BufferService/Upload", {header.SerializeAsString()}, nullptr, &bytes).ok()) {
    Die("cannot upload the B buffer");
  }
  pb::BufferInfo info;
  info.ParseFromString(bytes);
  target->buffer_id = info.id();
  pb::CreatePoolRequest create;
  create.set_kind(pb::MLA_FUSED);
  create.set_num_slots(8);
  create.set_dtype(pb::FP8_E4M3FN);
  if (!Unary("/kernelserve.v1.PoolService/Create", create.SerializeAsString(), nullptr, &bytes).ok()) {
    Die("cannot create the P pool");
  }
  pb::PoolInfo pool;
  pool.ParseFromString(bytes);
  target->pool_id = pool.id();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Method& method = Methods()[data[0] % Methods().size()];
  size_t pos = 2;
  std::string auth;
  const bool custom_auth = (data[1] & 7) == 0;
  if (custom_auth) {
    const size_t n = pos < size ? data[pos] % 48 : 0;
    ++pos;
    auth.assign(reinterpret_cast<const char*>(data) + std::min(pos, size), std::min(n, size - std::min(pos, size)));
    pos += n;
    // gRPC refuses header values with control characters on the client side.
    for (char& c : auth) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '.';
    }
  }
  const std::string payload(reinterpret_cast<const char*>(data) + std::min(pos, size),
                            size - std::min(pos, size));
  const std::string* auth_ptr = custom_auth ? &auth : nullptr;
  grpc::Status status;
  switch (method.kind) {
    case Kind::kUnary:
      status = Unary(method.path, Prepared(method, payload), auth_ptr);
      break;
    case Kind::kServerStream:
      status = ServerStream(method.path, Prepared(method, payload), auth_ptr);
      break;
    case Kind::kClientStream: {
      std::vector<std::string> messages;
      size_t p = 0;
      while (p + 2 <= payload.size() && messages.size() < 64) {
        uint16_t n;
        std::memcpy(&n, payload.data() + p, 2);
        p += 2;
        const size_t take = std::min<size_t>(n, payload.size() - p);
        messages.push_back(Prepared(method, payload.substr(p, take)));
        p += take;
      }
      status = ClientStream(method.path, messages, auth_ptr);
      break;
    }
  }
  if (Finding(status.error_code())) {
    Die(absl::StrCat(method.path, " answered ", CodeName(status.error_code()), ": ",
                     status.error_message()));
  }
  int64_t inputs;
  {
    std::lock_guard<std::mutex> lock(target->mu);
    ++target->codes[CodeName(status.error_code())];
    inputs = ++target->inputs;
  }
  if (inputs % 32 == 0) CleanUp();
  return 0;
}
