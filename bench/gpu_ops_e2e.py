#!/usr/bin/env python3
"""Every op through the real server and kernelctl on the GPU machine.

Starts kernelserve --backend=auto (it must pick cuda), then runs kernelctl
fp8-attention, mla-decode (contiguous and through a pool with shuffled slots),
decode (per-head bf16 and e4m3fn pools, paged, ragged) and moe (every stage)
on fresh random .npy inputs with --report-error, and
checks the server's error against the fp64 oracle and that the pooled MLA
output equals the contiguous one bit for bit. Prints one line per check.
Usage: bench/gpu_ops_e2e.py --bin=.bundle/bin [--backend=auto]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

FAIL = []


def start(binary, backend, workdir):
    log = os.path.join(workdir, "server.log")
    proc = subprocess.Popen([binary, "--listen=127.0.0.1:0", "--backend=" + backend],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    for _ in range(600):
        m = re.search(r"listening on port (\d+)", open(log).read())
        if m:
            return proc, int(m.group(1)), log
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    sys.exit("kernelserve did not start:\n" + open(log).read())


def ctl(kc, port, *args):
    res = subprocess.run([kc, "--server=127.0.0.1:%d" % port, "--timeout=300"] + list(args),
                         capture_output=True, text=True)
    return res.returncode, res.stdout + res.stderr


EXPECT = None


def check(name, rc, out, max_rel):
    m = re.search(r"rel_rms=([0-9.eE+-]+|inf|nan)", out)
    backend = re.search(r"backend=(\w+)", out)
    if rc != 0 or not m:
        FAIL.append(name)
        print("FAIL %-40s rc=%d %s" % (name, rc, out.strip()[-300:]))
        return
    rel = float(m.group(1))
    ok = rel <= max_rel and (EXPECT is None or (backend and backend.group(1) == EXPECT))
    rest = re.search(r"rest=([0-9.eE+-]+)", out)
    if rest and float(rest.group(1)) > 1e-2:  # kernel vs oracle with the same P quantization
        ok = False
    if not ok:
        FAIL.append(name)
    print("%s %-40s rel_rms=%.3g (limit %g) backend=%s" % ("ok  " if ok else "FAIL", name, rel, max_rel,
                                                          backend.group(1) if backend else "?"))


def fp8_codes(rng, shape):
    # e4m3fn codes of moderate magnitude (exponent field 4..10), random sign; no NaN.
    exp = rng.integers(4, 11, size=shape, dtype=np.uint8)
    man = rng.integers(0, 8, size=shape, dtype=np.uint8)
    sign = rng.integers(0, 2, size=shape, dtype=np.uint8)
    return (sign << 7) | (exp << 3) | man


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--expect", default=None, help="backend every call must report, e.g. cuda")
    args = ap.parse_args()
    global EXPECT
    EXPECT = args.expect
    kc = os.path.join(args.bin, "kernelctl")
    w = tempfile.mkdtemp()
    seed = int.from_bytes(os.urandom(8), "little")
    print("seed", seed)
    rng = np.random.default_rng(seed)
    proc, port, log = start(os.path.join(args.bin, "kernelserve"), args.backend, w)
    try:
        rc, out = ctl(kc, port, "devices")
        print(out.strip())
        p = lambda n: os.path.join(w, n)
        save = lambda n, a: np.save(p(n), a)

        # FP8 attention: bf16 inputs quantized by the server, every P mode, both head shapes.
        for dqk in (128, 192):
            save("q.npy", rng.standard_normal((1, 4, 1024, dqk), dtype=np.float32))
            save("k.npy", rng.standard_normal((1, 4, 1024, dqk), dtype=np.float32))
            save("v.npy", rng.standard_normal((1, 4, 1024, 128), dtype=np.float32))
            for mode in ("exact", "lean", "naive"):
                rc, out = ctl(kc, port, "fp8-attention", "--q=" + p("q.npy"), "--k=" + p("k.npy"),
                              "--v=" + p("v.npy"), "--out=" + p("o8.npy"), "--p-mode=" + mode,
                              "--report-split")
                check("fp8-attention d_qk=%d %s" % (dqk, mode), rc, out, 0.08)
                print("     " + " ".join(l for l in out.splitlines() if "input_quant" in l or "split" in l))

        # MLA decode: contiguous, then the same rows through a pool with shuffled slots.
        B, QL, H, S = 2, 4, 16, 3000
        save("ql.npy", rng.standard_normal((B, QL, H, 512), dtype=np.float32))
        save("qp.npy", rng.standard_normal((B, QL, H, 64), dtype=np.float32))
        kv = fp8_codes(rng, (B, S, 576))
        save("kv.npy", kv)
        rc, out = ctl(kc, port, "mla-decode", "--q-lat=" + p("ql.npy"), "--q-pe=" + p("qp.npy"),
                      "--kv=" + p("kv.npy"), "--kv-format=e4m3fn", "--kv-scale=0.05", "--out=" + p("oc.npy"),
                      "--report-error")
        check("mla-decode contiguous", rc, out, 1e-2)
        rc, out = ctl(kc, port, "pool", "create", "--kind=mla", "--slots=%d" % (B * S + 64),
                      "--dtype=fp8_e4m3fn", "--kv-scale=0.05")
        pool = out.split()[0] if rc == 0 else ""
        slots = rng.permutation(B * S + 64)[:B * S].astype(np.int32)
        save("rows.npy", kv.reshape(B * S, 576))
        save("slots.npy", slots)
        rc2, out2 = ctl(kc, port, "pool", "write", "--pool=" + pool, "--rows=" + p("rows.npy"),
                        "--slot-ids=" + p("slots.npy"))
        save("seq.npy", np.full(B, S, np.int32))
        save("idx.npy", slots)
        save("ptr.npy", np.array([0, S, 2 * S], np.int32))
        rc3, out3 = ctl(kc, port, "mla-decode", "--q-lat=" + p("ql.npy"), "--q-pe=" + p("qp.npy"),
                        "--pool=" + pool, "--seq-lens=" + p("seq.npy"), "--kv-indices=" + p("idx.npy"),
                        "--kv-indptr=" + p("ptr.npy"), "--out=" + p("op.npy"), "--report-error")
        check("mla-decode pool (shuffled slots)", rc3, out3 if rc == 0 and rc2 == 0 else out + out2, 1e-2)
        if rc3 == 0:
            same = np.array_equal(np.load(p("oc.npy")).view(np.uint32), np.load(p("op.npy")).view(np.uint32))
            print("%s mla-decode pool == contiguous bit for bit" % ("ok  " if same else "FAIL"))
            if not same:
                FAIL.append("mla pool == contiguous")

        # Decode attention over per-head pools (bf16 and e4m3fn rows), GQA 4:1, page 16 in shuffled order,
        # ragged seq_lens and new tokens (q_lens), one request long enough to be split.
        B, QL, HQ, HKV, D, PAGE = 3, 4, 16, 4, 128, 16
        seq = np.array([5000, 37, 700], np.int32)
        qlens = np.array([4, 1, 3], np.int32)
        pages = [(int(s) + PAGE - 1) // PAGE for s in seq]
        total_pages = sum(pages) + 8
        order = rng.permutation(total_pages).astype(np.int32)
        idx = order[:sum(pages)]
        save("dq.npy", rng.standard_normal((B, QL, HQ, D), dtype=np.float32))
        save("dsl.npy", seq)
        save("dql.npy", qlens)
        save("dki.npy", idx)
        save("dkp.npy", np.concatenate([[0], np.cumsum(pages)]).astype(np.int32))
        slot_ids = np.concatenate([p_ * PAGE + np.arange(PAGE) for p_ in idx]).astype(np.int32)
        save("dslots.npy", slot_ids)
        for dtype in ("bf16", "fp8_e4m3fn"):
            rc, out = ctl(kc, port, "pool", "create", "--kind=per-head", "--slots=%d" % (total_pages * PAGE),
                          "--page-size=%d" % PAGE, "--dtype=" + dtype, "--heads=%d" % HKV, "--head-dim=%d" % D,
                          "--kv-scale=0.25")
            pool = out.split()[0] if rc == 0 else ""
            if dtype == "bf16":
                rows = rng.standard_normal((len(slot_ids), 2 * HKV * D), dtype=np.float32)
            else:
                rows = fp8_codes(rng, (len(slot_ids), 2 * HKV * D))
            save("drows.npy", rows)
            rc2, out2 = ctl(kc, port, "pool", "write", "--pool=" + pool, "--rows=" + p("drows.npy"),
                            "--slot-ids=" + p("dslots.npy"))
            rc3, out3 = ctl(kc, port, "decode", "--q=" + p("dq.npy"), "--pool=" + pool, "--seq-lens=" + p("dsl.npy"),
                            "--q-lens=" + p("dql.npy"), "--kv-indices=" + p("dki.npy"), "--kv-indptr=" + p("dkp.npy"),
                            "--out=" + p("do.npy"), "--report-error")
            ok_in = rc == 0 and rc2 == 0
            check("decode %s pool (GQA 4, page 16 shuffled)" % dtype, rc3 if ok_in else 1,
                  out3 if ok_in else out + out2, 1e-2)
            if rc3 == 0:
                o = np.load(p("do.npy"))
                pad = [float(np.abs(o[b, qlens[b]:]).max()) if qlens[b] < QL else 0.0 for b in range(B)]
                print("%s decode rows past each request's window are 0" % ("ok  " if max(pad) == 0 else "FAIL"))
                if max(pad) != 0:
                    FAIL.append("decode %s padding rows" % dtype)

        # MXFP4 MoE: every stage, Kimi-like K and I with 16 experts.
        E, K, I, T, TOPK = 16, 3584, 384, 8, 4
        save("x.npy", rng.standard_normal((T, K), dtype=np.float32))
        ids = np.stack([rng.permutation(E)[:TOPK] for _ in range(T)]).astype(np.int32)
        save("ids.npy", ids)
        wts = rng.random((T, TOPK), dtype=np.float32)
        save("wts.npy", wts / wts.sum(1, keepdims=True))
        save("w13.npy", rng.integers(0, 256, (E, 2 * I, K // 2), dtype=np.uint8))
        save("w13s.npy", rng.integers(118, 124, (E, 2 * I, K // 32), dtype=np.uint8))
        save("w2.npy", rng.integers(0, 256, (E, K, I // 2), dtype=np.uint8))
        save("w2s.npy", rng.integers(118, 124, (E, K, I // 32), dtype=np.uint8))
        save("a.npy", rng.standard_normal((T * TOPK, I), dtype=np.float32))
        common = ["--topk-ids=" + p("ids.npy"), "--topk-weights=" + p("wts.npy"), "--w13=" + p("w13.npy"),
                  "--w13-scales=" + p("w13s.npy"), "--w2=" + p("w2.npy"), "--w2-scales=" + p("w2s.npy"),
                  "--out=" + p("y.npy"), "--report-error"]
        for stage, extra, x in (("gateup", [], "x.npy"), ("gateup", ["--swiglu"], "x.npy"),
                                ("down", [], "a.npy"), ("down", ["--weighted-sum"], "a.npy"),
                                ("layer", [], "x.npy")):
            rc, out = ctl(kc, port, "moe", "--stage=" + stage, "--x=" + p(x), *(common + extra))
            check("moe %s %s" % (stage, " ".join(extra)), rc, out, 1e-2)
    finally:
        proc.terminate()
        rc = proc.wait(timeout=60)
        print("%s kernelserve exit code after SIGTERM: %d" % ("ok  " if rc == 0 else "FAIL", rc))
        if rc != 0:
            FAIL.append("sigterm exit")
    print("gpu_ops_e2e: %d failed%s" % (len(FAIL), (": " + ", ".join(FAIL)) if FAIL else ""))
    sys.exit(1 if FAIL else 0)


if __name__ == "__main__":
    main()
