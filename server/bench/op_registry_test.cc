// The op registry: one entry per BenchOp, each round-tripping its shape
// message, with the tolerances, FLOP and byte counts and shape descriptions
// that jobs report.
#include "server/bench/op_registry.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/bench/bench_inputs.h"

namespace kernelserve {
namespace bench {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

// A spec with every shape field of its op written out, as ToSpec writes it.
pb::BenchJobSpec FullSpec(BenchOp op) {
  pb::BenchJobSpec s;
  s.set_op(static_cast<pb::BenchOp>(op));
  s.mutable_inputs()->set_seed(3);
  switch (static_cast<pb::BenchOp>(op)) {
    case pb::OP_ATTENTION:
    case pb::OP_FP8_ATTENTION: {
      pb::AttentionShape* a = s.mutable_attention();
      a->set_batch(2);
      a->set_heads_q(4);
      a->set_heads_kv(2);
      a->set_seq_q(8);
      a->set_seq_kv(24);
      a->set_head_dim(128);
      a->set_causal(true);
      a->set_layout(pb::BSHD);
      a->set_softmax_scale(0.125);
      a->set_rounding(pb::RTZ);
      if (op == BenchOp::kFp8Attention) {
        a->set_head_dim(192);
        a->set_head_dim_v(128);
        a->set_layout(pb::BHSD);
        a->set_rounding(pb::RTNA);
        a->set_format(pb::E4M3FNUZ);
        a->set_p_mode(pb::LEAN);
        a->set_hadamard(true);
        a->set_descale_mode(pb::PER_TENSOR);
      }
      break;
    }
    case pb::OP_MLA_DECODE: {
      pb::MlaDecodeShape* m = s.mutable_mla();
      m->set_batch(2);
      m->set_q_len(2);
      m->set_heads(4);
      m->set_seq_len(10);
      m->set_num_splits(2);
      m->set_kv_scale(0.25);
      m->set_kv_format(pb::E4M3FNUZ);
      m->set_softmax_scale(0.1);
      m->set_rounding(pb::RTNE);
      m->set_page_size(4);
      break;
    }
    default: {
      pb::MoeShape* m = s.mutable_moe();
      m->set_tokens(4);
      m->set_experts(8);
      m->set_top_k(2);
      // Only the dims the stage reads: gate/up has no N, down no K (which N
      // defaults to), and a layer's N is its K.
      m->set_hidden(op == BenchOp::kMoeDown ? 96 : 64);
      m->set_inter(32);
      if (op != BenchOp::kMoeGateUp) m->set_out_dim(op == BenchOp::kMoeDown ? 96 : 64);
      m->set_swiglu(op != BenchOp::kMoeDown);
      m->set_weighted_sum(op != BenchOp::kMoeGateUp);
      m->set_rounding(pb::RTNA);
    }
  }
  return s;
}

TEST(OpRegistry, EveryOpHasExactlyOneEntry) {
  for (BenchOp op : kAllBenchOps) {
    EXPECT_EQ(BenchOpRegistrations(op), 1) << BenchOpName(op);
    const BenchOpEntry* e = FindBenchOp(op);
    ASSERT_NE(e, nullptr) << BenchOpName(op);
    EXPECT_EQ(e->op(), op);
    EXPECT_EQ(e->name(), BenchOpName(op));
  }
  EXPECT_EQ(AllBenchOps().size(), std::size(kAllBenchOps));
  EXPECT_EQ(FindBenchOp(static_cast<BenchOp>(0)), nullptr);
  EXPECT_EQ(BenchOpNames(", ", " or "), "attention, fp8_attention, mla_decode, moe_gateup, moe_down or moe_layer");
}

TEST(OpRegistry, UnknownOpsAreRefusedNamingTheOps) {
  pb::BenchJobSpec spec;
  spec.set_op(static_cast<pb::BenchOp>(9));
  const absl::Status st = ValidateSpec(spec);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "spec.op: expected one of attention, fp8_attention, mla_decode, moe_gateup, moe_down, moe_layer, got 9");
}

// Spec -> validated params -> spec gives the spec back, for every op.
TEST(OpRegistry, EveryEntryRoundTripsItsShape) {
  for (const BenchOpEntry* e : AllBenchOps()) {
    SCOPED_TRACE(e->name());
    const pb::BenchJobSpec spec = FullSpec(e->op());
    absl::StatusOr<std::unique_ptr<PreparedJob>> job = PrepareJob(spec, nullptr, "");
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ((*job)->op, e);
    pb::BenchJobSpec back;
    e->ToSpec((*job)->host_call, &back);
    EXPECT_EQ(back.op(), spec.op());
    pb::BenchJobSpec want = spec;
    want.clear_inputs();
    std::string diff;
    MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    EXPECT_TRUE(d.Compare(want, back)) << diff;
  }
}

// Defaults written out: heads_kv, seq_kv and q_len come back as the values
// they stood for.
TEST(OpRegistry, ToSpecWritesDefaultsOut) {
  pb::BenchJobSpec spec;
  spec.set_op(pb::OP_ATTENTION);
  spec.mutable_attention()->set_batch(1);
  spec.mutable_attention()->set_heads_q(2);
  spec.mutable_attention()->set_seq_q(5);
  spec.mutable_attention()->set_head_dim(64);
  auto job = PrepareJob(spec, nullptr, "");
  ASSERT_TRUE(job.ok()) << job.status();
  pb::BenchJobSpec back;
  (*job)->op->ToSpec((*job)->host_call, &back);
  EXPECT_EQ(back.attention().heads_kv(), 2);
  EXPECT_EQ(back.attention().seq_kv(), 5);
  EXPECT_EQ(back.attention().layout(), pb::BHSD);
  EXPECT_EQ(back.attention().rounding(), pb::RTNE);
  EXPECT_FALSE(back.attention().has_softmax_scale());
}

TEST(OpRegistry, DefaultTolerances) {
  EXPECT_EQ(FindBenchOp(BenchOp::kAttention)->DefaultTolerance(), 0.01);
  EXPECT_EQ(FindBenchOp(BenchOp::kFp8Attention)->DefaultTolerance(), 0.10);
  EXPECT_EQ(FindBenchOp(BenchOp::kMlaDecode)->DefaultTolerance(), 0.01);
  for (BenchOp op : {BenchOp::kMoeGateUp, BenchOp::kMoeDown, BenchOp::kMoeLayer}) {
    EXPECT_EQ(FindBenchOp(op)->DefaultTolerance(), 0.02) << BenchOpName(op);
  }
}

// FLOPs per launch, written out from DESIGN §6 for FullSpec's shapes.
TEST(OpRegistry, FlopsMatchTheCountedFormulas) {
  // Causal, bottom-right aligned: query i of 8 sees 24 - 8 + i + 1 keys.
  double pairs = 0;
  for (int i = 0; i < 8; ++i) pairs += 17 + i;
  const double mla_keys = (10 - 2 + 0 + 1) + (10 - 2 + 1 + 1);  // q_len 2 over S = 10
  const double moe_pairs = 4 * 2;
  const double gate_up = 2 * moe_pairs * 2 * 32 * 64, down = 2 * moe_pairs * 96 * 32,
               layer_down = 2 * moe_pairs * 64 * 32;
  const std::map<BenchOp, double> want = {
      {BenchOp::kAttention, 4.0 * 128 * pairs * 2 * 4},
      {BenchOp::kFp8Attention, 2.0 * (192 + 128) * pairs * 2 * 4},
      {BenchOp::kMlaDecode, 2.0 * (576 + 512) * mla_keys * 2 * 4},
      {BenchOp::kMoeGateUp, gate_up},
      {BenchOp::kMoeDown, down},
      {BenchOp::kMoeLayer, gate_up + layer_down},
  };
  for (const auto& [op, flops] : want) {
    double got = 0;
    ASSERT_TRUE(ValidateSpec(FullSpec(op), &got).ok()) << BenchOpName(op);
    EXPECT_EQ(got, flops) << BenchOpName(op);
    auto job = PrepareJob(FullSpec(op), nullptr, "");
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ((*job)->flops, flops) << BenchOpName(op);
  }
}

// Bytes: every input and the output; MoE weights only for the experts the
// routing touches, and the routing weights only where the stage reads them.
TEST(OpRegistry, BytesCountWhatALaunchTouches) {
  auto job = PrepareJob(FullSpec(BenchOp::kAttention), nullptr, "");
  ASSERT_TRUE(job.ok()) << job.status();
  const double q = 2 * 4 * 8 * 128 * 2, kv = 2 * 2 * 24 * 128 * 2;
  EXPECT_EQ((*job)->bytes, q + 2 * kv + q);

  pb::BenchJobSpec spec = FullSpec(BenchOp::kMoeGateUp);
  spec.mutable_moe()->set_tokens(1);
  job = PrepareJob(spec, nullptr, "");
  ASSERT_TRUE(job.ok()) << job.status();
  // x [1,64] bf16, topk_ids [1,2] int32, out [2, 32] (SwiGLU) bf16; 2 of 8
  // experts' W13 [64 x 64 fp4] and its scales [64 x 2].
  const double w13 = 2.0 / 8 * (8 * 64 * 64 / 2 + 8 * 64 * 2);
  EXPECT_EQ((*job)->bytes, 64 * 2 + 2 * 4 + 2 * 32 * 2 + w13);
}

TEST(OpRegistry, ShapeDescriptions) {
  EXPECT_EQ(FindBenchOp(BenchOp::kAttention)->ShapeDesc(FullSpec(BenchOp::kAttention)),
            "B=2 Hq=4 Hkv=2 Sq=8 Skv=24 D=128 causal");
  EXPECT_EQ(FindBenchOp(BenchOp::kFp8Attention)->ShapeDesc(FullSpec(BenchOp::kFp8Attention)),
            "B=2 Hq=4 Hkv=2 Sq=8 Skv=24 D=192/128 causal e4m3fnuz hadamard");
  EXPECT_EQ(FindBenchOp(BenchOp::kMlaDecode)->ShapeDesc(FullSpec(BenchOp::kMlaDecode)),
            "B=2 q_len=2 H=4 S=10 paged page_size=4");
  EXPECT_EQ(FindBenchOp(BenchOp::kMoeDown)->ShapeDesc(FullSpec(BenchOp::kMoeDown)),
            "T=4 E=8 top2 K=96 I=32 N=96");
}

TEST(OpRegistry, PerOpChecksNameTheSpecField) {
  pb::BenchJobSpec spec = FullSpec(BenchOp::kMoeDown);
  spec.clear_moe();
  EXPECT_EQ(ValidateSpec(spec).message(), "spec.moe: required for op moe_down");
  spec = FullSpec(BenchOp::kAttention);
  spec.mutable_attention()->set_head_dim_v(64);
  EXPECT_THAT(std::string(ValidateSpec(spec).message()), HasSubstr("bf16 attention needs head_dim_v == head_dim"));
  spec = FullSpec(BenchOp::kMlaDecode);
  spec.mutable_inputs()->set_kind(pb::INPUT_LONG_TAIL);
  EXPECT_THAT(std::string(ValidateSpec(spec).message()), HasSubstr("long-tail inputs exist for attention ops only"));
  spec = FullSpec(BenchOp::kFp8Attention);
  (*spec.mutable_inputs()->mutable_buffers())["k_descale"] = "buf-1";
  (*spec.mutable_inputs()->mutable_buffers())["w13"] = "buf-2";
  EXPECT_EQ(ValidateSpec(spec).message(), "spec.inputs.buffers: no input \"w13\" for fp8_attention; inputs are k, q, v");
}

// The gate's reference on a small problem is the whole output; on a large one
// an exact sample.
TEST(OpRegistry, EntriesGiveTheOracleReference) {
  for (const BenchOpEntry* e : AllBenchOps()) {
    SCOPED_TRACE(e->name());
    auto job = PrepareJob(FullSpec(e->op()), nullptr, "");
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<std::vector<double>> ref = e->Reference((*job)->host_call);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(static_cast<int64_t>(ref->size()), (*job)->host_call.OutputDesc().num_elements());
    absl::StatusOr<OracleSample> sample = e->ReferenceSample((*job)->host_call, (*job)->flops / 4);
    ASSERT_TRUE(sample.ok()) << sample.status();
    ASSERT_FALSE(sample->index.empty());
    for (size_t k = 0; k < sample->index.size(); ++k) {
      EXPECT_EQ(sample->reference[k], (*ref)[static_cast<size_t>(sample->index[k])]) << k;
    }
  }
}

}  // namespace
}  // namespace bench
}  // namespace kernelserve
