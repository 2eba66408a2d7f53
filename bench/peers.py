#!/usr/bin/env python3
"""Peers for the bf16 MHA forward: torch SDPA with the cuDNN and
FlashAttention-2 backends at the seed shapes, timed with CUDA events (median).
TFLOP/s count causal pairs once, as attention_cuda_bench does. Head dim 128
first, then the (192, 128) MLA shape, then the other head dims of --dims
(default 64), so a timeout cuts the newest rows first.

  python3 bench/peers.py [--iters N] [--dims 128,64] [--shapes B:H:S,...]
                         [--causal both|no|yes] [--backends cuDNN,FA2] [--no-mla]

--shapes/--causal/--backends narrow the run (a clock probe samples one kind
of launch at a time, bench/unrun/call.sh); --no-mla skips the (192, 128) row.
"""
import argparse
import statistics

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--shapes", default="", help="B:H:S,... instead of the seed shapes")
    ap.add_argument("--causal", default="both", choices=["both", "no", "yes"])
    ap.add_argument("--backends", default="cuDNN,FA2")
    ap.add_argument("--no-mla", action="store_true")
    args = ap.parse_args()
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
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print("\n| (B, H, S) | d | causal | peer | ms (median) | TFLOP/s |\n| --- | --- | --- | --- | --- | --- |")
    if 128 in dims:
        time_seed_shapes(128, args)
        if not args.no_mla:
            time_mla_shape(args)
    for d in dims:
        if d != 128:
            time_seed_shapes(d, args)


def time_seed_shapes(d, args):
    for b, h, s in args.shape_list:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
                   for _ in range(3))
        for causal in args.causal_modes:
            pairs = s * (s + 1) / 2 if causal else s * s
            flops = 4.0 * b * h * d * pairs
            for name, be in args.backend_list:
                try:
                    with sdpa_kernel([be]):
                        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        ms = time_ms(fn, args.warmup, args.iters)
                    print(f"| ({b}, {h}, {s}) | {d} | {'yes' if causal else 'no'} | {name} | "
                          f"{ms:.3f} | {flops / (ms * 1e-3) / 1e12:.1f} |", flush=True)
                except Exception as e:  # a backend without a kernel for the case
                    print(f"| ({b}, {h}, {s}) | {d} | {'yes' if causal else 'no'} | {name} | "
                          f"- | failed: {type(e).__name__} |", flush=True)
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
    for name, be in args.backend_list:
        try:
            with sdpa_kernel([be]):
                ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                             args.warmup, args.iters)
            print(f"| ({b}, {h}, {s}) | 192/128 | yes | {name} | {ms:.3f} | "
                  f"{flops / (ms * 1e-3) / 1e12:.1f} |", flush=True)
        except Exception as e:
            print(f"| ({b}, {h}, {s}) | 192/128 | yes | {name} | - | failed: {type(e).__name__} |",
                  flush=True)


if __name__ == "__main__":
    main()
