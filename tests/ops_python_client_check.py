#!/usr/bin/python3
"""FP8 attention, MLA decode and MoE through a Python client generated from proto/.

Generates Python stubs with Debian's protoc and grpc_python_plugin, starts the
kernelserve binary (CPU backend) on a free port and, over plain gRPC, checks
KernelService.Fp8Attention, MlaDecode and Moe against float64 NumPy references
written from DESIGN section 4 (tests/ops_numpy_ref.py; the project's C++ oracle
is not used):
- Fp8Attention: bf16 inputs in BSHD with GQA (lean P, e4m3fn); (192, 128) heads
  with Hadamard, e4m3fnuz, exact P and Sq > Skv causal (rows that see no key
  are 0); FP8 code inputs with per-head [B,H] descales, naive P, non-causal.
- MlaDecode: contiguous KV (e4m3fn and e4m3fnuz) with seq_lens and ragged
  q_lens, then the same rows written by PoolService.Write (several streamed
  messages, random order) into pools of page size 1 and 16 on permuted
  slots/pages; Read returns the rows written, Stats counts them, Delete
  removes the pool.
- Moe: gate/up with and without SwiGLU, down per pair and weighted, the layer.
Outputs must be bf16 of the expected shape with no NaN (tolerances: bf16
output rounding and FP8 P code flips, see tests/ops_numpy_ref.py), and the
server's own error report (report_error; for FP8 attention the split's
`rest`) must agree within 10% with the error measured against NumPy. One
malformed request per op (and a pool write) must get INVALID_ARGUMENT with a
message that names the field (the rejected pool write leaves rows_written as
it was), and the server must keep serving.
Inputs are fresh each run; the seed is printed (pass --seed to reproduce).
Exits non-zero on any failure.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops_numpy_ref as ref  # noqa: E402
from ops_check_util import finish, fresh_seed, start_server, stop_server  # noqa: E402


def generate_stubs(proto_dir, out):
    subprocess.run(["protoc", "-I", proto_dir, "--python_out=" + out, "--grpc_out=" + out,
                    "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin"] +
                   [os.path.join(proto_dir, "kernelserve/v1", f) for f in
                    ("tensor.proto", "kernel.proto", "pool.proto")], check=True)
    sys.path.insert(0, out)




class Check:
    def __init__(self, channel, rng):
        import grpc
        from kernelserve.v1 import kernel_pb2, kernel_pb2_grpc, pool_pb2, pool_pb2_grpc, tensor_pb2
        self.grpc, self.K, self.P, self.T = grpc, kernel_pb2, pool_pb2, tensor_pb2
        self.kernels = kernel_pb2_grpc.KernelServiceStub(channel)
        self.pools = pool_pb2_grpc.PoolServiceStub(channel)
        self.rng = rng
        self.failures = []

    # ------------------------------------------------------------ helpers
    def tensor(self, a, dtype, shape=None):
        a = np.ascontiguousarray(a)
        return self.T.Tensor(dtype=dtype, shape=list(a.shape if shape is None else shape),
                             data=a.astype(a.dtype.newbyteorder("<")).tobytes())

    def ref_(self, a, dtype, shape=None):
        return self.T.TensorRef(tensor=self.tensor(a, dtype, shape))

    def bf16(self, bits):
        return self.ref_(bits, self.T.BF16)

    def fp4(self, packed):
        """Packed FP4 bytes [..., K/2] as the tensor [..., K]."""
        return self.ref_(packed, self.T.FP4_E2M1, packed.shape[:-1] + (2 * packed.shape[-1],))

    def gaussian_bf16(self, shape, scale=1.0, mean=0.0):
        """(bits, float64 values) of Gaussian bf16 inputs."""
        bits = ref.bf16_from_f32(self.rng.standard_normal(shape) * scale + mean)
        return bits, ref.bf16_to_f64(bits)

    def fail(self, name, why):
        print("FAIL %s: %s" % (name, why))
        self.failures.append("%s: %s" % (name, why))

    def call(self, name, rpc, request):
        try:
            return rpc(request, timeout=60)
        except self.grpc.RpcError as e:
            self.fail(name, "%s: %s" % (e.code().name, e.details()))
            return None

    def output(self, name, response, shape):
        """The response's bf16 output as float64, or None (failure recorded)."""
        if not response.out.HasField("tensor"):
            self.fail(name, "no inline output tensor")
            return None
        t = response.out.tensor
        if t.dtype != self.T.BF16 or tuple(t.shape) != tuple(shape) or len(t.data) != 2 * int(np.prod(shape)):
            self.fail(name, "output dtype %s shape %s (%d bytes), expected bf16 %s" % (
                self.T.DType.Name(t.dtype), list(t.shape), len(t.data), list(shape)))
            return None
        return ref.bf16_to_f64(np.frombuffer(t.data, dtype="<u2").reshape(tuple(shape)))

    def verdict(self, name, response, expected, **kw):
        """Checks the output against expected, and the server's own error report against the error
        measured here (FP8 attention: its split's `rest`, the backend against the oracle; rel_rms
        there is against fp64 attention without P quantization, DESIGN section 4)."""
        if response is None:
            return None
        out = self.output(name, response, expected.shape)
        if out is None:
            return None
        why, summary = ref.compare(out, expected, **kw)
        if why:
            self.fail(name, why)
            return out
        rel = np.linalg.norm(out - expected) / np.linalg.norm(expected)
        fp8 = isinstance(response, self.K.Fp8AttentionResponse)
        reported = response.error.rest if fp8 else response.error.rel_rms
        if (fp8 and not response.error.has_split) or abs(reported - rel) > 0.1 * rel + 1e-5:
            self.fail(name, "the server reports error %s, NumPy measures %.4g" % (
                str(response.error).replace("\n", " "), rel))
        else:
            print("ok   %s: %s | server reports %.3g" % (name, summary, reported))
        return out

    def expect_invalid(self, name, rpc, request, field):
        """The call must fail with INVALID_ARGUMENT and a message naming field."""
        try:
            rpc(request, timeout=30)
            self.fail(name, "malformed request was accepted")
        except self.grpc.RpcError as e:
            if e.code() != self.grpc.StatusCode.INVALID_ARGUMENT or field not in e.details():
                self.fail(name, "%s: %s (want INVALID_ARGUMENT naming %s)" % (e.code().name, e.details(), field))
            else:
                print("ok   %s: %s: %s" % (name, e.code().name, e.details()))

    # ------------------------------------------------------------ Fp8Attention
    def fp8_attention(self):
        K, T = self.K, self.T
        # b, hq, hkv, sq, skv, d_qk, d_v, layout, causal, p mode, format, hadamard
        for b, hq, hkv, sq, skv, dqk, dv, layout, causal, mode, fmt, had in [
                (1, 4, 2, 48, 200, 128, 128, "bshd", True, "lean", "e4m3fn", False),
                (1, 2, 1, 80, 40, 192, 128, "bhsd", True, "exact", "e4m3fnuz", True)]:
            name = "Fp8Attention bf16 %s %s %s %s causal=%s hadamard=%s" % (
                (b, hq, hkv, sq, skv, dqk, dv), layout, mode, fmt, causal, had)
            shp = (lambda h, s, d: (b, h, s, d)) if layout == "bhsd" else (lambda h, s, d: (b, s, h, d))
            (qb, q), (kb, k), (vb, v) = (self.gaussian_bf16(shp(hq, sq, dqk)), self.gaussian_bf16(shp(hkv, skv, dqk)),
                                         self.gaussian_bf16(shp(hkv, skv, dv), mean=0.5))
            to_bhsd = (lambda x: x) if layout == "bhsd" else (lambda x: np.transpose(x, (0, 2, 1, 3)))
            expected, flip = ref.fp8_attention(*ref.fp8_operands(*(to_bhsd(x) for x in (q, k, v)), fmt, had, False),
                                               causal, mode, fmt)
            expected, flip = to_bhsd(expected), to_bhsd(flip)
            req = K.Fp8AttentionRequest(q=self.bf16(qb), k=self.bf16(kb), v=self.bf16(vb), causal=causal,
                                        layout=K.BHSD if layout == "bhsd" else K.BSHD, hadamard=had,
                                        format=K.E4M3FN if fmt == "e4m3fn" else K.E4M3FNUZ,
                                        p_mode={"exact": K.EXACT, "lean": K.LEAN}[mode], report_error=True,
                                        report_error_split=True)
            out = self.verdict(name, self.call(name, self.kernels.Fp8Attention, req), expected, extra=flip,
                               max_rel=5e-3)
            if out is not None and causal and sq > skv and np.any(to_bhsd(out)[:, :, :sq - skv] != 0):
                self.fail(name, "rows that see no key are not 0")

        # FP8 codes with per-head descales [B,H].
        b, hq, hkv, sq, skv, d, fmt = 2, 2, 1, 30, 100, 128, "e4m3fnuz"
        codes = [ref.fp8_encode(self.rng.standard_normal((b, h, s, d)) * 40, fmt)
                 for h, s in ((hq, sq), (hkv, skv), (hkv, skv))]
        descales = [self.rng.uniform(0.005, 0.05, (b, h)).astype(np.float32) for h in (hq, hkv, hkv)]
        name = "Fp8Attention %s codes, per-head descales, naive, non-causal %s" % (fmt, (b, hq, hkv, sq, skv, d))
        vals = ref.fp8_values(fmt)
        expected, flip = ref.fp8_attention(*(vals[c] * ds.astype(np.float64)[:, :, None, None]
                                             for c, ds in zip(codes, descales)), False, "naive", fmt)
        fp8 = T.FP8_E4M3FNUZ
        req = K.Fp8AttentionRequest(q=self.ref_(codes[0], fp8), k=self.ref_(codes[1], fp8),
                                    v=self.ref_(codes[2], fp8), q_descale=self.ref_(descales[0], T.FP32),
                                    k_descale=self.ref_(descales[1], T.FP32), v_descale=self.ref_(descales[2], T.FP32),
                                    causal=False, format=K.E4M3FNUZ, p_mode=K.NAIVE, report_error=True,
                                    report_error_split=True)
        self.verdict(name, self.call(name, self.kernels.Fp8Attention, req), expected, extra=flip, max_rel=5e-3)

        # Malformed: a per-head q_descale of the wrong head count.
        bad = K.Fp8AttentionRequest(q=self.ref_(codes[0], fp8), k=self.ref_(codes[1], fp8), v=self.ref_(codes[2], fp8),
                                    q_descale=self.ref_(descales[1], T.FP32), k_descale=self.ref_(descales[1], T.FP32),
                                    v_descale=self.ref_(descales[2], T.FP32), format=K.E4M3FNUZ)
        self.expect_invalid("Fp8Attention q_descale [2,1] for Hq = 2", self.kernels.Fp8Attention, bad, "q_descale")

    # ------------------------------------------------------------ MlaDecode
    def mla_decode(self):
        K, T = self.K, self.T
        kv_scale = 0.125
        # format, B, q_len, H, S, seq_lens, q_lens
        for fmt, bsz, ql, heads, s, seq_lens, q_lens in [("e4m3fn", 3, 4, 16, 90, [90, 31, 4], [4, 2, 1]),
                                                         ("e4m3fnuz", 2, 1, 32, 70, [70, 65], None)]:
            fp8 = T.FP8_E4M3FN if fmt == "e4m3fn" else T.FP8_E4M3FNUZ
            qlb, qlat = self.gaussian_bf16((bsz, ql, heads, 512), 0.3)
            qpb, qpe = self.gaussian_bf16((bsz, ql, heads, 64), 0.3)
            kv = ref.fp8_encode(self.rng.standard_normal((bsz, s, 576)) * 4, fmt)
            vals = ref.fp8_values(fmt)
            expected = ref.mla_decode(qlat, qpe, [vals[kv[b, :seq_lens[b]]] for b in range(bsz)], kv_scale,
                                      q_lens=q_lens)
            label = "%s B=%d q_len=%d H=%d S=%d seq_lens=%s q_lens=%s" % (fmt, bsz, ql, heads, s, seq_lens, q_lens)
            extra = {"q_lens": self.ref_(np.int32(q_lens), T.INT32)} if q_lens else {}
            name = "MlaDecode contiguous " + label
            req = K.MlaDecodeRequest(q_lat=self.bf16(qlb), q_pe=self.bf16(qpb), kv=self.ref_(kv, fp8),
                                     kv_scale=kv_scale, seq_lens=self.ref_(np.int32(seq_lens), T.INT32),
                                     report_error=True, **extra)
            self.check_mla(name, self.call(name, self.kernels.MlaDecode, req), expected, q_lens)
            for page in (1, 16):
                self.mla_pool(page, fmt, fp8, kv, seq_lens, kv_scale, qlb, qpb, extra, expected, q_lens, label)

        # Malformed: a ragged window longer than q_len.
        qlb, _ = self.gaussian_bf16((1, 2, 4, 512))
        qpb, _ = self.gaussian_bf16((1, 2, 4, 64))
        bad = K.MlaDecodeRequest(q_lat=self.bf16(qlb), q_pe=self.bf16(qpb),
                                 kv=self.ref_(np.zeros((1, 20, 576), np.uint8), T.FP8_E4M3FN),
                                 q_lens=self.ref_(np.int32([3]), T.INT32))
        self.expect_invalid("MlaDecode q_lens [3] for q_len 2", self.kernels.MlaDecode, bad, "q_lens[0]")

    def check_mla(self, name, response, expected, q_lens):
        if response is None:
            return
        out = self.output(name, response, expected.shape)
        if out is None:
            return
        if q_lens and any(np.any(out[b, n:] != 0) for b, n in enumerate(q_lens)):
            self.fail(name, "rows past q_lens are not 0")
            return
        self.verdict(name, response, expected)

    def mla_pool(self, page, fmt, fp8, kv, seq_lens, kv_scale, qlb, qpb, extra, expected, q_lens, label):
        K, P, T = self.K, self.P, self.T
        rng = self.rng
        name = "MlaDecode pool page=%d %s" % (page, label)
        num_pages, indices, indptr, slots, rows = ref.paged_layout(rng, kv, seq_lens, page)
        try:
            pool = self.pools.Create(P.CreatePoolRequest(kind=P.MLA_FUSED, num_slots=num_pages * page,
                                                         page_size=page, dtype=fp8, kv_scale=kv_scale,
                                                         label="ops-python-check"), timeout=30)
        except self.grpc.RpcError as e:
            self.fail(name, "Create: %s: %s" % (e.code().name, e.details()))
            return
        try:
            order = rng.permutation(len(slots))
            chunks = [P.WritePoolChunk(pool_id=pool.id, slots=self.tensor(slots[order[i:i + 29]], T.INT32),
                                       rows=self.tensor(rows[order[i:i + 29]], fp8))
                      for i in range(0, len(slots), 29)]
            written = self.pools.Write(iter(chunks), timeout=30)
            if written.rows_written != len(slots):
                self.fail(name, "Write says %d rows written, sent %d" % (written.rows_written, len(slots)))

            # Malformed: a slot past the pool; nothing of the message is written.
            bad = P.WritePoolChunk(pool_id=pool.id, slots=self.tensor(np.int32([0, num_pages * page]), T.INT32),
                                   rows=self.tensor(np.zeros((2, 576), np.uint8), fp8))
            self.expect_invalid("PoolService.Write slot %d of %d" % (num_pages * page, num_pages * page),
                                lambda r, timeout: self.pools.Write(iter([r]), timeout=timeout), bad, "slots[1]")
            stats = self.pools.Stats(P.PoolStatsRequest(pool_id=pool.id), timeout=30)
            if stats.rows_written != len(slots):
                self.fail(name, "Stats rows_written %d after the bad write, expected %d" % (
                    stats.rows_written, len(slots)))

            req = K.MlaDecodeRequest(q_lat=self.bf16(qlb), q_pe=self.bf16(qpb), pool_id=pool.id,
                                     seq_lens=self.ref_(np.int32(seq_lens), T.INT32),
                                     kv_indices=self.ref_(np.int32(indices), T.INT32),
                                     kv_indptr=self.ref_(np.int32(indptr), T.INT32), report_error=True, **extra)
            self.check_mla(name, self.call(name, self.kernels.MlaDecode, req), expected, q_lens)

            pick = rng.choice(len(slots), size=min(11, len(slots)), replace=False)
            back = b"".join(c.rows.data for c in self.pools.Read(
                P.ReadPoolRequest(pool_id=pool.id, slots=self.tensor(slots[pick], T.INT32), chunk_rows=4), timeout=30))
            if back != rows[pick].tobytes():
                self.fail(name, "Read did not return the rows written")
        except self.grpc.RpcError as e:
            self.fail(name, "%s: %s" % (e.code().name, e.details()))
        finally:
            self.pools.Delete(P.DeletePoolRequest(pool_id=pool.id), timeout=30)

    # ------------------------------------------------------------ Moe
    def moe(self):
        K, T = self.K, self.T
        rng = self.rng
        e, k, inter, n, tokens, top_k = 5, 96, 64, 96, 4, 2  # the layer needs N = K
        w13, w13s, w2, w2s, ids, weights = ref.random_moe_inputs(rng, e, k, inter, n, tokens, top_k)
        xb, x = self.gaussian_bf16((tokens, k))
        ab, a = self.gaussian_bf16((tokens * top_k, inter))
        w13d, w2d = ref.mxfp4_dequant(w13, w13s), ref.mxfp4_dequant(w2, w2s)
        weights_in = dict(w13=self.fp4(w13), w13_scales=self.ref_(w13s, T.E8M0), w2=self.fp4(w2),
                          w2_scales=self.ref_(w2s, T.E8M0))
        for stage, swiglu, weighted in [("gateup", False, False), ("gateup", True, False), ("down", False, False),
                                        ("down", False, True), ("layer", False, False)]:
            name = "Moe %s%s%s (E=%d K=%d I=%d N=%d T=%d top_k=%d)" % (
                stage, " swiglu" if swiglu else "", " weighted_sum" if weighted else "", e, k, inter, n, tokens, top_k)
            inp_bits, inp = (ab, a) if stage == "down" else (xb, x)
            req = K.MoeRequest(stage={"gateup": K.GATEUP, "down": K.DOWN, "layer": K.LAYER}[stage],
                               x=self.bf16(inp_bits), topk_ids=self.ref_(ids, T.INT32),
                               topk_weights=self.ref_(weights, T.FP32), swiglu=swiglu, weighted_sum=weighted,
                               report_error=True, **weights_in)
            expected = ref.moe(stage, inp, ids, weights.astype(np.float64), w13d, w2d, swiglu=swiglu,
                               weighted=weighted)
            self.verdict(name, self.call(name, self.kernels.Moe, req), expected)

        # Malformed: an expert id past E.
        bad_ids = ids.copy()
        bad_ids[1, 1] = e
        bad = K.MoeRequest(stage=K.GATEUP, x=self.bf16(xb), topk_ids=self.ref_(bad_ids, T.INT32),
                           w13=weights_in["w13"], w13_scales=weights_in["w13_scales"])
        self.expect_invalid("Moe topk_ids[1,1] = E", self.kernels.Moe, bad, "topk_ids[1,1]")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernelserve", required=True)
    ap.add_argument("--proto_dir", required=True)
    ap.add_argument("--seed", type=int, help="default: fresh")
    args = ap.parse_args()
    seed = fresh_seed(args.seed)
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    generate_stubs(args.proto_dir, work)
    import grpc

    start = time.time()
    server, port = start_server(args.kernelserve, work)
    try:
        channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        grpc.channel_ready_future(channel).result(timeout=30)
        check = Check(channel, np.random.default_rng(seed))
        check.fp8_attention()
        check.mla_decode()
        check.moe()
        # Still serving after the malformed requests: grpc.health.v1 Check -> SERVING (1).
        health = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
        resp = health(b"", timeout=10)
        if resp != b"\x08\x01":
            check.fail("health after the malformed requests", repr(resp))
        else:
            print("ok   health after the malformed requests: SERVING")
    finally:
        stop_server(server)
    finish(start, seed, check.failures)


if __name__ == "__main__":
    main()
