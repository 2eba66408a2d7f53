#include "tests/fuzz/request_fuzzer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "grpcpp/grpcpp.h"
#include "kernelserve/v1/bench.grpc.pb.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/pool.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/security/tokens.h"
#include "server/server.h"
#include "server/test_util.h"
#include "tests/bad_input_corpus.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace fuzz {
namespace {

namespace pb = ::kernelserve::v1;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// kBidiStream inputs are framed like kClientStream ones (Framed).
enum class Kind { kUnary, kClientStream, kServerStream, kBidiStream };

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
      {"/kernelserve.v1.BenchService/Submit", Kind::kUnary, &pb::SubmitBenchRequest::default_instance()},
      {"/kernelserve.v1.BenchService/Watch", Kind::kServerStream, &pb::WatchBenchRequest::default_instance()},
      {"/kernelserve.v1.BenchService/Get", Kind::kUnary, &pb::GetBenchRequest::default_instance()},
      {"/kernelserve.v1.BenchService/List", Kind::kUnary, &pb::ListBenchRequest::default_instance()},
      {"/kernelserve.v1.BenchService/Cancel", Kind::kUnary, &pb::CancelBenchRequest::default_instance()},
      {"/kernelserve.v1.BenchService/ListVariants", Kind::kUnary, &pb::ListVariantsRequest::default_instance()},
      {"/kernelserve.v1.DeviceService/Drain", Kind::kUnary, &pb::DrainDeviceRequest::default_instance()},
      {"/kernelserve.v1.KernelService/DecodeAttention", Kind::kUnary,
       &pb::DecodeAttentionRequest::default_instance()},
      {"/kernelserve.v1.KernelService/Session", Kind::kBidiStream, &pb::SessionRequest::default_instance()},
  };
  return *methods;
}

constexpr char kToken[] = "fuzz-token";        // tenant "fuzzer"
constexpr char kAdminToken[] = "fuzz-admin";   // tenant "fuzz-admin", admin (Drain, every tenant's jobs)
constexpr char kSubmit[] = "/kernelserve.v1.BenchService/Submit";
constexpr char kDrain[] = "/kernelserve.v1.DeviceService/Drain";

// The harness's own server options (README.md): what bounds one input's cost.
constexpr int64_t kMaxJobMb = 64;         // --bench_max_job_mb
constexpr double kMaxGateFlops = 1e7;     // --bench_max_gate_gflops=0.01 (host variants: 25x)
constexpr double kMinSustainedS = 0.02;   // --bench_min_sustained_s

struct Target {
  std::unique_ptr<KernelServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::string buffer_id, pool_id, kv_pool_id, job_id;  // what "B", "P", "H" and "J" become
  std::mutex mu;
  std::map<std::string, int64_t> codes;
  int64_t inputs = 0;
  int64_t jobs_accepted = 0;
  std::map<std::string, int64_t> job_states;  // final states of the settled jobs
  std::set<std::string> stuck;  // jobs that did not stop after a cancel (not waited for again)
  std::map<std::string, int64_t> warnings;  // by kind: SLOW, SUSPECT
  bool strict = false;                      // KS_FUZZ_STRICT: warnings are findings
  int job_ms = 200;  // how long a submitted job may run before the harness cancels it
};

Target* target = nullptr;

void Die(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Server-side trouble that is not a crash (a Submit that takes seconds, a
// job that ignores its cancel, a finished job with a non-finite time): the
// first few are printed as "FUZZ SLOW: ..." / "FUZZ SUSPECT: ...", all are
// counted in the summary; with KS_FUZZ_STRICT=1 each is a finding.
void Warn(const std::string& kind, const std::string& what) {
  if (target->strict) Die(absl::StrCat(kind, ": ", what));
  int64_t n;
  {
    std::lock_guard<std::mutex> lock(target->mu);
    n = ++target->warnings[kind];
  }
  if (n <= 5) {
    std::fprintf(stderr, "FUZZ %s: %s%s\n", kind.c_str(), what.c_str(),
                 n == 5 ? " (further ones only counted)" : "");
  }
}

testing::RawCall Call(const char* path, const std::string* auth,
                      std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  testing::RawCall call;
  call.method = path;
  call.metadata = {{"authorization", auth ? *auth : absl::StrCat("Bearer ", kToken)}};
  call.timeout = deadline;
  return call;
}

const std::string& AdminAuth() {
  static const std::string* auth = new std::string(absl::StrCat("Bearer ", kAdminToken));
  return *auth;
}

grpc::Status Unary(const char* path, const std::string& request, const std::string* auth,
                   std::string* response = nullptr) {
  return testing::RawUnary(target->channel.get(), Call(path, auth), request, response);
}

grpc::Status ClientStream(const char* path, const std::vector<std::string>& messages,
                          const std::string* auth, std::string* response = nullptr) {
  return testing::RawClientStream(target->channel.get(), Call(path, auth), messages, response);
}

grpc::Status BidiStream(const char* path, const std::vector<std::string>& messages, const std::string* auth) {
  return testing::RawBidiStream(target->channel.get(), Call(path, auth), messages);
}

// Reads at most kMaxStreamMessages (a read of 2^20 pool rows would stream
// gigabytes); then cancels.
constexpr int kMaxStreamMessages = 64;
grpc::Status ServerStream(const char* path, const std::string& request, const std::string* auth,
                          std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  return testing::RawServerStream(target->channel.get(), Call(path, auth, deadline), request, kMaxStreamMessages);
}

// buffer_id "B" / pool_id "P" / job_id "J" anywhere in the message become
// the real ids, and so does a map value "B" (BenchInputs.buffers: input name
// -> buffer id).
void Substitute(Message* m) {
  const auto* d = m->GetDescriptor();
  const auto* r = m->GetReflection();
  const bool map_entry = d->options().map_entry();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->type() == FieldDescriptor::TYPE_STRING && !f->is_repeated()) {
      const std::string v = r->GetString(*m, f);
      if ((f->name() == "buffer_id" || f->name() == "id" || (map_entry && f->name() == "value")) && v == "B") {
        r->SetString(m, f, target->buffer_id);
      } else if (f->name() == "pool_id" && v == "P") {
        r->SetString(m, f, target->pool_id);
      } else if (f->name() == "pool_id" && v == "H") {
        r->SetString(m, f, target->kv_pool_id);
      } else if (f->name() == "job_id" && v == "J") {
        r->SetString(m, f, target->job_id);
      }
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE && !f->is_repeated() && r->HasField(*m, f)) {
      Substitute(r->MutableMessage(m, f));
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE && f->is_repeated()) {
      for (int k = 0; k < r->FieldSize(*m, f); ++k) Substitute(r->MutableRepeatedMessage(m, f, k));
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

// Every job (any tenant: the admin lists them all) still queued or running.
std::vector<std::string> ActiveJobs() {
  pb::ListBenchRequest req;
  req.add_states(pb::JOB_QUEUED);
  req.add_states(pb::JOB_RUNNING);
  req.set_summary(true);
  req.set_limit(1000);
  std::string bytes;
  std::vector<std::string> ids;
  grpc::Status s = Unary("/kernelserve.v1.BenchService/List", req.SerializeAsString(), &AdminAuth(), &bytes);
  if (!s.ok()) {
    Die(absl::StrCat("BenchService/List (harness) answered ", CodeName(s.error_code()), ": ", s.error_message()));
  }
  pb::ListBenchResponse list;
  list.ParseFromString(bytes);
  for (const auto& j : list.jobs()) ids.push_back(j.id());
  return ids;
}

// A job must never end with a status the server may not give a bad request:
// a spec that passed Submit's validation and then failed INTERNAL is a
// validation gap (or a server bug).
void CheckFinalJob(const std::string& id) {
  pb::GetBenchRequest req;
  req.set_job_id(id);
  std::string bytes;
  grpc::Status s = Unary("/kernelserve.v1.BenchService/Get", req.SerializeAsString(), &AdminAuth(), &bytes);
  if (!s.ok()) return;  // NOT_FOUND etc.: nothing to check
  pb::BenchJob job;
  job.ParseFromString(bytes);
  {
    std::lock_guard<std::mutex> lock(target->mu);
    ++target->job_states[pb::BenchJobState_Name(job.state())];
  }
  if (job.state() == pb::JOB_FAILED && Finding(static_cast<grpc::StatusCode>(job.error_code()))) {
    Die(absl::StrCat("benchmark job ", id, " (", job.shape_desc(), ") failed with ",
                     CodeName(static_cast<grpc::StatusCode>(job.error_code())), ": ", job.error(),
                     "\nspec: ", job.spec().ShortDebugString()));
  }
  if (job.state() != pb::JOB_DONE) return;
  for (const pb::VariantResult& r : job.results()) {
    if (r.timed() && !(std::isfinite(r.time().value_ms()) && r.time().value_ms() >= 0 && r.time().count() > 0)) {
      Warn("SUSPECT", absl::StrCat("benchmark job ", id, " is done with variant ", r.variant(), " timed at ",
                                   r.time().value_ms(), " ms over ", r.time().count(), " launches (", r.method(),
                                   "); spec: ", job.spec().ShortDebugString()));
    }
  }
}

// After a Submit: lets the job (if one was made) run for target->job_ms,
// following its events as a client would, then cancels every job still
// queued or running and waits until they stopped, so no job outlives its
// input (each would hold the device, the per-submitter limit and memory).
void SettleJobs(const std::string& submitted) {
  if (!submitted.empty()) {
    pb::WatchBenchRequest w;
    w.set_job_id(submitted);
    grpc::Status s = ServerStream("/kernelserve.v1.BenchService/Watch", w.SerializeAsString(), &AdminAuth(),
                                  std::chrono::milliseconds(target->job_ms));
    if (Finding(s.error_code())) {
      Die(absl::StrCat("BenchService/Watch of job ", submitted, " answered ", CodeName(s.error_code()), ": ",
                       s.error_message()));
    }
  }
  std::vector<std::string> touched;
  if (!submitted.empty()) touched.push_back(submitted);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int round = 0;; ++round) {
    std::vector<std::string> active;
    for (std::string& id : ActiveJobs()) {
      if (!target->stuck.count(id)) active.push_back(std::move(id));
    }
    if (active.empty()) break;
    if (std::chrono::steady_clock::now() > give_up) {
      // Not a crash, but worth a look: a cancelled job that does not stop
      // (cancellation is checked between launches, not inside input
      // generation). Keep fuzzing without waiting for it again.
      for (const std::string& id : active) {
        target->stuck.insert(id);
        pb::GetBenchRequest g;
        g.set_job_id(id);
        std::string bytes;
        pb::BenchJob job;
        if (Unary("/kernelserve.v1.BenchService/Get", g.SerializeAsString(), &AdminAuth(), &bytes).ok()) {
          job.ParseFromString(bytes);
        }
        Warn("SLOW", absl::StrCat("benchmark job ", id, " still ", pb::BenchJobState_Name(job.state()),
                                  " 10 s after it was cancelled; spec: ", job.spec().ShortDebugString()));
      }
      break;
    }
    for (const std::string& id : active) {
      if (round == 0) touched.push_back(id);
      pb::CancelBenchRequest c;
      c.set_job_id(id);
      c.set_reason("fuzz harness");
      grpc::Status s = Unary("/kernelserve.v1.BenchService/Cancel", c.SerializeAsString(), &AdminAuth());
      if (Finding(s.error_code())) {
        Die(absl::StrCat("BenchService/Cancel (harness) answered ", CodeName(s.error_code()), ": ",
                         s.error_message()));
      }
    }
    if (round > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const std::string& id : touched) CheckFinalJob(id);
}

// After a Drain: device 0 back in service, so later inputs are not refused
// with UNAVAILABLE (a finding for every other method).
void Undrain() {
  pb::DrainDeviceRequest req;
  req.set_index(0);
  req.set_undrain(true);
  grpc::Status s = Unary(kDrain, req.SerializeAsString(), &AdminAuth());
  if (!s.ok()) Die(absl::StrCat("cannot undrain device 0: ", CodeName(s.error_code()), ": ", s.error_message()));
}

// Frees what inputs created (other than B, P and H) so the memory limit keeps
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
      if (p.id() == target->pool_id || p.id() == target->kv_pool_id) continue;
      pb::DeletePoolRequest req;
      req.set_pool_id(p.id());
      Unary("/kernelserve.v1.PoolService/Delete", req.SerializeAsString(), nullptr);
    }
  }
  SettleJobs("");
  pb::ListDevicesResponse devices;
  if (!Unary("/kernelserve.v1.DeviceService/List", "", nullptr, &bytes).ok() ||
      !devices.ParseFromString(bytes) || devices.devices_size() == 0 ||
      devices.devices(0).state() != pb::HEALTHY) {
    Die("the device is no longer healthy or the server stopped answering");
  }
}

using corpus::Bf16Bytes;
using corpus::Int32Bytes;
using corpus::SmallJob;
using corpus::Tensor;

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
// The same with the admin token (byte 1's low 3 bits == 7).
std::string AdminInput(const char* path, const std::string& payload) {
  return std::string(1, static_cast<char>(MethodIndex(path))) + std::string(1, '\x07') + payload;
}

// The project's bad-input corpus (tests/bad_input_corpus.h) in this format,
// naming the placeholders; client-stream cases with a message over the 2-byte
// framing are left out.
void AddCorpusSeeds(std::vector<std::string>* seeds) {
  for (const corpus::BadInput& in : corpus::BadInputs({"B", "P", "H", "J"})) {
    std::string input(1, static_cast<char>(MethodIndex(in.method.c_str())));
    switch (in.auth) {
      case corpus::Auth::kTenant:
        input += '\x01';
        break;
      case corpus::Auth::kAdmin:
        input += '\x07';
        break;
      case corpus::Auth::kNone:  // the nearest this format has: an empty header
        input += std::string("\x00\x00", 2);
        break;
      case corpus::Auth::kMalformed: {
        const std::string header = "Basic dXNlcjpwYXNz";
        input += std::string(1, '\x00') + std::string(1, static_cast<char>(header.size())) + header;
        break;
      }
    }
    if (in.kind == corpus::Kind::kClientStream) {
      bool fits = true;
      for (const std::string& m : in.messages) fits = fits && m.size() <= 0xFFFF;
      if (!fits) continue;
      input += Framed(in.messages);
    } else if (!in.messages.empty()) {
      input += in.messages[0];
    }
    seeds->push_back(std::move(input));
  }
}

std::string SubmitInput(const pb::BenchJobSpec& spec) {
  pb::SubmitBenchRequest r;
  *r.mutable_spec() = spec;
  return Input(kSubmit, r.SerializeAsString());
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
    // The same call on a session, between a request with no call and one
    // with the inline form.
    pb::SessionRequest with_buffer, empty, inline_call;
    *with_buffer.mutable_attention() = r;
    with_buffer.set_id(1);
    empty.set_id(2);
    r.mutable_q()->clear_buffer_id();
    *r.mutable_q()->mutable_tensor() = Tensor(pb::BF16, {1, 1, 4, 128}, Bf16Bytes(512, 1));
    r.mutable_output()->set_to_buffer(false);
    *inline_call.mutable_attention() = r;
    inline_call.set_id(3);
    seeds.push_back(Input("/kernelserve.v1.KernelService/Session",
                          Framed({with_buffer.SerializeAsString(), empty.SerializeAsString(),
                                  inline_call.SerializeAsString()})));
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
  {
    // Benchmark jobs that run: every op, every method the CPU backend has,
    // several variants (the test-only wrong ones too), uploaded buffers.
    pb::BenchJobSpec a = SmallJob(pb::OP_ATTENTION);
    a.add_variants("cpu");
    a.add_variants("oracle");
    a.add_variants("test.wrong");
    seeds.push_back(SubmitInput(a));
    pb::BenchJobSpec f = SmallJob(pb::OP_FP8_ATTENTION);
    f.add_variants("cpu.lean");
    f.add_variants("cpu.naive");
    f.mutable_attention()->set_hadamard(true);
    f.mutable_inputs()->set_kind(pb::INPUT_LONG_TAIL);
    f.mutable_method()->set_method(pb::METHOD_PASSES);
    f.mutable_method()->set_passes(2);
    seeds.push_back(SubmitInput(f));
    pb::BenchJobSpec m = SmallJob(pb::OP_MLA_DECODE);
    m.mutable_method()->set_method(pb::METHOD_SUSTAINED);
    m.add_variants("cpu");
    m.add_variants("test.nan");
    seeds.push_back(SubmitInput(m));
    for (pb::BenchOp op : {pb::OP_MOE_GATEUP, pb::OP_MOE_DOWN, pb::OP_MOE_LAYER}) {
      pb::BenchJobSpec e = SmallJob(op);
      e.mutable_method()->set_l2_flush(op == pb::OP_MOE_DOWN);
      e.set_tolerance(0.5);
      seeds.push_back(SubmitInput(e));
    }
    pb::BenchJobSpec b = SmallJob(pb::OP_ATTENTION);  // q from the B buffer [1,1,4,128]
    b.mutable_attention()->set_heads_q(1);
    b.mutable_inputs()->set_kind(pb::INPUT_BUFFERS);
    (*b.mutable_inputs()->mutable_buffers())["q"] = "B";
    b.set_priority(3);
    b.set_time_limit_s(30);
    seeds.push_back(SubmitInput(b));
    // Hostile specs, refused at Submit: a huge shape, zero and negative
    // dims, an unknown op, variant and method, absurd counts and limits.
    pb::BenchJobSpec h = SmallJob(pb::OP_ATTENTION);
    h.mutable_attention()->set_batch(int64_t{1} << 40);
    h.mutable_attention()->set_seq_q(int64_t{1} << 20);
    seeds.push_back(SubmitInput(h));
    pb::BenchJobSpec z = SmallJob(pb::OP_MOE_LAYER);
    z.mutable_moe()->set_hidden(0);
    z.mutable_moe()->set_top_k(-3);
    seeds.push_back(SubmitInput(z));
    pb::BenchJobSpec u = SmallJob(pb::OP_MLA_DECODE);
    u.set_op(static_cast<pb::BenchOp>(42));
    seeds.push_back(SubmitInput(u));
    u = SmallJob(pb::OP_MLA_DECODE);
    u.add_variants("no-such-variant");
    seeds.push_back(SubmitInput(u));
    u = SmallJob(pb::OP_ATTENTION);
    u.mutable_method()->set_method(static_cast<pb::BenchMethod>(9));
    u.mutable_method()->set_iters(std::numeric_limits<int32_t>::max());
    u.mutable_method()->set_window_s(std::numeric_limits<double>::infinity());
    u.set_time_limit_s(1e18);
    seeds.push_back(SubmitInput(u));
    u = SmallJob(pb::OP_MOE_GATEUP);  // the graph method needs a backend with graph replay
    u.mutable_method()->set_method(pb::METHOD_GRAPH);
    u.set_tolerance(std::numeric_limits<double>::quiet_NaN());
    seeds.push_back(SubmitInput(u));

    // The J job (done, with results) and others.
    pb::WatchBenchRequest w;
    w.set_job_id("J");
    seeds.push_back(Input(Methods()[MethodIndex("/kernelserve.v1.BenchService/Watch")].path, w.SerializeAsString()));
    w.set_after_seq(3);
    seeds.push_back(AdminInput(Methods()[MethodIndex("/kernelserve.v1.BenchService/Watch")].path,
                               w.SerializeAsString()));
    pb::GetBenchRequest g;
    g.set_job_id("J");
    seeds.push_back(Input("/kernelserve.v1.BenchService/Get", g.SerializeAsString()));
    pb::ListBenchRequest l;
    l.add_states(pb::JOB_DONE);
    l.set_submitter("fuzzer");
    l.set_limit(5);
    seeds.push_back(Input("/kernelserve.v1.BenchService/List", l.SerializeAsString()));
    pb::CancelBenchRequest c;
    c.set_job_id("J");  // finished: FAILED_PRECONDITION
    c.set_reason("fuzz");
    seeds.push_back(Input("/kernelserve.v1.BenchService/Cancel", c.SerializeAsString()));
    pb::ListVariantsRequest v;
    v.set_op(pb::OP_FP8_ATTENTION);
    seeds.push_back(Input("/kernelserve.v1.BenchService/ListVariants", v.SerializeAsString()));
    // Drain: the admin drains device 0 (the harness undrains it after the
    // input); a bad index; a tenant that is not an admin.
    pb::DrainDeviceRequest d;
    d.set_index(0);
    d.set_reason("fuzz");
    seeds.push_back(AdminInput(kDrain, d.SerializeAsString()));
    d.set_index(7);
    seeds.push_back(AdminInput(kDrain, d.SerializeAsString()));
    d.set_index(0);
    seeds.push_back(Input(kDrain, d.SerializeAsString()));
  }
  // A malformed auth header and a truncated message.
  seeds.push_back(std::string("\x0e\x00\x05" "Basic", 8));
  seeds.push_back(seeds[0].substr(0, seeds[0].size() / 2));
  AddCorpusSeeds(&seeds);
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
      case FieldDescriptor::CPPTYPE_ENUM:  // ListBenchRequest.states
        if (n > 0 && rng() % 2 == 0) {
          r->RemoveLast(m, f);
        } else {
          r->AddEnumValue(m, f, static_cast<int>(rng() % 10) - 1);
        }
        return;
      case FieldDescriptor::CPPTYPE_STRING: {  // BenchJobSpec.variants
        static const char* const kVariants[] = {"cpu", "oracle", "cpu.exact", "cpu.lean", "cpu.naive",
                                                "test.wrong", "test.nan", "cuda", "", "no-such"};
        const char* name = kVariants[rng() % 10];
        if (n > 0 && rng() % 3 == 0) {
          r->RemoveLast(m, f);
        } else if (n > 0 && rng() % 2 == 0) {
          r->SetRepeatedString(m, f, static_cast<int>(rng() % n), name);
        } else {
          r->AddString(m, f, name);
        }
        return;
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:  // also map entries (BenchInputs.buffers)
        if (depth >= 6) return;
        if (n == 0 || (f->is_map() && rng() % 3 == 0)) {
          MutateField(r->AddMessage(m, f), rng, depth + 1);
        } else {
          MutateField(r->MutableRepeatedMessage(m, f, static_cast<int>(rng() % n)), rng, depth + 1);
        }
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
    case FieldDescriptor::CPPTYPE_UINT64:  // BenchInputs.seed
      r->SetUInt64(m, f, static_cast<uint64_t>(v));
      return;
    case FieldDescriptor::CPPTYPE_UINT32:
      r->SetUInt32(m, f, static_cast<uint32_t>(v));
      return;
    case FieldDescriptor::CPPTYPE_FLOAT:
      r->SetFloat(m, f, static_cast<float>(v));
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
      static const double kCounts[] = {1e-3, 0.02, 3, 30, 3600, 3601, 1e18, -1e-9};  // seconds, tolerances
      r->SetDouble(m, f, rng() % 2 ? kDoubles[rng() % 8] : kCounts[rng() % 8]);
      return;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s = r->GetString(*m, f);
      if (f->type() == FieldDescriptor::TYPE_STRING && f->name() == "key") {  // a BenchInputs.buffers name
        static const char* const kInputs[] = {"q", "k", "v", "q_descale", "kv", "x", "w13", "topk_ids", "", "nope"};
        r->SetString(m, f, kInputs[rng() % 10]);
      } else if (f->type() == FieldDescriptor::TYPE_STRING) {
        static const char* const kIds[] = {"B", "P", "J", "", "buf-x", "job-000000000000", "../../etc/passwd",
                                           "B"};
        r->SetString(m, f, kIds[rng() % 8]);
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
  if (method.kind == Kind::kClientStream || method.kind == Kind::kBidiStream) {
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
  absl::StrAppend(&out, "; benchmark jobs accepted: ", target->jobs_accepted, ", ended");
  for (const auto& [state, n] : target->job_states) absl::StrAppend(&out, " ", state, "=", n);
  for (const auto& [kind, n] : target->warnings) absl::StrAppend(&out, "; FUZZ ", kind, " warnings: ", n);
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
  std::ofstream(tokens) << kernelserve::security::TokenFileLine("fuzzer", kToken, false) << "\n"
                        << kernelserve::security::TokenFileLine("fuzz-admin", kAdminToken, true) << "\n";
  kernelserve::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.backend = "cpu";
  options.cpu_threads = 1;
  options.memory_limit_mb = 64;
  options.max_message_mb = 8;
  options.security.tokens_file = tokens;
  // Benchmark jobs in memory (no --data_dir); a cap on a job's size so a
  // large-but-allowed spec cannot exhaust the process; a cheap correctness
  // gate; short sustained windows so those jobs can finish; the test-only
  // variants (wrong and NaN on purpose) so failing gates run too.
  options.bench.max_job_bytes = kMaxJobMb * 1048576.0;
  options.bench.max_gate_flops = kMaxGateFlops;
  options.bench.min_warmin_s = kMinSustainedS;
  options.bench.min_window_s = kMinSustainedS;
  options.bench.test_variants = true;
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
  // The H pool: per-head rows of 64 KiB, so a read naming many slots names gigabytes.
  create.set_kind(pb::PER_HEAD_KV);
  create.set_num_slots(4);
  create.set_dtype(pb::BF16);
  create.set_num_heads(64);
  create.set_head_dim(256);
  if (!Unary("/kernelserve.v1.PoolService/Create", create.SerializeAsString(), nullptr, &bytes).ok()) {
    Die("cannot create the H pool");
  }
  pool.ParseFromString(bytes);
  target->kv_pool_id = pool.id();
  // The J job: finished, with results (passed and failed gates), so Get,
  // Watch and Cancel find a real job. It also measures the device's
  // ceilings once, here rather than in some input's time.
  if (const char* ms = getenv("KS_FUZZ_JOB_MS"); ms != nullptr && *ms != '\0') target->job_ms = atoi(ms);
  if (const char* st = getenv("KS_FUZZ_STRICT"); st != nullptr && *st != '\0' && *st != '0') target->strict = true;
  // libFuzzer ends with exit(): the summary of what the inputs got.
  std::atexit([] { std::fprintf(stderr, "request_fuzzer: %s\n", CodeSummary().c_str()); });
  {
    pb::SubmitBenchRequest submit;
    *submit.mutable_spec() = SmallJob(pb::OP_ATTENTION);
    submit.mutable_spec()->add_variants("cpu");
    submit.mutable_spec()->add_variants("test.wrong");
    grpc::Status s = Unary(kSubmit, submit.SerializeAsString(), nullptr, &bytes);
    if (!s.ok()) Die(absl::StrCat("cannot submit the J job: ", s.error_message()));
    pb::BenchJob job;
    job.ParseFromString(bytes);
    target->job_id = job.id();
    pb::WatchBenchRequest w;
    w.set_job_id(job.id());
    s = ServerStream("/kernelserve.v1.BenchService/Watch", w.SerializeAsString(), nullptr,
                     std::chrono::seconds(300));
    pb::GetBenchRequest g;
    g.set_job_id(job.id());
    if (!s.ok() || !Unary("/kernelserve.v1.BenchService/Get", g.SerializeAsString(), nullptr, &bytes).ok() ||
        !job.ParseFromString(bytes) || job.state() != pb::JOB_DONE) {
      Die(absl::StrCat("the J job did not finish: ", s.error_message(), " ", job.ShortDebugString()));
    }
  }
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
  const std::string* auth_ptr = custom_auth ? &auth : (data[1] & 7) == 7 ? &AdminAuth() : nullptr;
  const bool submit = std::strcmp(method.path, kSubmit) == 0;
  std::string response;
  grpc::Status status;
  const auto start = std::chrono::steady_clock::now();
  switch (method.kind) {
    case Kind::kUnary:
      status = Unary(method.path, Prepared(method, payload), auth_ptr, submit ? &response : nullptr);
      break;
    case Kind::kServerStream:
      status = ServerStream(method.path, Prepared(method, payload), auth_ptr);
      break;
    case Kind::kClientStream:
    case Kind::kBidiStream: {
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
      status = method.kind == Kind::kClientStream ? ClientStream(method.path, messages, auth_ptr)
                                                  : BidiStream(method.path, messages, auth_ptr);
      break;
    }
  }
  if (Finding(status.error_code())) {
    Die(absl::StrCat(method.path, " answered ", CodeName(status.error_code()), ": ",
                     status.error_message()));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (submit && seconds > 5) {
    // Submit only validates and queues; seconds of it are a server-side
    // problem (a hang that costs a core), not a crash: reported, not fatal.
    // libFuzzer's -timeout=N turns it into a finding with the input saved.
    pb::SubmitBenchRequest req;
    req.ParseFromString(payload);
    Warn("SLOW", absl::StrFormat("BenchService/Submit took %.1f s (%s): %s", seconds, CodeName(status.error_code()),
                                 req.ShortDebugString()));
  }
  if (submit) {
    // Also after a refusal or a deadline: a Submit the client gave up on may
    // still have queued a job.
    pb::BenchJob job;
    if (status.ok()) job.ParseFromString(response);
    SettleJobs(job.id());
  } else if (std::strcmp(method.path, kDrain) == 0) {
    Undrain();
  }
  int64_t inputs;
  {
    std::lock_guard<std::mutex> lock(target->mu);
    ++target->codes[CodeName(status.error_code())];
    inputs = ++target->inputs;
    if (submit && status.ok()) ++target->jobs_accepted;
  }
  if (inputs % 32 == 0) CleanUp();
  return 0;
}
