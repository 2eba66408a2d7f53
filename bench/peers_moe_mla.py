#!/usr/bin/env python3
"""Peers for the MoE and MLA CUDA benchmarks, run on the GPU machine with torch.

- torch._grouped_mm, bf16, on the Kimi-K3 TP8 gate/up shard (E = 896,
  K = 3584, N = 2I = 768, top-16 uniform routing) at T = 8, 32, 8192, and the
  down shard (K = 384, N = 3584);
- device-to-device copy bandwidth of a large buffer (bytes read + written).

Prints a markdown table. Usage: python3 bench/peers_moe_mla.py [--tokens 8 32 8192]
"""
import argparse

import torch

E, K, I, N, TOPK = 896, 3584, 384, 3584, 16


def time_ms(fn, iters=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def grouped(tokens, k_dim, n_dim, w, gen):
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(tokens)])
    counts = torch.bincount(ids.flatten(), minlength=E)
    offs = torch.cumsum(counts, 0).to(torch.int32).cuda()
    rows = tokens * TOPK
    a = torch.randn(rows, k_dim, device="cuda", dtype=torch.bfloat16)
    b = w.transpose(-2, -1)  # [E, K, N] view of [E, N, K] storage
    fn = lambda: torch._grouped_mm(a, b, offs=offs)
    ms = time_ms(fn)
    return rows, int((counts > 0).sum()), ms, 2.0 * rows * k_dim * n_dim / ms / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, nargs="*", default=[8, 32, 8192])
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print("| peer | T | rows | experts hit | ms | TFLOP/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    w13 = torch.randn(E, 2 * I, K, device="cuda", dtype=torch.bfloat16)
    for t in args.tokens:
        rows, hit, ms, tf = grouped(t, K, 2 * I, w13, gen)
        print(f"| torch._grouped_mm bf16 gate/up | {t} | {rows} | {hit} | {ms:.3f} | {tf:.1f} |", flush=True)
    del w13
    w2 = torch.randn(E, N, I, device="cuda", dtype=torch.bfloat16)
    for t in args.tokens:
        rows, hit, ms, tf = grouped(t, I, N, w2, gen)
        print(f"| torch._grouped_mm bf16 down | {t} | {rows} | {hit} | {ms:.3f} | {tf:.1f} |", flush=True)
    del w2
    n = 4 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    print(f"\n| device copy {n >> 30} GiB | {ms:.3f} ms | {2 * n / ms / 1e9:.2f} TB/s (read + write) |")


if __name__ == "__main__":
    main()
