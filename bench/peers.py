#!/usr/bin/env python3
"""Peers for the bf16 MHA forward: torch SDPA with the cuDNN and
FlashAttention-2 backends at the seed shapes, timed with CUDA events (median).
TFLOP/s count causal pairs once, as attention_cuda_bench does. Head dim 128
first, then the (192, 128) MLA shape, then the other head dims of --dims
(default 64), so a timeout cuts the newest rows first.

  python3 bench/peers.py [--iters N] [--dims 128,64] [--shapes B:H:S,...]
                         [--causal both|no|yes] [--backends cuDNN,FA2] [--no-mla]
                         [--ours PATH/libks_peer_shim.so [--ours-fp8]]

--shapes/--causal/--backends narrow the run (a clock probe samples one kind
of launch at a time, bench/unrun/call.sh); --no-mla skips the (192, 128) row.

--ours times our bf16 kernel too (the entry our CUDA backend's dispatcher
picks, through bench/peer_shim.cc) in this process, on the same q, k, v,
stream and timer as the peers: the GPU's clocks fall with how long it has been
busy, so separate processes one after another compare different clocks. Each
row then runs two rounds of [ours, each peer] and reports for each the median
of its two rounds' medians (time_ms's), and a last column "ours / peer", peer
ms / ours ms (above 1: ours is faster). Before timing, our output is checked
against cuDNN's (fp32 math on 64 query rows of the first and last head when
cuDNN is not among --backends or has no kernel for the row): any NaN/Inf or a
max abs diff above 2e-2 * max(1, max|ref|) fails the row (ours is not timed)
and the run (exit status 1). --ours-fp8 adds our FP8 attention at d128 and
(192, 128): q, k, v quantized to e4m3fn with one scale per tensor (descale =
amax / 448), lean P, the kernel alone (fp8_attention_cuda_bench's "fp8 in");
checked loosely (finite, max abs diff below 0.15 max|ref|), with "ours / peer"
against cuDNN bf16 of the same row.
"""
import argparse
import ctypes
import math
import os
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

SHAPES = [(2, 24, 8192), (1, 32, 16384), (2, 24, 16384), (1, 16, 32768)]
BACKENDS = [("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FA2", SDPBackend.FLASH_ATTENTION)]


def time_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def time_row(label, q, k, v, causal, flops, args):
    """Times the peers on q, k, v and prints a row each; with --ours, ours
    too (checked first), in two rounds of [ours, each peer]."""
    timers = []  # (name, () -> ms), in the order of a round
    ours = args.ours
    if ours:
        timers += ours.timers(label, q, k, v, causal, reference(q, k, v, causal, args), args)
    for name, be in args.backend_list:
        def peer(be=be):
            with sdpa_kernel([be]):
                return time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                               args.warmup, args.iters)
        timers.append((name, peer))
    rounds, failed = {name: [] for name, _ in timers}, {}
    bf16 = next((n for n, _ in timers if n.startswith("ours (")), None)

    def row(name):
        if name in failed:
            print(f"| {label} | {name} | - | failed: {type(failed[name]).__name__} |" + (" - |" if ours else ""),
                  flush=True)
            return
        ms = statistics.median(rounds[name])
        ratio = ""
        if ours:
            # Peers against our bf16 kernel; our FP8 kernel against cuDNN bf16.
            mine, theirs = (name, "cuDNN") if name == "ours fp8 lean" else (bf16, name)
            ratio = " - |"
            if mine != theirs and rounds.get(mine) and rounds.get(theirs):
                ratio = f" {statistics.median(rounds[theirs]) / statistics.median(rounds[mine]):.2f} |"
        print(f"| {label} | {name} | {ms:.3f} | {flops / (ms * 1e-3) / 1e12:.1f} |{ratio}", flush=True)

    for _ in range(2 if ours else 1):
        for name, timer in timers:
            if name in failed:
                continue
            try:
                rounds[name].append(timer())
            except Exception as e:  # a backend without a kernel for the case
                failed[name], rounds[name] = e, []
                if name.startswith("ours"):
                    ours.fail(label, name, e)
            if not ours:
                row(name)
    if ours:
        for name, _ in timers:
            row(name)


def reference(q, k, v, causal, args):
    """What ours is checked against: (what, pick, ref), ref in fp32 and
    pick(out) the part of an output that ref holds. cuDNN's output where
    cuDNN is among the backends and runs the row, else fp32 math on 64 query
    rows of the first and the last (batch, head)."""
    if "cuDNN" in (n for n, _ in args.backend_list):
        try:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return "cuDNN", lambda o: o, F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
        except Exception:
            pass
    s = q.shape[2]
    rows = torch.linspace(0, s - 1, 64, device=q.device).round().long().unique()

    def math_rows(q1, k1, v1):  # softmax(q k^T / sqrt(d_qk)) v of one head's rows; Sq = Skv
        scores = (q1[rows].float() @ k1.float().T) / math.sqrt(q1.shape[-1])
        if causal:
            scores.masked_fill_(torch.arange(s, device=q.device)[None, :] > rows[:, None], float("-inf"))
        return torch.softmax(scores, dim=-1) @ v1.float()

    ref = torch.stack([math_rows(q[0, 0], k[0, 0], v[0, 0]), math_rows(q[-1, -1], k[-1, -1], v[-1, -1])])
    return "fp32 math", lambda o: torch.stack([o[0, 0, rows], o[-1, -1, rows]]), ref


def to_e4m3(x):
    """x's e4m3fn codes with one scale for the tensor, as numerics::QuantizeFp8:
    descale = amax / 448 (1 if amax is 0), code = x / descale."""
    amax = x.abs().amax().float().item()
    descale = amax / 448.0 if amax > 0 else 1.0
    return (x.float() / descale).to(torch.float8_e4m3fn), descale


class Ours:
    """Our kernels through libks_peer_shim.so (bench/peer_shim.cc)."""

    def __init__(self, path, fp8):
        lib = ctypes.CDLL(os.path.abspath(path))
        tail = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]  # causal, stream, err, err_len
        lib.ks_attention_bf16.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + tail
        lib.ks_attention_bf16.restype = ctypes.c_int
        lib.ks_attention_bf16_kernel.argtypes = [ctypes.c_int64]
        lib.ks_attention_bf16_kernel.restype = ctypes.c_char_p
        lib.ks_fp8_attention_lean.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_float] * 3 + [ctypes.c_int64] * 5 + tail
        lib.ks_fp8_attention_lean.restype = ctypes.c_int
        self.lib, self.fp8 = lib, fp8
        self.err = ctypes.create_string_buffer(4096)
        self.failed, self.checked = [], []

    def _call(self, fn, *args):
        stream = torch.cuda.current_stream().cuda_stream
        if fn(*args, stream, self.err, len(self.err)) != 0:
            raise RuntimeError(self.err.value.decode(errors="replace"))

    def bf16(self, q, k, v, out, causal):
        self._call(self.lib.ks_attention_bf16, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                   *q.shape, int(causal))

    def fp8_lean(self, q8, k8, v8, descales, out, causal):
        b, h, s, d_qk = q8.shape
        self._call(self.lib.ks_fp8_attention_lean, q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), out.data_ptr(),
                   *descales, b, h, s, d_qk, v8.shape[3], int(causal))

    def timers(self, label, q, k, v, causal, ref, args):
        """[(name, () -> ms)] of our kernels that serve the row and pass the check."""
        out = []
        if q.shape[3] == v.shape[3]:
            kernel = self.lib.ks_attention_bf16_kernel(q.shape[3])
            if kernel is None:
                print(f"| {label} | ours | - | no kernel for d{q.shape[3]} | - |", flush=True)
            else:
                name = f"ours ({kernel.decode()})"
                o = torch.empty_like(q)
                fn = lambda: self.bf16(q, k, v, o, causal)
                if self.check(label, name, fn, o, ref, lambda ref_max: 2e-2 * max(1.0, ref_max)):
                    out.append((name, lambda: time_ms(fn, args.warmup, args.iters)))
        if self.fp8 and q.shape[3] in (128, 192) and v.shape[3] == 128:
            (q8, qd), (k8, kd), (v8, vd) = to_e4m3(q), to_e4m3(k), to_e4m3(v)
            o8 = torch.empty(*q.shape[:3], v.shape[3], device=q.device, dtype=torch.bfloat16)
            fn8 = lambda: self.fp8_lean(q8, k8, v8, (qd, kd, vd), o8, causal)
            if self.check(label, "ours fp8 lean", fn8, o8, ref, lambda ref_max: 0.15 * ref_max):
                out.append(("ours fp8 lean", lambda: time_ms(fn8, args.warmup, args.iters)))
        return out

    def check(self, label, name, fn, out, ref, tol):
        """Runs fn once and checks out against ref: True when it passes."""
        what, pick, want = ref
        try:
            out.fill_(float("nan"))
            fn()
            got = pick(out).float()
        except Exception as e:
            print(f"| {label} | {name} | - | failed: {type(e).__name__} | - |", flush=True)
            self.fail(label, name, e)
            return False
        ref_max = want.abs().max().item()
        diff = (got - want).abs().max().item()
        finite = bool(torch.isfinite(got).all())
        self.checked.append((diff / max(ref_max, 1e-30), label, name, what))
        if finite and diff <= tol(ref_max):
            return True
        why = f"max abs diff {diff:.4g} vs {what} (max abs {ref_max:.4g}, tolerance {tol(ref_max):.4g})"
        print(f"| {label} | {name} | - | CHECK FAILED: {'non-finite output, ' if not finite else ''}{why} | - |",
              flush=True)
        self.fail(label, name, why)
        return False

    def fail(self, label, name, why):
        print(f"peers.py: {name} at {label.replace(' |', ',')}: {why}", file=sys.stderr, flush=True)
        self.failed.append((label, name))

    def summary(self):
        if self.checked:
            worst = max(self.checked)
            print(f"\nours checked on {len(self.checked)} rows; worst max abs diff / max abs ref {worst[0]:.3g} "
                  f"({worst[2]} at {worst[1].replace(' |', ',')}, against {worst[3]})")
        if self.failed:
            print(f"ours FAILED on {len(self.failed)} rows: "
                  + "; ".join(f"{n} at {l.replace(' |', ',')}" for l, n in self.failed))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--shapes", default="", help="B:H:S,... instead of the seed shapes")
    ap.add_argument("--causal", default="both", choices=["both", "no", "yes"])
    ap.add_argument("--backends", default="cuDNN,FA2")
    ap.add_argument("--no-mla", action="store_true")
    ap.add_argument("--ours", default="", help="libks_peer_shim.so: time our kernels beside the peers")
    ap.add_argument("--ours-fp8", action="store_true", help="with --ours, our FP8 attention (lean P) too")
    args = ap.parse_args()
    if args.ours_fp8 and not args.ours:
        ap.error("--ours-fp8 needs --ours")
    dims = [int(x) for x in args.dims.split(",") if x]
    if args.shapes:
        try:
            args.shape_list = [tuple(int(f) for f in item.split(":")) for item in args.shapes.split(",") if item]
        except ValueError:
            args.shape_list = [()]
        if any(len(t) != 3 or min(t) < 1 for t in args.shape_list):
            ap.error("--shapes: each item is B:H:S with positive integers")
    else:
        args.shape_list = SHAPES
    args.causal_modes = {"both": (False, True), "no": (False,), "yes": (True,)}[args.causal]
    wanted = [x for x in args.backends.split(",") if x]
    args.backend_list = [be for be in BACKENDS if be[0] in wanted]
    if len(args.backend_list) != len(wanted):
        ap.error(f"--backends: each of {wanted} must be one of {[n for n, _ in BACKENDS]}")
    args.ours = Ours(args.ours, args.ours_fp8) if args.ours else None
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    if args.ours:
        print("\n| (B, H, S) | d | causal | peer | ms (median) | TFLOP/s | ours / peer |\n"
              "| --- | --- | --- | --- | --- | --- | --- |")
    else:
        print("\n| (B, H, S) | d | causal | peer | ms (median) | TFLOP/s |\n| --- | --- | --- | --- | --- | --- |")
    if 128 in dims:
        time_seed_shapes(128, args)
        if not args.no_mla:
            time_mla_shape(args)
    for d in dims:
        if d != 128:
            time_seed_shapes(d, args)
    if args.ours:
        args.ours.summary()
        if args.ours.failed:
            sys.exit(1)


def time_seed_shapes(d, args):
    for b, h, s in args.shape_list:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
                   for _ in range(3))
        for causal in args.causal_modes:
            pairs = s * (s + 1) / 2 if causal else s * s
            flops = 4.0 * b * h * d * pairs
            time_row(f"({b}, {h}, {s}) | {d} | {'yes' if causal else 'no'}", q, k, v, causal, flops, args)
        del q, k, v
        torch.cuda.empty_cache()


def time_mla_shape(args):
    # ZYFA's MLA head shape, (d_qk, d_v) = (192, 128), causal 16K: the peer of
    # our FP8 attention at that shape (FlashAttention-2 has no kernel for it).
    b, h, s = 1, 16, 16384
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, s, 192, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, h, s, 192, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    flops = 2.0 * b * h * (192 + 128) * s * (s + 1) / 2
    time_row(f"({b}, {h}, {s}) | 192/128 | yes", q, k, v, True, flops, args)


if __name__ == "__main__":
    main()
