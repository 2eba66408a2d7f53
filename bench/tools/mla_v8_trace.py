#!/usr/bin/env python3
"""Instruments a copy of kernels/gpu/arch/sm90/mla/mla_decode_rega.cu (the RegA kernel, "v8" in
bench/NOTES.md) with timestamps, for a trace build that is never committed (bench/NOTES.md "v8"
used these modes).

  python3 bench/tools/mla_v8_trace.py --mode=ctas   [FILE]   # globaltimer per CTA and consumer
      warpgroup: entry, after the Q prologue, after the loop, after the tail, end (all CTAs)
  python3 bench/tools/mla_v8_trace.py --mode=phases [FILE]   # clock64 per loop phase of CTA 0
      (full wait, S^T, P(k-1) barrier, PV(k-1), wait, softmax, PV(k), wait) and the producer's
      per-block empty-wait / issue-done times
  python3 bench/tools/mla_v8_trace.py --mode=softmax [FILE]  # clock64 inside the softmax of each
      block of CTA 0 (running-max load, exceed test, bar.red.or, frame, alpha(k-1), exp + P stores,
      fence, P-ready arrival)

FILE defaults to the kernel source, edited in place: run it on a scratch tree or restore the file
with git afterwards. Then `bash bench/bundle.sh`, and on the GPU machine
`KS_MLA_TRACE=1 .bundle/bin/mla_cuda_bench --only=wgmma_rega --shapes=8:65536`: the kernel records
every launch, the last launch's trace is printed (stderr, lines OT/TRACE/PTRACE/SMTRACE) at exit.
"""
import argparse
import sys

HEAD_OLD = "namespace kernelserve {\nnamespace gpu {\nnamespace mla {\nnamespace {\n"


GETTER = """DecodeKernel WgmmaRegAKernel() {
  return {MlaDecodeRegAKernel, kRegAThreads, kSmemRegA, MlaPartials::kF16};
}"""


def getter(dump):
    """The kernel getter, registering `dump` to print the trace at exit when KS_MLA_TRACE is set."""
    return f"""
DecodeKernel WgmmaRegAKernel() {{
  static bool registered = false;
  if (!registered && getenv("KS_MLA_TRACE")) {{
    registered = true;
    atexit({dump});
  }}
  return {{MlaDecodeRegAKernel, kRegAThreads, kSmemRegA, MlaPartials::kF16}};
}}"""


def head(s, decls, macros):
    """The trace's device arrays (`decls`, outside the anonymous namespace, so the dump can read them)
    and its macros (inside it), in front of the kernel's code."""
    return rep(s, HEAD_OLD, "#include <cstdio>\n#include <cstdlib>\nnamespace kernelserve {\nnamespace gpu {\nnamespace mla {\n"
               + decls + "namespace {\n" + macros)


def rep(s, old, new):
    if old not in s:
        sys.exit(f"mla_v8_trace: anchor not found (the kernel changed?):\n{old}")
    return s.replace(old, new, 1)


def ctas(s):
    s = head(s, """__device__ unsigned long long g_ot[512][2][5];
__device__ __forceinline__ unsigned long long Gt() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
""", """#define OT(e) do { const int cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); \\
  if (cta < 512 && (tid & 127) == 0) g_ot[cta][cw][e] = Gt(); } while (0)
""")
    i = s.index("  const int cw = wg - 1;")
    j = s.index("\n", i)
    s = s[:j + 1] + "  OT(0);\n" + s[j + 1:]
    s = rep(s, "    NamedBarrierSync(kBarConsumers, 256);  // sQ and sLim complete; sRed read\n  }",
            "    NamedBarrierSync(kBarConsumers, 256);  // sQ and sLim complete; sRed read\n  }\n  OT(1);")
    s = rep(s, "  if (nb > 0 && ((nb - 1) & 1) != cw) {", "  OT(2);\n  if (nb > 0 && ((nb - 1) & 1) != cw) {")
    s = rep(s, "  // Row sums over all consumer threads;", "  OT(3);\n  // Row sums over all consumer threads;")
    i = s.index("\n}\n\n}  // namespace\n")
    s = s[:i] + "\n  OT(4);" + s[i:]
    return rep(s, GETTER, r"""static void DumpOt() {
  static unsigned long long t[512][2][5];
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(t, g_ot, sizeof(t));
  unsigned long long t0 = ~0ull, t1 = 0;
  int n = 0;
  for (int i = 0; i < 512; ++i) {
    if (!t[i][0][0]) continue;
    ++n;
    t0 = t[i][0][0] < t0 ? t[i][0][0] : t0;
    t1 = t[i][0][4] > t1 ? t[i][0][4] : t1;
  }
  fprintf(stderr, "OT ctas %d span %.1f us (per CTA, us from the first entry: wg0 entry prologue loop tail end, wg1 ...)\n", n, (t1 - t0) / 1e3);
  for (int i = 0; i < 512; ++i) {
    if (!t[i][0][0] || i % 16 != 0) continue;
    fprintf(stderr, "OT cta %3d:", i);
    for (int w = 0; w < 2; ++w)
      for (int e = 0; e < 5; ++e) fprintf(stderr, " %7.2f", (t[i][w][e] - t0) / 1e3);
    fprintf(stderr, "\n");
  }
}
""" + getter("DumpOt"))


def phases(s):
    s = head(s, """__device__ unsigned long long g_trace[2][64][9];
__device__ unsigned long long g_ptrace[128][2];
""", """#define CTA0 (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
#define TR(e) do { if (CTA0 && (tid & 127) == 0 && (k >> 1) < 64) g_trace[cw][k >> 1][e] = clock64(); } while (0)
""")
    s = rep(s, "      MbarWait(bar_empty + 8 * slot, ((k / kSlots) & 1) ^ 1);\n",
            "      MbarWait(bar_empty + 8 * slot, ((k / kSlots) & 1) ^ 1);\n"
            "      if (CTA0 && tid == 0 && k < 128) g_ptrace[k][0] = clock64();\n")
    s = rep(s, "      if (r >= 0) BulkCopyG2S<kD>(dst0 + slot * kSlotBytes, p.kv + r * kD, bar_full + 8 * slot);\n",
            "      if (r >= 0) BulkCopyG2S<kD>(dst0 + slot * kSlotBytes, p.kv + r * kD, bar_full + 8 * slot);\n"
            "      __syncwarp();\n      if (CTA0 && tid == 0 && k < 128) g_ptrace[k][1] = clock64();\n")
    s = rep(s, "    MbarWait(bar_full + 8 * (k % kSlots), (k / kSlots) & 1);\n    qk(k, d);\n",
            "    TR(0);\n    MbarWait(bar_full + 8 * (k % kSlots), (k / kSlots) & 1);\n    TR(1);\n    qk(k, d);\n    TR(2);\n")
    s = rep(s, "      NamedBarrierSync(kBarPReady0 + ((k - 1) & 1), 256);  // P(k-1), m(k-1), alpha(k-1)\n",
            "      NamedBarrierSync(kBarPReady0 + ((k - 1) & 1), 256);  // P(k-1), m(k-1), alpha(k-1)\n      TR(3);\n")
    s = rep(s, "      pv(k - 1, std::false_type{}, std::false_type{});\n",
            "      pv(k - 1, std::false_type{}, std::false_type{});\n      TR(4);\n")
    s = rep(s, "    WgmmaWait<0>();\n#pragma unroll\n    for (int i = 0; i < 32; ++i) FenceOperand(d[i]);\n",
            "    WgmmaWait<0>();\n    TR(5);\n#pragma unroll\n    for (int i = 0; i < 32; ++i) FenceOperand(d[i]);\n")
    i = s.index("    if (softmax(k, d")
    j = s.index(") {\n", i)
    s = s[:i] + "    const bool moved_k = " + s[i + len("    if ("):j] + ";\n    TR(6);\n    if (moved_k) {\n" + s[j + 4:]
    i = s.index("  for (int k = cw; k < nb; k += 2) {")
    j = s.index("  if (nb > 0 && ((nb - 1) & 1) != cw) {")
    body = s[i:j]
    body = rep(body, "    pv(k, std::false_type{}, std::true_type{});\n",
               "    pv(k, std::false_type{}, std::true_type{});\n    TR(7);\n")
    body = rep(body, "    WgmmaWait<0>();\n    fence_acc();\n  }", "    WgmmaWait<0>();\n    fence_acc();\n    TR(8);\n  }")
    s = s[:i] + body + s[j:]
    return rep(s, GETTER, r"""static void DumpTrace() {
  static unsigned long long t[2][64][9], pt[128][2];
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(t, g_trace, sizeof(t));
  cudaMemcpyFromSymbol(pt, g_ptrace, sizeof(pt));
  const unsigned long long t0 = pt[0][0];
  fprintf(stderr, "TRACE cycles from the producer's first block: start fullwait qk pready pv(k-1) wait softmax pv(k) wait\n");
  for (int i = 0; i < 64; ++i)
    for (int cw = 0; cw < 2; ++cw) {
      if (t[cw][i][0] == 0) continue;
      fprintf(stderr, "TRACE wg%d it%2d k=%3d:", cw, i, 2 * i + cw);
      for (int e = 0; e < 9; ++e) fprintf(stderr, " %7lld", t[cw][i][e] ? (long long)(t[cw][i][e] - t0) : -1LL);
      fprintf(stderr, "\n");
    }
  for (int k = 0; k < 128; ++k)
    if (pt[k][0]) fprintf(stderr, "PTRACE k=%3d %7lld %7lld\n", k, (long long)(pt[k][0] - t0), (long long)(pt[k][1] - t0));
}
""" + getter("DumpTrace"))


def softmax(s):
    s = head(s, "__device__ unsigned long long g_sm[128][9];\n", """#define SM(e) do { if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && (tid & 127) == 0 && k < 128) \\
  g_sm[k][e] = clock64(); } while (0)
""")
    i = s.index("  auto softmax = [&](int k, float (&d)[32]")
    j = s.index("\n", i)
    s = s[:j + 1] + "    SM(0);\n" + s[j + 1:]
    s = rep(s, "    bool exceed = false;\n", "    SM(1);\n    bool exceed = false;\n")
    s = rep(s, "    const bool moved = BarRedOr(kBarMax0 + cw, 128, exceed);\n",
            "    SM(2);\n    const bool moved = BarRedOr(kBarMax0 + cw, 128, exceed);\n    SM(3);\n")
    s = rep(s, "    if (wq == 0 && g == 0) StoreCols(sM + (k % kSlots) * kRows, c, m);\n",
            "    SM(4);\n    if (wq == 0 && g == 0) StoreCols(sM + (k % kSlots) * kRows, c, m);\n")
    s = rep(s, "    uint8_t* pbuf = sP", "    SM(5);\n    uint8_t* pbuf = sP")
    s = rep(s, "    FenceProxyAsync();\n    NamedBarrierArrive(kBarPReady0 + (k & 1), 256);\n",
            "    SM(6);\n    FenceProxyAsync();\n    SM(7);\n"
            "    NamedBarrierArrive(kBarPReady0 + (k & 1), 256);\n    SM(8);\n")
    return rep(s, GETTER, r"""static void DumpSm() {
  static unsigned long long t[128][9];
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(t, g_sm, sizeof(t));
  fprintf(stderr, "SMTRACE cycles from the softmax's entry: loadm exceed bar.red moved-branch alpha(k-1) exp+P fence arrive (end)\n");
  for (int k = 0; k < 128; ++k) {
    if (!t[k][0]) continue;
    fprintf(stderr, "SMTRACE k=%3d:", k);
    for (int e = 1; e < 9; ++e) fprintf(stderr, " %6lld", (long long)(t[k][e] - t[k][0]));
    fprintf(stderr, "\n");
  }
}
""" + getter("DumpSm"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["ctas", "phases", "softmax"], required=True)
    ap.add_argument("file", nargs="?", default="kernels/gpu/arch/sm90/mla/mla_decode_rega.cu")
    a = ap.parse_args()
    s = open(a.file).read()
    s = {"ctas": ctas, "phases": phases, "softmax": softmax}[a.mode](s)
    open(a.file, "w").write(s)
    print(f"mla_v8_trace: {a.file} instrumented ({a.mode}); do not commit it")


if __name__ == "__main__":
    main()
