#!/usr/bin/python3
"""Independent NumPy check of kernelctl fp8-attention, mla-decode and moe.

Starts kernelserve (CPU backend) on a free port, writes random .npy inputs,
runs the kernelctl subcommands and compares their outputs with float64 NumPy
references written from DESIGN section 4 (tests/ops_numpy_ref.py; the
project's C++ oracle is not used):
- fp8-attention: exact, lean and naive P; e4m3fn and e4m3fnuz; causal and not;
  (d_qk, d_v) = (128, 128) and (192, 128); Hadamard; per-head descales; GQA;
  and uint8 FP8 inputs with their descales.
- mla-decode: contiguous KV with seq_lens and ragged q_lens (rows past a
  request's window must be exactly 0), and the same KV written in a random
  order into pools of page size 1 (flat slots) and 16 (permuted pages), read
  back, decoded and deleted.
- moe: gate/up with and without SwiGLU, down per pair and weighted, the layer.
Every output must be float32 holding exact bf16 values with no NaN; the
tolerances (bf16 output rounding, FP8 P code flips) are documented in
tests/ops_numpy_ref.py. Inputs are fresh each run; the seed is printed (pass
--seed to reproduce). Exits non-zero on any failure.
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




class Check:
    def __init__(self, kernelctl, port, workdir, rng):
        self.kernelctl, self.port, self.dir, self.rng = kernelctl, port, workdir, rng
        self.failures = []

    def path(self, name):
        return os.path.join(self.dir, name)

    def save(self, name, a):
        np.save(self.path(name), a)
        return self.path(name)

    def ctl(self, *args):
        """Runs kernelctl; returns stdout, or None (a failure is recorded) when it exits non-zero."""
        cmd = [self.kernelctl, "--server=127.0.0.1:%d" % self.port, "--timeout=120"] + list(args)
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            self.fail(" ".join(args[:2]), "kernelctl exit %d: %s" % (res.returncode, res.stderr.strip()))
            return None
        return res.stdout

    def fail(self, name, why):
        print("FAIL %s: %s" % (name, why))
        self.failures.append("%s: %s" % (name, why))

    def load_out(self, name, out_file):
        """The output .npy: float32 with bf16-exact values, as float64; None (failure recorded) if not."""
        o = np.load(out_file)
        if o.dtype != np.float32:
            self.fail(name, "output dtype %s, expected float32" % o.dtype)
            return None
        if np.any(o.view(np.uint32) & 0xFFFF):
            self.fail(name, "output values are not bf16-exact")
            return None
        return o.astype(np.float64)

    def verdict(self, name, out, expected, **kw):
        if out is None:
            return
        why, summary = ref.compare(out, expected, **kw)
        if why:
            self.fail(name, why)
        else:
            print("ok   %s: %s" % (name, summary))

    # ------------------------------------------------------------ fp8-attention
    def fp8_attention(self):
        rng = self.rng
        # b, hq, hkv, sq, skv, d_qk, d_v, causal, p mode, format, hadamard, per-head descales, softmax scale.
        # Scale 1 (not 1/sqrt(d)) spreads scores over tens of binades: many P codes are subnormal or 0
        # and most blocks enter their row with a tiny 2^(R_b - M).
        cases = [
            (1, 2, 1, 64, 300, 128, 128, True, "exact", "e4m3fn", False, False, None),
            (1, 2, 1, 64, 300, 128, 128, True, "lean", "e4m3fn", False, False, None),
            (1, 2, 1, 64, 300, 128, 128, True, "naive", "e4m3fn", False, False, None),
            (1, 2, 2, 70, 200, 192, 128, False, "lean", "e4m3fnuz", True, True, None),
            (2, 2, 2, 33, 129, 128, 128, True, "exact", "e4m3fnuz", True, False, None),
            (1, 4, 2, 17, 260, 192, 128, True, "naive", "e4m3fnuz", False, True, None),
            (1, 2, 1, 32, 256, 128, 128, True, "exact", "e4m3fn", False, False, 1.0),
            (1, 2, 1, 32, 256, 128, 128, False, "lean", "e4m3fnuz", False, False, 1.0),
        ]
        for b, hq, hkv, sq, skv, dqk, dv, causal, mode, fmt, had, per_head, scale in cases:
            name = "fp8-attention %s %s %s causal=%s hadamard=%s per_head=%s scale=%s" % (
                (b, hq, hkv, sq, skv, dqk, dv), mode, fmt, causal, had, per_head, scale)
            q = rng.standard_normal((b, hq, sq, dqk)).astype(np.float32)
            k = rng.standard_normal((b, hkv, skv, dqk)).astype(np.float32)
            v = (rng.standard_normal((b, hkv, skv, dv)) + 0.5).astype(np.float32)  # values with a mean
            args = ["fp8-attention", "--q=" + self.save("q.npy", q), "--k=" + self.save("k.npy", k),
                    "--v=" + self.save("v.npy", v), "--out=" + self.path("o.npy"), "--p-mode=" + mode,
                    "--format=" + fmt, "--causal" if causal else "--no-causal"]
            if had:
                args.append("--hadamard")
            if per_head:
                args.append("--descale-mode=head")
            if scale is not None:
                args.append("--scale=%r" % scale)
            if self.ctl(*args) is None:
                continue
            operands = ref.fp8_operands(*(ref.round_f32_to_bf16(x) for x in (q, k, v)), fmt, had, per_head)
            expected, flip = ref.fp8_attention(*operands, causal, mode, fmt, scale)
            self.verdict(name, self.load_out(name, self.path("o.npy")), expected, extra=flip, max_rel=5e-3)

        # uint8 FP8 codes with fp32 descales: the server uses them as they are.
        b, h, sq, skv, d, fmt = 1, 2, 40, 150, 128, "e4m3fn"
        codes = [ref.fp8_encode(rng.standard_normal((b, h, s, d)) * 60, fmt) for s in (sq, skv, skv)]
        descales = [np.float32([x]) for x in rng.uniform(0.005, 0.05, 3)]
        args = ["fp8-attention", "--out=" + self.path("o.npy"), "--p-mode=lean", "--format=" + fmt]
        for n, c, ds in zip("qkv", codes, descales):
            args += ["--%s=%s" % (n, self.save(n + "8.npy", c)), "--%s-descale=%s" % (n, self.save(n + "s.npy", ds))]
        name = "fp8-attention uint8 %s codes + descales, lean, causal" % fmt
        if self.ctl(*args) is not None:
            vals = ref.fp8_values(fmt)
            expected, flip = ref.fp8_attention(*(vals[c] * float(ds[0]) for c, ds in zip(codes, descales)),
                                               True, "lean", fmt)
            self.verdict(name, self.load_out(name, self.path("o.npy")), expected, extra=flip, max_rel=5e-3)

    # ------------------------------------------------------------ mla-decode
    def mla_decode(self):
        rng = self.rng
        fmt, kv_scale = "e4m3fn", 0.25
        vals = ref.fp8_values(fmt)
        # B, q_len, H, S, seq_lens, q_lens
        for bsz, ql, heads, s, seq_lens, q_lens in [(2, 3, 8, 100, [100, 40], [3, 1]),
                                                    (1, 8, 128, 37, None, None),
                                                    (3, 2, 16, 65, [65, 2, 30], [2, 1, 2])]:
            q_lat = (rng.standard_normal((bsz, ql, heads, 512)) * 0.3).astype(np.float32)
            q_pe = (rng.standard_normal((bsz, ql, heads, 64)) * 0.3).astype(np.float32)
            kv = ref.fp8_encode(rng.standard_normal((bsz, s, 576)) * 4, fmt)
            lens = seq_lens or [s] * bsz
            expected = ref.mla_decode(ref.round_f32_to_bf16(q_lat), ref.round_f32_to_bf16(q_pe),
                                      [vals[kv[b, :lens[b]]] for b in range(bsz)], kv_scale, q_lens=q_lens)
            common = ["--q-lat=" + self.save("ql.npy", q_lat), "--q-pe=" + self.save("qp.npy", q_pe)]
            if q_lens:
                common.append("--q-lens=" + self.save("qlens.npy", np.int32(q_lens)))
            label = "B=%d q_len=%d H=%d S=%d seq_lens=%s q_lens=%s" % (bsz, ql, heads, s, seq_lens, q_lens)

            name = "mla-decode contiguous " + label
            args = common + ["--kv=" + self.save("kv.npy", kv), "--kv-format=" + fmt, "--kv-scale=%r" % kv_scale,
                             "--out=" + self.path("o.npy")]
            if seq_lens:
                args.append("--seq-lens=" + self.save("sl.npy", np.int32(seq_lens)))
            if self.ctl("mla-decode", *args) is not None:
                self.check_mla(name, self.path("o.npy"), expected, q_lens)

            for page in (1, 16):
                self.mla_pool(page, kv, lens, common, expected, q_lens, fmt, kv_scale, label)

    def check_mla(self, name, out_file, expected, q_lens):
        o = self.load_out(name, out_file)
        if o is None:
            return
        if q_lens and any(np.any(o[b, n:] != 0) for b, n in enumerate(q_lens)):
            self.fail(name, "rows past q_lens are not zero")
            return
        self.verdict(name, o, expected)

    def mla_pool(self, page, kv, lens, common, expected, q_lens, fmt, kv_scale, label):
        """Writes the requests' rows into a pool in random order on permuted pages, decodes, reads back."""
        rng = self.rng
        num_pages, indices, indptr, slots, rows = ref.paged_layout(rng, kv, lens, page)
        out = self.ctl("pool", "create", "--kind=mla", "--slots=%d" % (num_pages * page), "--page-size=%d" % page,
                       "--kv-scale=%r" % kv_scale, "--dtype=fp8_" + fmt)
        if out is None:
            return
        pool = out.split()[0]
        name = "mla-decode pool page=%d %s" % (page, label)
        try:
            order = rng.permutation(len(slots))
            if self.ctl("pool", "write", "--pool=" + pool, "--rows=" + self.save("rows.npy", rows[order]),
                        "--slot-ids=" + self.save("slots.npy", slots[order]), "--chunk-rows=37") is None:
                return
            args = common + ["--pool=" + pool, "--seq-lens=" + self.save("sl.npy", np.int32(lens)),
                             "--kv-indices=" + self.save("ki.npy", np.int32(indices)),
                             "--kv-indptr=" + self.save("kp.npy", np.int32(indptr)), "--out=" + self.path("op.npy")]
            if self.ctl("mla-decode", *args) is not None:
                self.check_mla(name, self.path("op.npy"), expected, q_lens)
            pick = rng.choice(len(slots), size=min(9, len(slots)), replace=False)
            if self.ctl("pool", "read", "--pool=" + pool, "--slot-ids=" + self.save("rs.npy", slots[pick]),
                        "--out=" + self.path("rb.npy")) is not None:
                back = np.load(self.path("rb.npy"))
                if back.dtype != np.uint8 or not np.array_equal(back, rows[pick]):
                    self.fail(name, "pool read gave %s %s, not the rows written" % (back.dtype, back.shape))
        finally:
            self.ctl("pool", "delete", "--pool=" + pool)

    # ------------------------------------------------------------ moe
    def moe(self):
        rng = self.rng
        e, k, inter, n, tokens, top_k = 6, 128, 64, 128, 5, 3  # the layer needs N = K
        w13, w13s, w2, w2s, ids, weights = ref.random_moe_inputs(rng, e, k, inter, n, tokens, top_k)
        x = rng.standard_normal((tokens, k)).astype(np.float32)
        a = rng.standard_normal((tokens * top_k, inter)).astype(np.float32)
        w13d, w2d = ref.mxfp4_dequant(w13, w13s), ref.mxfp4_dequant(w2, w2s)
        common = ["--topk-ids=" + self.save("ids.npy", ids), "--topk-weights=" + self.save("w.npy", weights),
                  "--w13=" + self.save("w13.npy", w13), "--w13-scales=" + self.save("w13s.npy", w13s),
                  "--w2=" + self.save("w2.npy", w2), "--w2-scales=" + self.save("w2s.npy", w2s),
                  "--out=" + self.path("o.npy")]
        for stage, flag, inp in [("gateup", None, x), ("gateup", "--swiglu", x), ("down", None, a),
                                 ("down", "--weighted-sum", a), ("layer", None, x)]:
            name = "moe %s%s (E=%d K=%d I=%d N=%d T=%d top_k=%d)" % (
                stage, " " + flag if flag else "", e, k, inter, n, tokens, top_k)
            if self.ctl("moe", "--stage=" + stage, "--x=" + self.save("x.npy", inp), *common,
                        *([flag] if flag else [])) is None:
                continue
            expected = ref.moe(stage, ref.round_f32_to_bf16(inp), ids, weights.astype(np.float64), w13d, w2d,
                               swiglu=flag == "--swiglu", weighted=flag == "--weighted-sum")
            self.verdict(name, self.load_out(name, self.path("o.npy")), expected)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernelctl", required=True)
    ap.add_argument("--kernelserve", required=True)
    ap.add_argument("--seed", type=int, help="default: fresh")
    args = ap.parse_args()
    seed = fresh_seed(args.seed)
    workdir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    start = time.time()
    proc, port = start_server(args.kernelserve, workdir)
    check = Check(args.kernelctl, port, workdir, np.random.default_rng(seed))
    try:
        check.fp8_attention()
        check.mla_decode()
        check.moe()
    finally:
        stop_server(proc)
    finish(start, seed, check.failures)


if __name__ == "__main__":
    main()
