#include "kernels/gpu/fp8_attention/fp8_quantize_plan.h"

#include <algorithm>

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace {

size_t Align(size_t x) { return (x + 255) & ~size_t{255}; }

struct Parts {
  size_t codes_q, codes_k, codes_v, ds, am, rot;
  size_t Total() const { return codes_q + codes_k + codes_v + ds + am + rot; }
};

Parts PartsOf(const Fp8AttentionParams& a) {
  const int64_t nq = a.batch * a.heads_q * a.seq_q;
  const int64_t nk = a.batch * a.heads_kv * a.seq_kv;
  const int64_t heads = a.batch * (a.heads_q + 2 * a.heads_kv);
  Parts p;
  p.codes_q = Align(nq * a.d_qk);
  p.codes_k = Align(nk * a.d_qk);
  p.codes_v = Align(nk * a.d_v);
  p.ds = Align(heads * 4);
  p.am = Align(heads * 4);
  p.rot = a.hadamard ? Align(std::max(nq, nk) * a.d_qk * 4) : 0;
  return p;
}

}  // namespace

size_t QuantizeWorkspaceBytes(const Fp8AttentionParams& a) { return PartsOf(a).Total(); }

QuantizePlan PlanQuantize(const Fp8AttentionParams& a, const Fp8AttentionInputs& in, const Fp8QuantizedOut& keep,
                          uint8_t* ws) {
  const Parts s = PartsOf(a);
  const int batch = static_cast<int>(a.batch);
  const int hq = static_cast<int>(a.heads_q), hkv = static_cast<int>(a.heads_kv);
  const int bhq = batch * hq, bhk = batch * hkv;
  QuantizePlan plan;
  plan.q_codes = keep.q_codes ? keep.q_codes : ws;
  plan.k_codes = keep.k_codes ? keep.k_codes : ws + s.codes_q;
  plan.v_codes = keep.v_codes ? keep.v_codes : ws + s.codes_q + s.codes_k;
  plan.descales = keep.descales ? keep.descales : reinterpret_cast<float*>(ws + s.codes_q + s.codes_k + s.codes_v);
  plan.amax = reinterpret_cast<unsigned int*>(ws + s.codes_q + s.codes_k + s.codes_v + s.ds);
  plan.amax_bytes = static_cast<size_t>(bhq + 2 * bhk) * 4;
  float* rotated = a.hadamard ? reinterpret_cast<float*>(ws + s.codes_q + s.codes_k + s.codes_v + s.ds + s.am)
                              : nullptr;
  struct Op {
    const void* x;
    int64_t rows;
    int64_t dim;
    int heads, seq;
    bool rot;
    uint8_t* codes;
    float* descale;
    unsigned int* amax;
  } ops[3] = {
      {in.q.data, a.batch * a.heads_q * a.seq_q, a.d_qk, hq, static_cast<int>(a.seq_q), a.hadamard, plan.q_codes,
       plan.descales, plan.amax},
      {in.k.data, a.batch * a.heads_kv * a.seq_kv, a.d_qk, hkv, static_cast<int>(a.seq_kv), a.hadamard, plan.k_codes,
       plan.descales + bhq, plan.amax + bhq},
      {in.v.data, a.batch * a.heads_kv * a.seq_kv, a.d_v, hkv, static_cast<int>(a.seq_kv), false, plan.v_codes,
       plan.descales + bhq + bhk, plan.amax + bhq + bhk},
  };
  for (int i = 0; i < 3; ++i) {
    const Op& op = ops[i];
    QuantizeArgs& qa = plan.ops[i];
    qa.x = static_cast<const uint16_t*>(op.x);
    qa.rows = op.rows;
    qa.dim = static_cast<int>(op.dim);
    qa.hadamard = op.rot;
    qa.per_head = a.descale_mode == DescaleMode::kPerHead;
    qa.bshd = a.layout == Layout::kBshd;
    qa.fnuz = a.format == Fp8Format::kE4M3Fnuz;
    qa.heads = op.heads;
    qa.seq = op.seq;
    qa.batch = batch;
    qa.codes = op.codes;
    qa.descale = op.descale;
    qa.rotated = rotated;
    qa.amax = op.amax;
  }
  return plan;
}

void SetQuantizedInputs(const QuantizePlan& plan, Fp8KernelParams& p) {
  p.q = plan.q_codes;
  p.k = plan.k_codes;
  p.v = plan.v_codes;
  p.q_ds = plan.ops[0].descale;
  p.k_ds = plan.ops[1].descale;
  p.v_ds = plan.ops[2].descale;
  p.q_ds_per_head = p.k_ds_per_head = p.v_ds_per_head = 1;  // expanded
}

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
