#include "tests/bad_input_corpus.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernelserve/v1/bench.pb.h"
#include "kernelserve/v1/device.pb.h"
#include "kernelserve/v1/kernel.pb.h"
#include "kernelserve/v1/pool.pb.h"
#include "kernelserve/v1/tensor.pb.h"

namespace kernelserve {
namespace corpus {
namespace {

namespace pb = ::kernelserve::v1;
using Code = grpc::StatusCode;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const std::string kLongId(64 << 10, 'x');  // over any metadata limit if echoed whole
const std::string kLongText(1024, 'y');    // over the kept-string limit

pb::Tensor Bf16Tensor(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Tensor(pb::BF16, shape, Bf16Bytes(n));
}

pb::Tensor Int32s(const std::vector<int32_t>& v) {
  return Tensor(pb::INT32, {static_cast<int64_t>(v.size())}, Int32Bytes(v));
}

pb::TensorRef Ref(pb::Tensor t) {
  pb::TensorRef r;
  *r.mutable_tensor() = std::move(t);
  return r;
}

pb::TensorRef BufRef(const std::string& id) {
  pb::TensorRef r;
  r.set_buffer_id(id);
  return r;
}

constexpr char kAttention[] = "/kernelserve.v1.KernelService/Attention";
constexpr char kFp8[] = "/kernelserve.v1.KernelService/Fp8Attention";
constexpr char kMla[] = "/kernelserve.v1.KernelService/MlaDecode";
constexpr char kMoe[] = "/kernelserve.v1.KernelService/Moe";
constexpr char kDecode[] = "/kernelserve.v1.KernelService/DecodeAttention";
constexpr char kUpload[] = "/kernelserve.v1.BufferService/Upload";
constexpr char kDownload[] = "/kernelserve.v1.BufferService/Download";
constexpr char kFree[] = "/kernelserve.v1.BufferService/Free";
constexpr char kListBuffers[] = "/kernelserve.v1.BufferService/List";
constexpr char kCreate[] = "/kernelserve.v1.PoolService/Create";
constexpr char kWrite[] = "/kernelserve.v1.PoolService/Write";
constexpr char kRead[] = "/kernelserve.v1.PoolService/Read";
constexpr char kStats[] = "/kernelserve.v1.PoolService/Stats";
constexpr char kDelete[] = "/kernelserve.v1.PoolService/Delete";
constexpr char kListPools[] = "/kernelserve.v1.PoolService/List";
constexpr char kDevices[] = "/kernelserve.v1.DeviceService/List";
constexpr char kDrain[] = "/kernelserve.v1.DeviceService/Drain";
constexpr char kProbe[] = "/kernelserve.v1.DeviceService/Probe";
constexpr char kSubmit[] = "/kernelserve.v1.BenchService/Submit";
constexpr char kWatch[] = "/kernelserve.v1.BenchService/Watch";
constexpr char kGet[] = "/kernelserve.v1.BenchService/Get";
constexpr char kListJobs[] = "/kernelserve.v1.BenchService/List";
constexpr char kCancel[] = "/kernelserve.v1.BenchService/Cancel";
constexpr char kVariants[] = "/kernelserve.v1.BenchService/ListVariants";

Kind KindOf(const std::string& method) {
  if (method == kUpload || method == kWrite) return Kind::kClientStream;
  if (method == kDownload || method == kRead || method == kWatch) return Kind::kServerStream;
  return Kind::kUnary;
}

class Builder {
 public:
  // One case: `request` serialized (a client stream gets `more` after it).
  void Add(std::string name, const char* method, const google::protobuf::Message& request, Code code,
           std::string substr, std::vector<const google::protobuf::Message*> more = {}) {
    BadInput in;
    in.name = std::move(name);
    in.method = method;
    in.kind = KindOf(method);
    in.messages.push_back(request.SerializeAsString());
    for (const auto* m : more) in.messages.push_back(m->SerializeAsString());
    in.code = code;
    in.substr = std::move(substr);
    out_.push_back(std::move(in));
  }
  // A case given as raw messages (an empty stream, undecodable bytes).
  void AddRaw(std::string name, const char* method, std::vector<std::string> messages, Code code,
              std::string substr) {
    BadInput in;
    in.name = std::move(name);
    in.method = method;
    in.kind = KindOf(method);
    in.messages = std::move(messages);
    in.code = code;
    in.substr = std::move(substr);
    out_.push_back(std::move(in));
  }
  BadInput& last() { return out_.back(); }
  std::vector<BadInput> Take() { return std::move(out_); }

 private:
  std::vector<BadInput> out_;
};

pb::AttentionRequest GoodAttention() {
  pb::AttentionRequest r;
  *r.mutable_q() = Ref(Bf16Tensor({1, 2, 4, 64}));
  *r.mutable_k() = Ref(Bf16Tensor({1, 1, 6, 64}));
  *r.mutable_v() = Ref(Bf16Tensor({1, 1, 6, 64}));
  r.set_causal(true);
  return r;
}

void KernelCases(const CorpusIds& ids, Builder* b) {
  using R = pb::AttentionRequest;
  auto attention = [&](const std::string& name, const std::function<void(R*)>& edit, Code code,
                       const std::string& substr) {
    R r = GoodAttention();
    edit(&r);
    b->Add("Attention: " + name, kAttention, r, code, substr);
  };
  attention("nothing", [](R* r) { r->Clear(); }, Code::INVALID_ARGUMENT, "q: required");
  attention("q fp32", [](R* r) { *r->mutable_q() = Ref(Tensor(pb::FP32, {1, 2, 4, 64}, std::string(2048, '\0'))); },
            Code::INVALID_ARGUMENT, "q");
  attention("q unknown dtype", [](R* r) { r->mutable_q()->mutable_tensor()->set_dtype(static_cast<pb::DType>(99)); },
            Code::INVALID_ARGUMENT, "q.dtype: unknown dtype value 99");
  attention("q zero dim", [](R* r) { r->mutable_q()->mutable_tensor()->set_shape(2, 0); }, Code::INVALID_ARGUMENT,
            "q.shape[2]: expected > 0, got 0");
  attention("q negative dim", [](R* r) { r->mutable_q()->mutable_tensor()->set_shape(0, -1); },
            Code::INVALID_ARGUMENT, "q.shape[0]: expected > 0, got -1");
  attention("q overflowing shape",
            [](R* r) {
              r->mutable_q()->mutable_tensor()->set_shape(0, int64_t{1} << 40);
              r->mutable_q()->mutable_tensor()->set_shape(1, int64_t{1} << 40);
            },
            Code::INVALID_ARGUMENT, "q.shape");
  attention("q short data", [](R* r) { r->mutable_q()->mutable_tensor()->mutable_data()->pop_back(); },
            Code::INVALID_ARGUMENT, "q.data: expected 1024 bytes");
  attention("q rank 3", [](R* r) { r->mutable_q()->mutable_tensor()->mutable_shape()->RemoveLast(); },
            Code::INVALID_ARGUMENT, "q");
  attention("k head_dim", [](R* r) { *r->mutable_k() = Ref(Bf16Tensor({1, 1, 6, 32})); }, Code::INVALID_ARGUMENT,
            "k.shape[3]");
  attention("heads not a multiple", [](R* r) {
    *r->mutable_q() = Ref(Bf16Tensor({1, 3, 4, 64}));
    *r->mutable_k() = Ref(Bf16Tensor({1, 2, 6, 64}));
    *r->mutable_v() = Ref(Bf16Tensor({1, 2, 6, 64}));
  }, Code::INVALID_ARGUMENT, "");
  attention("v missing", [](R* r) { r->clear_v(); }, Code::INVALID_ARGUMENT, "v: required");
  attention("unknown buffer", [](R* r) { *r->mutable_q() = BufRef("buf-00000000000000000000000000000000"); },
            Code::NOT_FOUND, "q.buffer_id: no buffer \"buf-00000000000000000000000000000000\"");
  attention("64 KiB buffer id", [](R* r) { *r->mutable_q() = BufRef(kLongId); }, Code::NOT_FOUND,
            "q.buffer_id: no buffer \"xxxx");
  attention("buffer of the wrong shape", [&](R* r) { *r->mutable_k() = BufRef(ids.buffer); },
            Code::INVALID_ARGUMENT, "k.shape[3]");
  attention("layout 7", [](R* r) { r->set_layout(static_cast<pb::Layout>(7)); }, Code::INVALID_ARGUMENT, "layout");
  attention("rounding 9", [](R* r) { r->set_rounding(static_cast<pb::Rounding>(9)); }, Code::INVALID_ARGUMENT,
            "rounding");
  attention("softmax_scale NaN", [](R* r) { r->set_softmax_scale(kNaN); }, Code::INVALID_ARGUMENT, "softmax_scale");
  attention("softmax_scale -1", [](R* r) { r->set_softmax_scale(-1); }, Code::INVALID_ARGUMENT, "softmax_scale");
  attention("softmax_scale Inf", [](R* r) { r->set_softmax_scale(kInf); }, Code::INVALID_ARGUMENT,
            "softmax_scale");
  attention("device 5", [](R* r) { r->set_device(5); }, Code::INVALID_ARGUMENT, "device: expected a device index");
  attention("device -1", [](R* r) { r->set_device(-1); }, Code::INVALID_ARGUMENT, "device");
  attention("output label 1 KiB", [](R* r) {
    r->mutable_output()->set_to_buffer(true);
    r->mutable_output()->set_label(kLongText);
  }, Code::INVALID_ARGUMENT, "output.label: expected at most 256 bytes, got 1024");
  attention("a good call", [](R*) {}, Code::OK, "");

  using F = pb::Fp8AttentionRequest;
  auto fp8 = [&](const std::string& name, const std::function<void(F*)>& edit, Code code, const std::string& substr) {
    F r;
    *r.mutable_q() = Ref(Bf16Tensor({1, 1, 4, 128}));
    *r.mutable_k() = Ref(Bf16Tensor({1, 1, 70, 128}));
    *r.mutable_v() = Ref(Bf16Tensor({1, 1, 70, 128}));
    r.set_causal(true);
    edit(&r);
    b->Add("Fp8Attention: " + name, kFp8, r, code, substr);
  };
  fp8("format 9", [](F* r) { r->set_format(static_cast<pb::Fp8Format>(9)); }, Code::INVALID_ARGUMENT, "format");
  fp8("p_mode 7", [](F* r) { r->set_p_mode(static_cast<pb::PMode>(7)); }, Code::INVALID_ARGUMENT, "p_mode");
  fp8("descale_mode 5", [](F* r) { r->set_descale_mode(static_cast<pb::DescaleMode>(5)); }, Code::INVALID_ARGUMENT,
      "descale_mode");
  fp8("head dim 64", [](F* r) {
    *r->mutable_q() = Ref(Bf16Tensor({1, 1, 4, 64}));
    *r->mutable_k() = Ref(Bf16Tensor({1, 1, 70, 64}));
    *r->mutable_v() = Ref(Bf16Tensor({1, 1, 70, 64}));
  }, Code::INVALID_ARGUMENT, "head shape");
  fp8("fp8 q without descale",
      [](F* r) { *r->mutable_q() = Ref(Tensor(pb::FP8_E4M3FN, {1, 1, 4, 128}, std::string(512, '\x30'))); },
      Code::INVALID_ARGUMENT, "");
  fp8("rounding 4", [](F* r) { r->set_rounding(static_cast<pb::Rounding>(4)); }, Code::INVALID_ARGUMENT,
      "rounding");
  fp8("k missing", [](F* r) { r->clear_k(); }, Code::INVALID_ARGUMENT, "k: required");
  fp8("descale unknown buffer", [](F* r) { *r->mutable_q_descale() = BufRef("buf-nope"); }, Code::NOT_FOUND,
      "q_descale.buffer_id");

  using M = pb::MlaDecodeRequest;
  auto mla = [&](const std::string& name, const std::function<void(M*)>& edit, Code code, const std::string& substr) {
    M r;
    *r.mutable_q_lat() = Ref(Bf16Tensor({1, 2, 2, 512}));
    *r.mutable_q_pe() = Ref(Bf16Tensor({1, 2, 2, 64}));
    r.set_pool_id(ids.mla_pool);
    *r.mutable_seq_lens() = Ref(Int32s({3}));
    *r.mutable_kv_indices() = Ref(Int32s({2, 0, 1}));
    *r.mutable_kv_indptr() = Ref(Int32s({0, 3}));
    edit(&r);
    b->Add("MlaDecode: " + name, kMla, r, code, substr);
  };
  mla("a good call", [](M*) {}, Code::OK, "");
  mla("kv and pool", [](M* r) {
    *r->mutable_kv() = Ref(Tensor(pb::FP8_E4M3FN, {1, 3, 576}, std::string(3 * 576, '\x30')));
  }, Code::INVALID_ARGUMENT, "kv, pool_id: give exactly one");
  mla("neither kv nor pool", [](M* r) { r->clear_pool_id(); }, Code::INVALID_ARGUMENT, "kv, pool_id");
  mla("unknown pool", [](M* r) { r->set_pool_id("pool-00000000000000000000000000000000"); }, Code::NOT_FOUND,
      "pool_id: no pool");
  mla("64 KiB pool id", [](M* r) { r->set_pool_id(kLongId); }, Code::NOT_FOUND, "(65536 bytes)");
  mla("per-head pool", [&](M* r) { r->set_pool_id(ids.kv_pool); }, Code::INVALID_ARGUMENT, "is PER_HEAD_KV");
  mla("kv_scale with a pool", [](M* r) { r->set_kv_scale(3); }, Code::INVALID_ARGUMENT,
      "kv_scale: contiguous KV only");
  mla("num_splits -1", [](M* r) { r->set_num_splits(-1); }, Code::INVALID_ARGUMENT, "num_splits");
  mla("num_splits 5000", [](M* r) { r->set_num_splits(5000); }, Code::INVALID_ARGUMENT, "num_splits");
  mla("1024 splits of 1024 rows", [](M* r) {
    *r->mutable_q_lat() = Ref(Bf16Tensor({1, 8, 128, 512}));
    *r->mutable_q_pe() = Ref(Bf16Tensor({1, 8, 128, 64}));
    r->set_num_splits(1024);
    *r->mutable_seq_lens() = Ref(Int32s({8}));
    *r->mutable_kv_indices() = Ref(Int32s({0, 1, 2, 3, 4, 5, 6, 7}));
    *r->mutable_kv_indptr() = Ref(Int32s({0, 8}));
  }, Code::RESOURCE_EXHAUSTED, "op workspace needs 2155872256 bytes");
  mla("kv_indices out of range", [](M* r) { *r->mutable_kv_indices() = Ref(Int32s({2, 0, 8})); },
      Code::INVALID_ARGUMENT, "kv_indices");
  mla("kv_indices negative", [](M* r) { *r->mutable_kv_indices() = Ref(Int32s({-1, 0, 1})); },
      Code::INVALID_ARGUMENT, "kv_indices");
  mla("kv_indptr past the end", [](M* r) { *r->mutable_kv_indptr() = Ref(Int32s({0, 1 << 30})); },
      Code::INVALID_ARGUMENT, "kv_indptr");
  mla("seq_lens int64", [](M* r) {
    *r->mutable_seq_lens() = Ref(Tensor(pb::INT64, {1}, std::string("\x03\0\0\0\0\0\0\0", 8)));
  }, Code::INVALID_ARGUMENT, "seq_lens: expected int32");
  mla("seq_lens 0", [](M* r) { *r->mutable_seq_lens() = Ref(Int32s({0})); }, Code::INVALID_ARGUMENT, "seq_lens");
  mla("seq_lens missing", [](M* r) { r->clear_seq_lens(); }, Code::INVALID_ARGUMENT, "seq_lens");
  mla("200 heads", [](M* r) {
    *r->mutable_q_lat() = Ref(Bf16Tensor({1, 1, 200, 512}));
    *r->mutable_q_pe() = Ref(Bf16Tensor({1, 1, 200, 64}));
  }, Code::INVALID_ARGUMENT, "q_lat.shape[2]");
  mla("q_len 9", [](M* r) {
    *r->mutable_q_lat() = Ref(Bf16Tensor({1, 9, 2, 512}));
    *r->mutable_q_pe() = Ref(Bf16Tensor({1, 9, 2, 64}));
  }, Code::INVALID_ARGUMENT, "q_lat.shape[1]");
  mla("contiguous kv of bf16", [](M* r) {
    r->clear_pool_id();
    r->clear_kv_indices();
    r->clear_kv_indptr();
    r->clear_seq_lens();
    *r->mutable_kv() = Ref(Bf16Tensor({1, 3, 576}));
  }, Code::INVALID_ARGUMENT, "kv");
  mla("contiguous kv_scale NaN", [](M* r) {
    r->clear_pool_id();
    r->clear_kv_indices();
    r->clear_kv_indptr();
    r->clear_seq_lens();
    *r->mutable_kv() = Ref(Tensor(pb::FP8_E4M3FN, {1, 3, 576}, std::string(3 * 576, '\x30')));
    r->set_kv_scale(kNaN);
  }, Code::INVALID_ARGUMENT, "kv_scale");

  using DA = pb::DecodeAttentionRequest;
  // The PER_HEAD_KV pool: bf16, 64 KV heads of 256, 4 slots of page 1.
  auto decode = [&](const std::string& name, const std::function<void(DA*)>& edit, Code code,
                    const std::string& substr) {
    DA r;
    *r.mutable_q() = Ref(Bf16Tensor({1, 2, 64, 256}));
    r.set_pool_id(ids.kv_pool);
    *r.mutable_seq_lens() = Ref(Int32s({3}));
    *r.mutable_kv_indices() = Ref(Int32s({2, 0, 1}));
    *r.mutable_kv_indptr() = Ref(Int32s({0, 3}));
    edit(&r);
    b->Add("DecodeAttention: " + name, kDecode, r, code, substr);
  };
  decode("a good call", [](DA*) {}, Code::OK, "");
  decode("a good call with the oracle", [](DA* r) { r->set_report_error(true); }, Code::OK, "");
  decode("q missing", [](DA* r) { r->clear_q(); }, Code::INVALID_ARGUMENT, "q: required");
  decode("no pool", [](DA* r) { r->clear_pool_id(); }, Code::INVALID_ARGUMENT, "pool_id: required");
  decode("unknown pool", [](DA* r) { r->set_pool_id("pool-00000000000000000000000000000000"); }, Code::NOT_FOUND,
         "pool_id: no pool");
  decode("MLA pool", [&](DA* r) { r->set_pool_id(ids.mla_pool); }, Code::INVALID_ARGUMENT,
         "is MLA_FUSED; decode attention needs a PER_HEAD_KV pool");
  decode("head_dim 128", [](DA* r) { *r->mutable_q() = Ref(Bf16Tensor({1, 2, 64, 128})); }, Code::INVALID_ARGUMENT,
         "q.shape[3]: expected 256 (the pool's head_dim), got 128");
  decode("96 heads", [](DA* r) { *r->mutable_q() = Ref(Bf16Tensor({1, 1, 96, 256})); }, Code::INVALID_ARGUMENT,
         "q.shape[2]: expected a multiple of the pool's num_heads (64)");
  decode("q_len 9", [](DA* r) { *r->mutable_q() = Ref(Bf16Tensor({1, 9, 64, 256})); }, Code::INVALID_ARGUMENT,
         "q.shape[1]: expected q_len in 1..8, got 9");
  decode("seq_lens under q_len", [](DA* r) { *r->mutable_seq_lens() = Ref(Int32s({1})); }, Code::INVALID_ARGUMENT,
         "seq_lens[0]: expected at least q_len (2), got 1");
  decode("q_lens 3 of 2", [](DA* r) { *r->mutable_q_lens() = Ref(Int32s({3})); }, Code::INVALID_ARGUMENT,
         "q_lens[0]: expected 1..2 (q_len), got 3");
  decode("seq_lens under its own q_lens", [](DA* r) {
    *r->mutable_seq_lens() = Ref(Int32s({1}));
    *r->mutable_q_lens() = Ref(Int32s({2}));
  }, Code::INVALID_ARGUMENT, "seq_lens[0]: expected at least q_lens[0] (2), got 1");
  decode("kv_indices out of range", [](DA* r) { *r->mutable_kv_indices() = Ref(Int32s({2, 0, 4})); },
         Code::INVALID_ARGUMENT, "kv_indices[2]: expected a slot in 0..3, got 4");
  decode("kv_indptr short", [](DA* r) { *r->mutable_kv_indptr() = Ref(Int32s({0, 2})); }, Code::INVALID_ARGUMENT,
         "kv_indptr[1] - kv_indptr[0]: expected at least 3 slots");
  decode("kv_indptr missing", [](DA* r) { r->clear_kv_indptr(); }, Code::INVALID_ARGUMENT, "kv_indptr");
  decode("seq_lens int64", [](DA* r) {
    *r->mutable_seq_lens() = Ref(Tensor(pb::INT64, {1}, std::string("\x03\0\0\0\0\0\0\0", 8)));
  }, Code::INVALID_ARGUMENT, "seq_lens: expected int32");
  decode("softmax_scale 0", [](DA* r) { r->set_softmax_scale(0); }, Code::INVALID_ARGUMENT, "softmax_scale");
  decode("rounding 7", [](DA* r) { r->set_rounding(static_cast<pb::Rounding>(7)); }, Code::INVALID_ARGUMENT,
         "rounding");

  using E = pb::MoeRequest;
  auto moe = [&](const std::string& name, const std::function<void(E*)>& edit, Code code, const std::string& substr) {
    E r;
    r.set_stage(pb::GATEUP);
    *r.mutable_x() = Ref(Bf16Tensor({1, 32}));
    *r.mutable_topk_ids() = Ref(Tensor(pb::INT32, {1, 1}, std::string("\x01\0\0\0", 4)));
    *r.mutable_w13() = Ref(Tensor(pb::FP4_E2M1, {2, 64, 32}, std::string(2 * 64 * 16, '\x25')));
    *r.mutable_w13_scales() = Ref(Tensor(pb::E8M0, {2, 64, 1}, std::string(128, '\x7f')));
    r.set_swiglu(true);
    edit(&r);
    b->Add("Moe: " + name, kMoe, r, code, substr);
  };
  moe("a good call", [](E*) {}, Code::OK, "");
  moe("stage 9", [](E* r) { r->set_stage(static_cast<pb::MoeStage>(9)); }, Code::INVALID_ARGUMENT, "stage");
  moe("x missing", [](E* r) { r->clear_x(); }, Code::INVALID_ARGUMENT, "x: required");
  moe("expert 2 of 2", [](E* r) {
    *r->mutable_topk_ids() = Ref(Tensor(pb::INT32, {1, 1}, std::string("\x02\0\0\0", 4)));
  }, Code::INVALID_ARGUMENT, "topk_ids");
  moe("expert -1", [](E* r) {
    *r->mutable_topk_ids() = Ref(Tensor(pb::INT32, {1, 1}, std::string("\xff\xff\xff\xff", 4)));
  }, Code::INVALID_ARGUMENT, "topk_ids");
  moe("w13 missing", [](E* r) { r->clear_w13(); }, Code::INVALID_ARGUMENT, "w13");
  moe("scales of the wrong shape", [](E* r) {
    *r->mutable_w13_scales() = Ref(Tensor(pb::E8M0, {2, 64, 2}, std::string(256, '\x7f')));
  }, Code::INVALID_ARGUMENT, "w13_scales");
  moe("layer without w2", [](E* r) { r->set_stage(pb::LAYER); }, Code::INVALID_ARGUMENT, "");
  moe("rounding 8", [](E* r) { r->set_rounding(static_cast<pb::Rounding>(8)); }, Code::INVALID_ARGUMENT,
      "rounding");
  // Shapes that multiply a few MiB of request into gigabytes of working set:
  // charged before anything is allocated.
  moe("a layer of one token routed to 2^19 experts", [](E* r) {
    constexpr int64_t kTopK = 1 << 19;
    r->set_stage(pb::LAYER);
    *r->mutable_topk_ids() = Ref(Tensor(pb::INT32, {1, kTopK}, std::string(4 * kTopK, '\0')));
    *r->mutable_topk_weights() = Ref(Tensor(pb::FP32, {1, kTopK}, std::string(4 * kTopK, '\0')));
    *r->mutable_w2() = Ref(Tensor(pb::FP4_E2M1, {2, 32, 32}, std::string(2 * 32 * 16, '\x25')));
    *r->mutable_w2_scales() = Ref(Tensor(pb::E8M0, {2, 32, 1}, std::string(64, '\x7f')));
  }, Code::RESOURCE_EXHAUSTED, "memory limit exceeded: op workspace needs");
  moe("a 2^21-wide hidden dimension", [](E* r) {
    constexpr int64_t kHidden = 1 << 21;
    *r->mutable_x() = Ref(Bf16Tensor({1, kHidden}));
    *r->mutable_w13() = Ref(Tensor(pb::FP4_E2M1, {1, 2, kHidden}, std::string(kHidden, '\x25')));
    *r->mutable_w13_scales() = Ref(Tensor(pb::E8M0, {1, 2, kHidden / 32}, std::string(kHidden / 16, '\x7f')));
    *r->mutable_topk_ids() = Ref(Tensor(pb::INT32, {1, 1}, std::string(4, '\0')));
  }, Code::RESOURCE_EXHAUSTED, "memory limit exceeded: op workspace needs");
}

void BufferCases(const CorpusIds& ids, Builder* b) {
  auto header = [](pb::DType dtype, std::vector<int64_t> shape, std::string data) {
    pb::UploadChunk c;
    c.mutable_header()->set_dtype(dtype);
    for (int64_t d : shape) c.mutable_header()->add_shape(d);
    c.set_data(std::move(data));
    return c;
  };
  pb::UploadChunk data;
  data.set_data(std::string(8, 'd'));
  b->AddRaw("Upload: empty stream", kUpload, {}, Code::INVALID_ARGUMENT, "header: the stream was empty");
  b->Add("Upload: no header", kUpload, data, Code::INVALID_ARGUMENT, "header: the first message must carry");
  b->Add("Upload: unknown dtype", kUpload, header(static_cast<pb::DType>(99), {4}, ""), Code::INVALID_ARGUMENT,
         "header.dtype: unknown dtype value 99");
  b->Add("Upload: unspecified dtype", kUpload, header(pb::DTYPE_UNSPECIFIED, {4}, ""), Code::INVALID_ARGUMENT,
         "header.dtype: required");
  b->Add("Upload: zero dim", kUpload, header(pb::BF16, {4, 0}, ""), Code::INVALID_ARGUMENT,
         "header.shape[1]: expected > 0, got 0");
  b->Add("Upload: overflowing shape", kUpload, header(pb::FP64, {int64_t{1} << 40, int64_t{1} << 40}, ""),
         Code::INVALID_ARGUMENT, "header.shape");
  b->Add("Upload: 2 GiB over the memory limit", kUpload, header(pb::BF16, {int64_t{1} << 30}, ""),
         Code::RESOURCE_EXHAUSTED, "memory limit exceeded: buffer bf16[1073741824] needs 2147483648 bytes");
  b->Add("Upload: more bytes than the shape", kUpload, header(pb::BF16, {2}, std::string(4, 'a')),
         Code::INVALID_ARGUMENT, "data: expected 4 bytes (bf16[2]), got more (12 by message 1)", {&data});
  b->Add("Upload: fewer bytes than the shape", kUpload, header(pb::BF16, {16}, std::string(4, 'a')),
         Code::INVALID_ARGUMENT, "data: expected 32 bytes (bf16[16]), got 12", {&data});
  pb::UploadChunk second = header(pb::BF16, {2}, "");
  b->Add("Upload: a second header", kUpload, header(pb::BF16, {8}, std::string(8, 'a')), Code::INVALID_ARGUMENT,
         "header: only the first message may carry the header (message 1)", {&second});
  b->AddRaw("Upload: an undecodable second message", kUpload,
            {header(pb::BF16, {8}, std::string(8, 'a')).SerializeAsString(), std::string("\x12\xff\xff\xff\x7f", 5)},
            Code::INVALID_ARGUMENT, "request: message 1 of the stream is not a valid protobuf message");
  pb::UploadChunk labelled = header(pb::BF16, {2}, std::string(4, 'a'));
  labelled.mutable_header()->set_label(kLongText);
  b->Add("Upload: label 1 KiB", kUpload, labelled, Code::INVALID_ARGUMENT,
         "header.label: expected at most 256 bytes, got 1024");
  pb::UploadChunk device = header(pb::BF16, {2}, std::string(4, 'a'));
  device.mutable_header()->set_device(3);
  b->Add("Upload: device 3", kUpload, device, Code::INVALID_ARGUMENT, "header.device");

  pb::DownloadRequest d;
  d.set_buffer_id("buf-00000000000000000000000000000000");
  b->Add("Download: unknown buffer", kDownload, d, Code::NOT_FOUND, "buffer_id: no buffer");
  d.set_buffer_id(kLongId);
  b->Add("Download: 64 KiB id", kDownload, d, Code::NOT_FOUND, "(65536 bytes)");
  d.set_buffer_id("");
  b->Add("Download: no id", kDownload, d, Code::INVALID_ARGUMENT, "buffer_id: required");
  d.set_buffer_id(ids.buffer);
  d.set_chunk_bytes(-1);
  b->Add("Download: chunk_bytes -1", kDownload, d, Code::INVALID_ARGUMENT, "chunk_bytes: expected >= 0");
  d.set_chunk_bytes(std::numeric_limits<int64_t>::max());
  b->Add("Download: chunk_bytes 2^63-1 is clamped", kDownload, d, Code::OK, "");
  d.set_chunk_bytes(1);
  b->Add("Download: one-byte chunks", kDownload, d, Code::CANCELLED, "");
  b->last().read_then_cancel = 100;

  pb::FreeBufferRequest f;
  f.set_buffer_id("buf-00000000000000000000000000000000");
  b->Add("Free: unknown buffer", kFree, f, Code::NOT_FOUND, "buffer_id: no buffer");
  f.set_buffer_id(kLongId);
  b->Add("Free: 64 KiB id", kFree, f, Code::NOT_FOUND, "(65536 bytes)");
  f.set_buffer_id("");
  b->Add("Free: no id", kFree, f, Code::INVALID_ARGUMENT, "buffer_id: required");
  b->Add("List: buffers", kListBuffers, pb::ListBuffersRequest(), Code::OK, "");
}

void PoolCases(const CorpusIds& ids, Builder* b) {
  using C = pb::CreatePoolRequest;
  auto create = [&](const std::string& name, const std::function<void(C*)>& edit, Code code,
                    const std::string& substr) {
    C r;
    r.set_kind(pb::MLA_FUSED);
    r.set_num_slots(16);
    r.set_dtype(pb::FP8_E4M3FN);
    edit(&r);
    b->Add("Create: " + name, kCreate, r, code, substr);
  };
  create("kind unspecified", [](C* r) { r->set_kind(pb::POOL_KIND_UNSPECIFIED); }, Code::INVALID_ARGUMENT, "kind");
  create("kind 7", [](C* r) { r->set_kind(static_cast<pb::PoolKind>(7)); }, Code::INVALID_ARGUMENT, "kind");
  create("no slots", [](C* r) { r->set_num_slots(0); }, Code::INVALID_ARGUMENT, "num_slots: expected > 0");
  create("negative slots", [](C* r) { r->set_num_slots(-8); }, Code::INVALID_ARGUMENT, "num_slots");
  create("not whole pages", [](C* r) { r->set_page_size(5); }, Code::INVALID_ARGUMENT,
         "num_slots: expected a multiple of page_size 5");
  create("negative page", [](C* r) { r->set_page_size(-1); }, Code::INVALID_ARGUMENT, "page_size");
  create("bf16 MLA rows", [](C* r) { r->set_dtype(pb::BF16); }, Code::INVALID_ARGUMENT, "dtype: MLA_FUSED");
  create("unknown dtype", [](C* r) { r->set_dtype(static_cast<pb::DType>(77)); }, Code::INVALID_ARGUMENT,
         "unknown dtype value 77");
  create("MLA with heads", [](C* r) { r->set_num_heads(2); }, Code::INVALID_ARGUMENT, "num_heads, head_dim");
  create("per-head without heads", [](C* r) {
    r->set_kind(pb::PER_HEAD_KV);
    r->set_dtype(pb::BF16);
    r->set_head_dim(64);
  }, Code::INVALID_ARGUMENT, "num_heads: expected > 0");
  create("per-head fp32", [](C* r) {
    r->set_kind(pb::PER_HEAD_KV);
    r->set_dtype(pb::FP32);
    r->set_num_heads(2);
    r->set_head_dim(64);
  }, Code::INVALID_ARGUMENT, "dtype: PER_HEAD_KV");
  create("rows larger than a message", [](C* r) {
    r->set_kind(pb::PER_HEAD_KV);
    r->set_dtype(pb::BF16);
    r->set_num_heads(std::numeric_limits<int32_t>::max());
    r->set_head_dim(std::numeric_limits<int32_t>::max());
  }, Code::INVALID_ARGUMENT, "num_heads, head_dim: a row of 2 x 2147483647 x 2147483647 bf16");
  create("kv_scale NaN", [](C* r) { r->set_kv_scale(kNaN); }, Code::INVALID_ARGUMENT, "kv_scale");
  create("kv_scale -1", [](C* r) { r->set_kv_scale(-1); }, Code::INVALID_ARGUMENT, "kv_scale");
  create("device 7", [](C* r) { r->set_device(7); }, Code::INVALID_ARGUMENT, "device");
  create("label 1 KiB", [](C* r) { r->set_label(kLongText); }, Code::INVALID_ARGUMENT,
         "label: expected at most 256 bytes, got 1024");
  create("over the memory limit", [](C* r) { r->set_num_slots(1 << 20); }, Code::RESOURCE_EXHAUSTED,
         "memory limit exceeded: pool fp8_e4m3fn[1048576,576]");
  create("overflowing size", [](C* r) { r->set_num_slots(int64_t{1} << 62); }, Code::INVALID_ARGUMENT,
         "num_slots");

  auto rows = [](int64_t n) { return Tensor(pb::FP8_E4M3FN, {n, 576}, std::string(static_cast<size_t>(n * 576), '\x38')); };
  using W = pb::WritePoolChunk;
  auto good_write = [&]() {
    W w;
    w.set_pool_id(ids.mla_pool);
    *w.mutable_slots() = Int32s({5, 1});
    *w.mutable_rows() = rows(2);
    return w;
  };
  auto write = [&](const std::string& name, const std::function<void(W*)>& edit, Code code, const std::string& substr) {
    W w = good_write();
    edit(&w);
    b->Add("Write: " + name, kWrite, w, code, substr);
  };
  b->AddRaw("Write: empty stream", kWrite, {}, Code::INVALID_ARGUMENT, "pool_id: the stream was empty");
  write("no pool id", [](W* w) { w->clear_pool_id(); }, Code::INVALID_ARGUMENT, "pool_id: the first message");
  write("unknown pool", [](W* w) { w->set_pool_id("pool-00000000000000000000000000000000"); }, Code::NOT_FOUND,
        "pool_id: no pool");
  write("64 KiB pool id", [](W* w) { w->set_pool_id(kLongId); }, Code::NOT_FOUND, "(65536 bytes)");
  write("slot 8 of 8", [](W* w) { *w->mutable_slots() = Int32s({5, 8}); }, Code::INVALID_ARGUMENT,
        "slots[1]: slot 8 out of range [0, 8) (message 0 of the write stream; nothing was written)");
  write("negative slot", [](W* w) { *w->mutable_slots() = Int32s({-1, 1}); }, Code::INVALID_ARGUMENT, "slots[0]");
  write("slots fp32", [](W* w) { w->mutable_slots()->set_dtype(pb::FP32); }, Code::INVALID_ARGUMENT,
        "slots.dtype: expected int32 or int64");
  write("slots rank 2", [](W* w) {
    w->mutable_slots()->set_shape(0, 1);
    w->mutable_slots()->add_shape(2);
  }, Code::INVALID_ARGUMENT, "slots.shape: expected [n]");
  write("rows of bf16", [](W* w) { w->mutable_rows()->set_dtype(pb::BF16); }, Code::INVALID_ARGUMENT, "rows");
  write("rows 512 wide", [](W* w) { *w->mutable_rows() = Tensor(pb::FP8_E4M3FN, {2, 512}, std::string(1024, 'a')); },
        Code::INVALID_ARGUMENT, "rows.shape: expected [2,576]");
  write("rows for 3 slots", [&](W* w) { *w->mutable_rows() = rows(3); }, Code::INVALID_ARGUMENT, "rows.shape");
  write("short rows", [](W* w) { w->mutable_rows()->mutable_data()->pop_back(); }, Code::INVALID_ARGUMENT,
        "rows.data: expected 1152 bytes");
  W bad_second = good_write();
  *bad_second.mutable_slots() = Int32s({1, 99});
  bad_second.clear_pool_id();
  b->Add("Write: a bad second message", kWrite, good_write(), Code::INVALID_ARGUMENT,
         "(message 1 of the write stream; nothing was written)", {&bad_second});
  b->AddRaw("Write: an undecodable second message", kWrite,
            {good_write().SerializeAsString(), std::string("\x0a\xff\xff\xff\xff\x0f", 6)}, Code::INVALID_ARGUMENT,
            "request: message 1 of the stream is not a valid protobuf message");
  W other = good_write();
  other.set_pool_id(ids.kv_pool);
  b->Add("Write: a second message naming another pool", kWrite, good_write(), Code::INVALID_ARGUMENT,
         "pool_id: names pool", {&other});

  using Q = pb::ReadPoolRequest;
  auto read = [&](const std::string& name, const std::function<void(Q*)>& edit, Code code, const std::string& substr) {
    Q r;
    r.set_pool_id(ids.mla_pool);
    r.set_start(0);
    r.set_count(8);
    edit(&r);
    b->Add("Read: " + name, kRead, r, code, substr);
  };
  read("a good read", [](Q*) {}, Code::OK, "");
  read("slots and a range", [](Q* r) { *r->mutable_slots() = Int32s({1}); }, Code::INVALID_ARGUMENT,
       "slots: give either slots or start/count");
  read("start -1", [](Q* r) { r->set_start(-1); }, Code::INVALID_ARGUMENT, "start: expected a slot in [0, 8)");
  read("start 8", [](Q* r) { r->set_start(8); }, Code::INVALID_ARGUMENT, "start");
  read("count 0", [](Q* r) { r->set_count(0); }, Code::INVALID_ARGUMENT, "count: expected 1..8");
  read("count past the end", [](Q* r) { r->set_start(4); }, Code::INVALID_ARGUMENT, "count: expected 1..4");
  read("count 2^63-1", [](Q* r) { r->set_count(std::numeric_limits<int64_t>::max()); }, Code::INVALID_ARGUMENT,
       "count");
  read("chunk_rows -1", [](Q* r) { r->set_chunk_rows(-1); }, Code::INVALID_ARGUMENT, "chunk_rows");
  read("chunk_rows 2^62", [](Q* r) { r->set_chunk_rows(int64_t{1} << 62); }, Code::OK, "");
  read("slot out of range", [](Q* r) {
    r->clear_start();
    r->clear_count();
    *r->mutable_slots() = Int32s({0, 9});
  }, Code::INVALID_ARGUMENT, "slots[1]: slot 9 out of range [0, 8)");
  read("unknown pool", [](Q* r) { r->set_pool_id("pool-00000000000000000000000000000000"); }, Code::NOT_FOUND,
       "pool_id: no pool");
  read("64 KiB pool id", [](Q* r) { r->set_pool_id(kLongId); }, Code::NOT_FOUND, "(65536 bytes)");
  // 2^20 slots of 64 KiB rows name 64 GiB: streamed in chunks, the client
  // stops after a few.
  read("2^20 slots of a 64x256 bf16 pool", [&](Q* r) {
    r->clear_start();
    r->clear_count();
    r->set_pool_id(ids.kv_pool);
    std::vector<int32_t> slots(1 << 20);
    for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int32_t>(i % 4);
    *r->mutable_slots() = Int32s(slots);
  }, Code::CANCELLED, "");
  b->last().read_then_cancel = 4;
  read("2^20 slots of the MLA pool", [&](Q* r) {
    r->clear_start();
    r->clear_count();
    *r->mutable_slots() = Int32s(std::vector<int32_t>(1 << 20, 7));
  }, Code::CANCELLED, "");
  b->last().read_then_cancel = 2;
  read("2^20 slots, 127-row chunks", [&](Q* r) {
    r->clear_start();
    r->clear_count();
    r->set_pool_id(ids.kv_pool);
    r->set_chunk_rows(1 << 20);
    *r->mutable_slots() = Int32s(std::vector<int32_t>(1 << 20, 3));
  }, Code::CANCELLED, "");
  b->last().read_then_cancel = 2;

  pb::PoolStatsRequest st;
  st.set_pool_id("pool-00000000000000000000000000000000");
  b->Add("Stats: unknown pool", kStats, st, Code::NOT_FOUND, "pool_id: no pool");
  st.set_pool_id(kLongId);
  b->Add("Stats: 64 KiB id", kStats, st, Code::NOT_FOUND, "(65536 bytes)");
  st.set_pool_id("");
  b->Add("Stats: no id", kStats, st, Code::INVALID_ARGUMENT, "pool_id: required");
  pb::DeletePoolRequest del;
  del.set_pool_id("pool-00000000000000000000000000000000");
  b->Add("Delete: unknown pool", kDelete, del, Code::NOT_FOUND, "pool_id: no pool");
  del.set_pool_id(kLongId);
  b->Add("Delete: 64 KiB id", kDelete, del, Code::NOT_FOUND, "(65536 bytes)");
  del.set_pool_id("");
  b->Add("Delete: no id", kDelete, del, Code::INVALID_ARGUMENT, "pool_id: required");
  b->Add("List: pools", kListPools, pb::ListPoolsRequest(), Code::OK, "");
}

void DeviceCases(Builder* b) {
  b->Add("Devices: list", kDevices, pb::ListDevicesRequest(), Code::OK, "");
  pb::ProbeDeviceRequest p;
  b->Add("Probe: not an admin", kProbe, p, Code::PERMISSION_DENIED, "DeviceService.Probe is an admin-only call");
  p.set_index(7);
  b->Add("Probe: device 7", kProbe, p, Code::INVALID_ARGUMENT, "index: expected a device index in [0, 1), got 7");
  b->last().auth = Auth::kAdmin;
  pb::DrainDeviceRequest d;
  d.set_index(0);
  b->Add("Drain: not an admin", kDrain, d, Code::PERMISSION_DENIED, "DeviceService.Drain is an admin-only call");
  d.set_index(7);
  b->Add("Drain: device 7", kDrain, d, Code::INVALID_ARGUMENT, "index: expected a device index in [0, 1)");
  b->last().auth = Auth::kAdmin;
  d.set_index(-1);
  b->Add("Drain: device -1", kDrain, d, Code::INVALID_ARGUMENT, "index");
  b->last().auth = Auth::kAdmin;
  d.set_index(0);
  d.set_reason(std::string(64 << 10, 'r'));
  b->Add("Drain: 64 KiB reason", kDrain, d, Code::INVALID_ARGUMENT, "reason: expected at most 256 bytes, got 65536");
  b->last().auth = Auth::kAdmin;
}

void BenchCases(const CorpusIds& ids, Builder* b) {
  using S = pb::BenchJobSpec;
  auto submit = [&](const std::string& name, const std::function<void(S*)>& edit, Code code,
                    const std::string& substr) {
    pb::SubmitBenchRequest r;
    *r.mutable_spec() = SmallJob(pb::OP_ATTENTION);
    edit(r.mutable_spec());
    b->Add("Submit: " + name, kSubmit, r, code, substr);
  };
  submit("no op", [](S* s) { s->set_op(pb::BENCH_OP_UNSPECIFIED); }, Code::INVALID_ARGUMENT, "spec.op");
  submit("op 42", [](S* s) { s->set_op(static_cast<pb::BenchOp>(42)); }, Code::INVALID_ARGUMENT, "spec.op");
  submit("no shape", [](S* s) { s->clear_attention(); }, Code::INVALID_ARGUMENT, "spec.attention: required");
  submit("the wrong shape", [](S* s) { s->mutable_moe()->set_tokens(2); }, Code::INVALID_ARGUMENT,
         "spec.attention: required");
  submit("batch 0", [](S* s) { s->mutable_attention()->set_batch(0); }, Code::INVALID_ARGUMENT,
         "spec.attention.batch: expected > 0, got 0");
  submit("negative heads", [](S* s) { s->mutable_attention()->set_heads_q(-2); }, Code::INVALID_ARGUMENT,
         "spec.attention.heads_q");
  submit("a 2^60-element shape", [](S* s) {
    s->mutable_attention()->set_batch(int64_t{1} << 40);
    s->mutable_attention()->set_seq_q(int64_t{1} << 20);
  }, Code::RESOURCE_EXHAUSTED, "--bench_max_job_mb");
  submit("layout 77", [](S* s) { s->mutable_attention()->set_layout(static_cast<pb::Layout>(77)); },
         Code::INVALID_ARGUMENT, "spec.attention.layout: expected one of LAYOUT_UNSPECIFIED, BHSD, BSHD, got 77");
  submit("rounding 9", [](S* s) { s->mutable_attention()->set_rounding(static_cast<pb::Rounding>(9)); },
         Code::INVALID_ARGUMENT, "spec.attention.rounding");
  submit("p_mode 12", [](S* s) {
    s->set_op(pb::OP_FP8_ATTENTION);
    s->mutable_attention()->set_p_mode(static_cast<pb::PMode>(12));
  }, Code::INVALID_ARGUMENT, "spec.attention.p_mode");
  submit("mla kv_format 5", [](S* s) {
    s->set_op(pb::OP_MLA_DECODE);
    s->mutable_mla()->set_batch(1);
    s->mutable_mla()->set_heads(2);
    s->mutable_mla()->set_seq_len(8);
    s->mutable_mla()->set_kv_format(static_cast<pb::Fp8Format>(5));
  }, Code::INVALID_ARGUMENT, "spec.mla.kv_format");
  submit("mla page_size -1", [](S* s) {
    s->set_op(pb::OP_MLA_DECODE);
    s->mutable_mla()->set_batch(1);
    s->mutable_mla()->set_heads(2);
    s->mutable_mla()->set_seq_len(8);
    s->mutable_mla()->set_page_size(-1);
  }, Code::INVALID_ARGUMENT, "spec.mla.page_size");
  submit("moe top_k 0", [](S* s) {
    s->set_op(pb::OP_MOE_LAYER);
    s->mutable_moe()->set_tokens(2);
    s->mutable_moe()->set_experts(4);
    s->mutable_moe()->set_hidden(64);
    s->mutable_moe()->set_inter(32);
  }, Code::INVALID_ARGUMENT, "spec.moe");
  submit("input kind 9", [](S* s) { s->mutable_inputs()->set_kind(static_cast<pb::BenchInputKind>(9)); },
         Code::INVALID_ARGUMENT, "spec.inputs.kind");
  submit("method 9", [](S* s) { s->mutable_method()->set_method(static_cast<pb::BenchMethod>(9)); },
         Code::INVALID_ARGUMENT, "spec.method.method");
  submit("2^31 iterations", [](S* s) { s->mutable_method()->set_iters(std::numeric_limits<int32_t>::max()); },
         Code::INVALID_ARGUMENT, "spec.method");
  submit("negative warm-up", [](S* s) { s->mutable_method()->set_warmup(-1); }, Code::INVALID_ARGUMENT,
         "spec.method");
  submit("window NaN", [](S* s) { s->mutable_method()->set_window_s(kNaN); }, Code::INVALID_ARGUMENT,
         "spec.method");
  submit("graph on the cpu backend", [](S* s) { s->mutable_method()->set_method(pb::METHOD_GRAPH); },
         Code::FAILED_PRECONDITION, "spec.method: method graph");
  submit("time limit NaN", [](S* s) { s->set_time_limit_s(kNaN); }, Code::INVALID_ARGUMENT, "spec.time_limit_s");
  submit("time limit 1e18", [](S* s) { s->set_time_limit_s(1e18); }, Code::INVALID_ARGUMENT, "spec.time_limit_s");
  submit("tolerance -1", [](S* s) { s->set_tolerance(-1); }, Code::INVALID_ARGUMENT, "spec.tolerance");
  submit("tolerance Inf", [](S* s) { s->set_tolerance(kInf); }, Code::INVALID_ARGUMENT, "spec.tolerance");
  submit("device 3", [](S* s) { s->set_device(3); }, Code::INVALID_ARGUMENT, "spec.device");
  submit("unknown variant", [](S* s) { s->add_variants("no-such-variant"); }, Code::INVALID_ARGUMENT,
         "spec.variants");
  submit("a variant twice", [](S* s) {
    s->add_variants("cpu");
    s->add_variants("cpu");
  }, Code::INVALID_ARGUMENT, "spec.variants: \"cpu\" is listed twice");
  submit("a 64 KiB variant name", [](S* s) { s->add_variants(kLongId); }, Code::INVALID_ARGUMENT,
         "spec.variants[0]: expected at most 256 bytes, got 65536");
  submit("name 1 KiB", [](S* s) { s->set_name(kLongText); }, Code::INVALID_ARGUMENT,
         "spec.name: expected at most 256 bytes, got 1024");
  submit("INPUT_BUFFERS without buffers", [](S* s) { s->mutable_inputs()->set_kind(pb::INPUT_BUFFERS); },
         Code::INVALID_ARGUMENT, "spec.inputs.buffers: INPUT_BUFFERS needs");
  submit("an input it does not have", [&](S* s) { (*s->mutable_inputs()->mutable_buffers())["x"] = ids.buffer; },
         Code::INVALID_ARGUMENT, "spec.inputs.buffers: no input \"x\"");
  submit("a buffer that does not exist", [](S* s) {
    (*s->mutable_inputs()->mutable_buffers())["q"] = "buf-00000000000000000000000000000000";
  }, Code::NOT_FOUND, "spec.inputs.buffers[\"q\"]: buffer_id: no buffer");
  submit("a 64 KiB buffer id", [](S* s) { (*s->mutable_inputs()->mutable_buffers())["q"] = kLongId; },
         Code::INVALID_ARGUMENT, "expected at most 256 bytes, got 65536");
  submit("a buffer of the wrong shape", [&](S* s) { (*s->mutable_inputs()->mutable_buffers())["q"] = ids.buffer; },
         Code::INVALID_ARGUMENT, "but the job's shape needs bf16[1,2,4,128]");
  submit("long-tail inputs for MoE", [](S* s) {
    s->set_op(pb::OP_MOE_GATEUP);
    s->mutable_moe()->set_tokens(2);
    s->mutable_moe()->set_experts(4);
    s->mutable_moe()->set_top_k(2);
    s->mutable_moe()->set_hidden(64);
    s->mutable_moe()->set_inter(32);
    s->mutable_inputs()->set_kind(pb::INPUT_LONG_TAIL);
  }, Code::INVALID_ARGUMENT, "long-tail");

  pb::WatchBenchRequest w;
  w.set_job_id("job-000000000000");
  b->Add("Watch: unknown job", kWatch, w, Code::NOT_FOUND, "no benchmark job \"job-000000000000\"");
  w.set_job_id(kLongId);
  b->Add("Watch: 64 KiB id", kWatch, w, Code::NOT_FOUND, "(65536 bytes)");
  w.set_job_id(ids.job);
  w.set_after_seq(-1);
  b->Add("Watch: after_seq -1", kWatch, w, Code::INVALID_ARGUMENT, "after_seq: expected >= 0");
  w.set_after_seq(std::numeric_limits<int64_t>::max());
  b->Add("Watch: after every event", kWatch, w, Code::OK, "");

  pb::GetBenchRequest g;
  g.set_job_id("job-000000000000");
  b->Add("Get: unknown job", kGet, g, Code::NOT_FOUND, "no benchmark job");
  g.set_job_id(kLongId);
  b->Add("Get: 64 KiB id", kGet, g, Code::NOT_FOUND, "(65536 bytes)");
  g.set_job_id(ids.job);
  b->Add("Get: the finished job", kGet, g, Code::OK, "");

  pb::ListBenchRequest l;
  l.set_limit(-5);
  b->Add("List: limit -5", kListJobs, l, Code::INVALID_ARGUMENT, "limit: expected >= 0");
  l.set_limit(0);
  l.add_states(static_cast<pb::BenchJobState>(77));
  b->Add("List: state 77", kListJobs, l, Code::INVALID_ARGUMENT, "states[0]: expected one of");
  l.set_states(0, pb::BENCH_JOB_STATE_UNSPECIFIED);
  b->Add("List: state unspecified", kListJobs, l, Code::INVALID_ARGUMENT, "states[0]");
  l.set_limit(-5);
  l.set_states(0, static_cast<pb::BenchJobState>(77));
  b->Add("List: limit -5 and state 77", kListJobs, l, Code::INVALID_ARGUMENT, "");
  l.Clear();
  l.set_submitter(kLongText);
  b->Add("List: submitter 1 KiB", kListJobs, l, Code::INVALID_ARGUMENT, "submitter: expected at most 256 bytes");
  l.Clear();
  l.set_limit(std::numeric_limits<int32_t>::max());
  b->Add("List: every job", kListJobs, l, Code::OK, "");

  pb::CancelBenchRequest c;
  c.set_job_id("job-000000000000");
  b->Add("Cancel: unknown job", kCancel, c, Code::NOT_FOUND, "no benchmark job");
  c.set_job_id(kLongId);
  b->Add("Cancel: 64 KiB id", kCancel, c, Code::NOT_FOUND, "(65536 bytes)");
  c.set_job_id(ids.job);
  b->Add("Cancel: a finished job", kCancel, c, Code::FAILED_PRECONDITION, "already finished");
  c.set_reason(kLongText);
  b->Add("Cancel: reason 1 KiB", kCancel, c, Code::INVALID_ARGUMENT, "reason: expected at most 256 bytes");

  pb::ListVariantsRequest v;
  v.set_op(static_cast<pb::BenchOp>(99));
  b->Add("ListVariants: op 99", kVariants, v, Code::INVALID_ARGUMENT,
         "op: expected one of BENCH_OP_UNSPECIFIED, OP_ATTENTION");
  v.set_op(static_cast<pb::BenchOp>(-1));
  b->Add("ListVariants: op -1", kVariants, v, Code::INVALID_ARGUMENT, "op: expected one of");
  v.set_op(pb::OP_MLA_DECODE);
  b->Add("ListVariants: mla_decode", kVariants, v, Code::OK, "");
}

// Every method without a token, with a malformed header, and with bytes that
// do not decode as the method's request.
void WireCases(Builder* b) {
  for (const std::string& method : AllMethods()) {
    const bool stream_in = KindOf(method) == Kind::kClientStream;
    b->AddRaw(method + " without a token", method.c_str(), stream_in ? std::vector<std::string>{} : std::vector<std::string>{""},
              Code::UNAUTHENTICATED, "missing bearer token");
    b->last().auth = Auth::kNone;
    b->AddRaw(method + " with a malformed header", method.c_str(), {""}, Code::UNAUTHENTICATED,
              "malformed authorization header");
    b->last().auth = Auth::kMalformed;
    b->AddRaw(method + " with undecodable bytes", method.c_str(), {std::string("\xff\xff\xff\xff\x0f", 5)},
              Code::INVALID_ARGUMENT, "not a valid protobuf message of the method's request type");
  }
}

}  // namespace

pb::Tensor Tensor(pb::DType dtype, std::vector<int64_t> shape, std::string data) {
  pb::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::move(data));
  return t;
}

std::string Bf16Bytes(int64_t n, uint32_t seed) {
  std::string out(static_cast<size_t>(2 * n), '\0');
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    const uint16_t v = static_cast<uint16_t>(0x3C00 | (seed >> 16 & 0x83FF));
    std::memcpy(&out[static_cast<size_t>(2 * i)], &v, 2);
  }
  return out;
}

std::string Int32Bytes(const std::vector<int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size());
}

pb::BenchJobSpec SmallJob(pb::BenchOp op) {
  pb::BenchJobSpec s;
  s.set_name(absl::StrCat("small/", pb::BenchOp_Name(op)));
  s.set_op(op);
  switch (op) {
    case pb::OP_ATTENTION:
    case pb::OP_FP8_ATTENTION: {
      pb::AttentionShape* a = s.mutable_attention();
      a->set_batch(1);
      a->set_heads_q(2);
      a->set_heads_kv(1);
      a->set_seq_q(4);
      a->set_seq_kv(70);
      a->set_head_dim(128);
      a->set_causal(true);
      break;
    }
    case pb::OP_MLA_DECODE: {
      pb::MlaDecodeShape* m = s.mutable_mla();
      m->set_batch(1);
      m->set_q_len(2);
      m->set_heads(2);
      m->set_seq_len(8);
      m->set_num_splits(2);
      break;
    }
    default: {
      pb::MoeShape* m = s.mutable_moe();
      m->set_tokens(2);
      m->set_experts(4);
      m->set_top_k(2);
      m->set_hidden(64);
      m->set_inter(32);
      m->set_swiglu(op == pb::OP_MOE_GATEUP);
      m->set_weighted_sum(op == pb::OP_MOE_DOWN);
      break;
    }
  }
  s.mutable_method()->set_method(pb::METHOD_KERNEL);
  s.mutable_method()->set_warmup(1);
  s.mutable_method()->set_iters(2);
  return s;
}

std::vector<std::string> AllMethods() {
  return {kAttention, kFp8,     kMla,     kMoe,      kDecode, kUpload, kDownload, kFree,      kListBuffers,
          kCreate,    kWrite,   kRead,    kStats,    kDelete, kListPools, kDevices, kDrain, kProbe,
          kSubmit,    kWatch,   kGet,     kListJobs, kCancel, kVariants};
}

std::vector<BadInput> BadInputs(const CorpusIds& ids) {
  Builder b;
  KernelCases(ids, &b);
  BufferCases(ids, &b);
  PoolCases(ids, &b);
  DeviceCases(&b);
  BenchCases(ids, &b);
  WireCases(&b);
  return b.Take();
}

}  // namespace corpus
}  // namespace kernelserve
