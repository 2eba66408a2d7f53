"""Float64 NumPy references for FP8 attention, MLA decode and MXFP4 MoE.

Written from DESIGN.md section 4, not from the project's C++ (neither the
oracle nor the numerics library is called or ported): tests/ops_npy_check.py
(kernelctl) and tests/ops_python_client_check.py (a client generated from
proto/) compare kernelserve's outputs with these functions.

Three conventions that DESIGN section 4 leaves open follow the project's own
comments (kernels/numerics/numerics.h, kernels/cpu/oracle.cc); a failure
here that points at one of them is a question for the design, not the server:
- FP8 quantization of a bf16 operand (per tensor, or per (batch, head) with
  DescaleMode PER_HEAD): descale = amax / fp8_max in fp32, codes =
  fp8(x / descale) with the division in fp32 (descale 1 when amax is 0).
  Hadamard-rotated operands are rotated in fp64 and rounded to fp32 first.
- The MoE layer stores its intermediate silu(gate) * up as bf16 (RTNE)
  between the two GEMMs, as the gate/up stage alone would return it.
- Naive P's running row max advances per 64-key block (the block P is
  quantized by in the other modes).

Tolerances (compare()): every output is bf16, rounded once from an fp32 (or
fp64) result, so each element carries up to half a bf16 ulp, |err| <= 2^-8 |x|,
of rounding on top of the backend's fp32 arithmetic. An "ulp" below is
2^-8 * max(|ref|, rms(ref)) (rms: near-zero outputs of a sum inherit fp32
cancellation error at the scale of the typical output, not of their own value).
- Default: worst element <= 2 ulps (one bf16 rounding, <= 1 ulp, plus as much
  again for the backend's fp32 arithmetic, which is far smaller at these
  sizes: the CPU backend measures <= 1.01) and relative RMS error < 4e-3
  (RTNE rounding alone gives about 1.6e-3 to 1.8e-3 here).
- FP8 attention: the same, plus an allowance for P codes that flip. DESIGN
  says a backend's P codes may differ from the oracle's where its fp32 score
  differs in the last bits; such a flip moves one probability P_ij by one FP8
  step (up to 1/8 of its value for e4m3 normals) and the output, to first
  order, by |dP_ij| (|V_j| + |O_i|) / L_i: well below an ulp for one key out of
  hundreds but not zero. fp8_attention() returns that bound summed over every
  key whose base-2 score t could cross a code boundary under an fp32 error of
  2^-16 (|t| + sum_d |q_d k_d| scale log2(e)) (the worst case of a 192-term
  fp32 dot product is about 2^-17 of the second term); compare() adds it to
  the 2 ulps. Relative RMS < 5e-3.
"""
import numpy as np

LOG2E = 1.0 / np.log(2.0)
FP8_MAX = {"e4m3fn": 448.0, "e4m3fnuz": 240.0}
C1 = {"e4m3fn": 56, "e4m3fnuz": 64}        # code of 1.0
HEADROOM = {"e4m3fn": 8, "e4m3fnuz": 7}    # h
BLOCK = 64                                  # keys per P block
FLIP_REL = 2.0 ** -16                       # fp32 score error allowed for P code flips (see above)


# ------------------------------------------------------------------ bf16
def bf16_from_f32(x):
    """float32 values -> bf16 bits, RTNE; exact (one rounding from the fp32 value)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def bf16_to_f64(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def round_f32_to_bf16(x):
    """float32 values rounded once to bf16 (RTNE), as float64: what kernelctl sends for fp32 .npy files."""
    return bf16_to_f64(bf16_from_f32(x))


def round_f64_to_bf16(x):
    """float64 values rounded once to bf16 (RTNE, finite inputs, no overflow): exact, no detour through fp32."""
    x = np.asarray(x, dtype=np.float64)
    _, e = np.frexp(x)                      # |x| = m * 2^e, m in [0.5, 1)
    ulp = np.ldexp(1.0, np.maximum(e - 1, -126) - 7)  # 8 significant bits; subnormals share 2^-133
    q = np.abs(x) / ulp                     # exact: ulp is a power of two
    fl = np.floor(q)
    frac = q - fl
    up = (frac > 0.5) | ((frac == 0.5) & (np.mod(fl, 2) == 1))
    return np.sign(x) * (fl + up) * ulp


# ------------------------------------------------------------------ FP8
def fp8_values(fmt):
    """The 256 code values of e4m3fn (bias 7, NaN S.1111.111) or e4m3fnuz (bias 8, NaN 0x80)."""
    bias = 7 if fmt == "e4m3fn" else 8
    vals = np.empty(256)
    for c in range(256):
        e, m = (c >> 3) & 0xF, c & 7
        mag = m / 8.0 * 2.0 ** (1 - bias) if e == 0 else (1 + m / 8.0) * 2.0 ** (e - bias)
        vals[c] = -mag if c & 0x80 else mag
    if fmt == "e4m3fn":
        vals[0x7F] = vals[0xFF] = np.nan
    else:
        vals[0x80] = np.nan
    return vals


def fp8_encode(x, fmt):
    """float64 -> FP8 codes: round to nearest, ties to even (even code), saturating to +-max."""
    vals = fp8_values(fmt)
    codes = np.array([c for c in range(128) if np.isfinite(vals[c])])
    codes = codes[np.argsort(vals[codes])]
    grid = vals[codes]
    x = np.asarray(x, dtype=np.float64)
    ax = np.minimum(np.abs(x), FP8_MAX[fmt])
    i = np.clip(np.searchsorted(grid, ax), 1, len(grid) - 1)
    lo, hi = grid[i - 1], grid[i]
    take_hi = (hi - ax < ax - lo) | ((hi - ax == ax - lo) & (codes[i] % 2 == 0))
    c = np.where(take_hi, codes[i], codes[i - 1])
    neg = np.signbit(x) & ((c != 0) if fmt == "e4m3fnuz" else True)  # e4m3fnuz has no -0
    return np.where(neg, c | 0x80, c).astype(np.uint8)


def hadamard_matrix(n):
    """Normalized Sylvester Hadamard matrix (symmetric)."""
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def rotate(x):
    """Hadamard rotation over the last (head) dim; d = 192 is H128 + H64 block-diagonal."""
    d = x.shape[-1]
    if d == 192:
        return np.concatenate([x[..., :128] @ hadamard_matrix(128), x[..., 128:] @ hadamard_matrix(64)], -1)
    return x @ hadamard_matrix(d)


def quantize(x, fmt, per_head):
    """BHSD float64 -> (codes, descale) with descale = amax / fp8_max in fp32 per tensor or per (b, h)."""
    x32 = np.asarray(x, np.float32)
    amax = np.max(np.abs(x32), axis=(2, 3), keepdims=True) if per_head else np.max(np.abs(x32))
    amax = np.asarray(amax, np.float32)
    ds = np.where(amax > 0, amax / np.float32(FP8_MAX[fmt]), np.float32(1)).astype(np.float32)
    return fp8_encode((x32 / ds).astype(np.float64), fmt), ds.astype(np.float64)


def fp8_operands(q, k, v, fmt, hadamard, per_head):
    """What the server quantizes bf16 (given as float64) BHSD inputs to, dequantized to float64."""
    if hadamard:
        q, k = rotate(q), rotate(k)
    vals = fp8_values(fmt)
    out = []
    for x in (q, k, v):
        codes, ds = quantize(x, fmt, per_head)
        out.append(vals[codes] * ds)
    return out


def _scores(q, k, causal, scale):
    """(t, band): t = q.k * scale * log2(e), masked with -inf (GQA: head h reads KV head
    h / (Hq / Hkv)); band = the fp32 error a backend's t may have (FLIP_REL, see above)."""
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    t = np.einsum("bhid,bhjd->bhij", q, k) * scale * LOG2E
    band = FLIP_REL * (np.abs(t) + np.einsum("bhid,bhjd->bhij", np.abs(q), np.abs(k)) * scale * LOG2E)
    sq, skv = q.shape[2], k.shape[2]
    if causal:
        t = np.where(np.arange(skv)[None, :] <= np.arange(sq)[:, None] + skv - sq, t, -np.inf)
    return t, band


def _p_codes(y, mode, fmt):
    """P codes from base-2 offsets y (<= h for exact/lean, <= 0 for naive); -inf -> 0."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if mode == "lean":
            c = np.clip(np.rint(8 * y + C1[fmt]), 0, C1[fmt] + 8 * HEADROOM[fmt])
            return np.where(np.isfinite(y), c, 0).astype(np.uint8)
        return fp8_encode(np.where(np.isfinite(y), np.exp2(y), 0.0), fmt)


def _flip_step(y, band, mode, fmt):
    """|P_hat change| if a key's code flips: the gap between the codes at y -+ band (0 elsewhere)."""
    vals = fp8_values(fmt)
    lo, hi = vals[_p_codes(y - band, mode, fmt)], vals[_p_codes(y + band, mode, fmt)]
    return np.where(np.isfinite(y), np.abs(hi - lo), 0.0)


def fp8_attention(q, k, v, causal, mode, fmt, scale=None):
    """FP8 attention on dequantized BHSD float64 operands (DESIGN section 4).

    Returns (out, flip): flip[b,h,i,d] bounds the change of out[b,h,i,d] if every P
    code within fp32 noise of a boundary rounds the other way (first order:
    sum_j |dP_j| (|V_j| + |O_i|) / L_i). Rows that see no key are 0.

    A backend's block reference R can also differ by one where max_j t_ij is
    within fp32 noise of an integer; that rescales the block's codes by exactly
    2 (8 lean codes) except for elements near FP8 underflow, at least 2^-15 of
    the block maximum, and is not counted.
    """
    vals = fp8_values(fmt)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    t, band = _scores(q, k, causal, scale)
    v = np.repeat(v, q.shape[1] // v.shape[1], axis=1)
    nb = (t.shape[-1] + BLOCK - 1) // BLOCK
    fin = lambda a: np.where(np.isfinite(a), a, 0.0)
    row_max = t.max(-1, keepdims=True)
    num = np.zeros(t.shape[:3] + (v.shape[-1],))
    den = np.zeros(t.shape[:3] + (1,))
    dnum, dden = np.zeros(num.shape), np.zeros(den.shape)
    if mode in ("exact", "lean"):
        # Per block: R = ceil(max_j t) - h, y = t - R <= h, codes from y; the block enters the
        # row with the exact power of two 2^(R - M), M = max_b R.
        refs = []
        for b in range(nb):
            mx = t[..., b * BLOCK:(b + 1) * BLOCK].max(-1, keepdims=True)
            refs.append(np.where(np.isfinite(mx), np.ceil(fin(mx)) - HEADROOM[fmt], -np.inf))
        m = np.max(refs, axis=0)
        for b, r in enumerate(refs):
            y = t[..., b * BLOCK:(b + 1) * BLOCK] - fin(r)
            with np.errstate(invalid="ignore"):
                w = np.where(np.isfinite(r), np.exp2(fin(r) - fin(m)), 0.0)
            ph = vals[_p_codes(y, mode, fmt)]
            vb = v[:, :, b * BLOCK:(b + 1) * BLOCK]
            num += w * np.einsum("bhij,bhjd->bhid", ph, vb)
            den += w * ph.sum(-1, keepdims=True)
            step = w * _flip_step(y, band[..., b * BLOCK:(b + 1) * BLOCK], mode, fmt)
            dnum += np.einsum("bhij,bhjd->bhid", step, np.abs(vb))
            dden += step.sum(-1, keepdims=True)
    elif mode == "naive":
        # p = 2^(t - running row max), the running max updated per 64-key block; P quantized
        # without block scaling; O accumulates 2^(m_b - M) P_hat V with M the row max, divided by
        # the sum of the unrounded p (so a flip changes the numerator only).
        run = np.full(den.shape, -np.inf)
        with np.errstate(under="ignore"):
            den = np.where(np.isfinite(t), np.exp2(t - fin(row_max)), 0.0).sum(-1, keepdims=True)
        for b in range(nb):
            tb, vb = t[..., b * BLOCK:(b + 1) * BLOCK], v[:, :, b * BLOCK:(b + 1) * BLOCK]
            run = np.maximum(run, tb.max(-1, keepdims=True))
            y = tb - fin(run)
            with np.errstate(invalid="ignore", under="ignore"):
                w = np.where(np.isfinite(run), np.exp2(fin(run) - fin(row_max)), 0.0)
            num += w * np.einsum("bhij,bhjd->bhid", vals[_p_codes(y, "naive", fmt)], vb)
            step = w * _flip_step(y, band[..., b * BLOCK:(b + 1) * BLOCK], "naive", fmt)
            dnum += np.einsum("bhij,bhjd->bhid", step, np.abs(vb))
    else:
        raise ValueError(mode)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den
        flip = (dnum + dden * np.abs(out)) / den
    return np.nan_to_num(out, nan=0.0), np.nan_to_num(flip, nan=0.0)


# ------------------------------------------------------------------ MLA
def mla_decode(q_lat, q_pe, kv_rows, kv_scale, scale=None, q_lens=None):
    """MLA absorbed decode. q_lat [B,Q,H,512], q_pe [B,Q,H,64] float64; kv_rows: per request the
    [S_b,576] FP8 values (before kv_scale). Position t of request b (q_len_b = q_lens[b] or Q)
    attends rows [0, S_b - q_len_b + t]; rows t >= q_len_b are 0."""
    bsz, ql, _, _ = q_lat.shape
    scale = 1.0 / np.sqrt(576.0) if scale is None else scale
    out = np.zeros(q_lat.shape)
    for b in range(bsz):
        kv = kv_rows[b] * kv_scale
        s_b = kv.shape[0]
        n = ql if q_lens is None else int(q_lens[b])
        for t in range(n):
            vis = kv[:s_b - n + t + 1]
            s = (q_lat[b, t] @ vis[:, :512].T + q_pe[b, t] @ vis[:, 512:].T) * scale  # [H, vis]
            p = np.exp(s - s.max(-1, keepdims=True))
            out[b, t] = (p @ vis[:, :512]) / p.sum(-1, keepdims=True)
    return out


def decode_attention(q, kv_rows, heads_kv, kv_scale, scale=None, q_lens=None):
    """Decode attention over a per-head pool. q [B,Q,Hq,D] float64; kv_rows: per request the
    [S_b, 2*Hkv*D] stored values (K of every head, then V; before kv_scale). Query head h reads KV
    head h // (Hq // Hkv); position t of request b (q_len_b = q_lens[b] or Q) attends tokens
    [0, S_b - q_len_b + t]; rows t >= q_len_b are 0."""
    bsz, ql, hq, d = q.shape
    group = hq // heads_kv
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    out = np.zeros(q.shape)
    for b in range(bsz):
        kv = kv_rows[b].reshape(-1, 2, heads_kv, d) * kv_scale
        s_b = kv.shape[0]
        n = ql if q_lens is None else int(q_lens[b])
        for t in range(n):
            vis = kv[:s_b - n + t + 1]
            for h in range(hq):
                k, v = vis[:, 0, h // group], vis[:, 1, h // group]
                s = (k @ q[b, t, h]) * scale
                p = np.exp(s - s.max())
                out[b, t, h] = (p @ v) / p.sum()
    return out


# ------------------------------------------------------------------ MXFP4 MoE
E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])


def mxfp4_dequant(packed, scales):
    """packed [..., K/2] uint8 (element 2i in the low nibble of byte i), scales [..., K/32] E8M0."""
    el = np.stack([packed & 0xF, packed >> 4], -1).reshape(packed.shape[:-1] + (2 * packed.shape[-1],))
    sc = np.where(scales == 255, np.nan, np.exp2(scales.astype(np.float64) - 127))
    return E2M1[el] * np.repeat(sc, 32, axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def moe(stage, x, ids, weights, w13=None, w2=None, swiglu=False, weighted=False):
    """stage gateup: x [T,K] -> [T*top_k, 2I] (or [T*top_k, I] with SwiGLU); down: x = a [T*top_k, I]
    -> [T*top_k, N] (or [T, N] weighted and summed per token); layer: [T,K] -> [T,N]. Pairs token-major."""
    tokens, top_k = ids.shape
    experts = ids.reshape(-1)
    if stage in ("gateup", "layer"):
        h = np.einsum("pk,pnk->pn", np.repeat(x, top_k, axis=0), w13[experts])
        if stage == "gateup" and not swiglu:
            return h
        inter = h.shape[1] // 2
        a = silu(h[:, :inter]) * h[:, inter:]
        if stage == "gateup":
            return a
        x, weighted = round_f64_to_bf16(a), True
    y = np.einsum("pi,pni->pn", x, w2[experts])
    if not weighted:
        return y
    return (y.reshape(tokens, top_k, -1) * weights[..., None]).sum(axis=1)


# ------------------------------------------------------------------ comparison
def compare(out, ref, extra=None, max_ulps=2.0, max_rel=4e-3):
    """None when out (bf16 values as float64) matches ref, else the reason. Also returns a summary."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out.shape != ref.shape:
        return "shape %s, expected %s" % (out.shape, ref.shape), ""
    if not np.all(np.isfinite(ref)):
        return "the NumPy reference is not finite (test bug)", ""
    bad = ~np.isfinite(out)
    if np.any(bad):
        return "%d non-finite output elements (first at %s)" % (bad.sum(), np.argwhere(bad)[0].tolist()), ""
    rms = np.sqrt(np.mean(ref * ref))
    if rms == 0:
        return (None if np.all(out == 0) else "reference is zero, output is not"), "all zero"
    ulp = 2.0 ** -8 * np.maximum(np.abs(ref), rms)
    err = np.abs(out - ref)
    allowed = max_ulps * ulp + (0 if extra is None else extra)
    rel = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    summary = "rel_rms=%.3g worst=%.2f ulps" % (rel, np.max(err / ulp))
    if extra is not None:
        summary += " (%.2f of the tolerance with the flip allowance, which %d elements get)" % (
            np.max(err / allowed), np.count_nonzero(extra > 0.01 * ulp))
    over = err > allowed
    if np.any(over):
        i = np.unravel_index(np.argmax(err - allowed), err.shape)
        return ("%d elements over tolerance; worst at %s: got %r, NumPy %r, allowed +-%.3g (%s)" %
                (over.sum(), list(i), out[i], ref[i], allowed[i], summary)), summary
    if rel >= max_rel:
        return "relative RMS error %.3g >= %g" % (rel, max_rel), summary
    return None, summary


def paged_layout(rng, kv, lens, page):
    """A random paged placement of each request's first lens[b] KV rows.

    Returns (num_pages, indices, indptr, slots, rows): pages shuffled over a
    pool of num_pages pages (a few more than needed, read by nobody);
    kv_indices per token for page 1 and per page otherwise, with kv_indptr;
    the slot of every row and the rows themselves, in request order.
    """
    pages_per = [(n + page - 1) // page for n in lens]
    num_pages = sum(pages_per) + 3
    perm = iter(rng.permutation(num_pages))
    indices, indptr, slots, rows = [], [0], [], []
    for b, n in enumerate(lens):
        pages = [int(next(perm)) for _ in range(pages_per[b])]
        tokens = [pages[j // page] * page + j % page for j in range(n)]
        indices += tokens if page == 1 else pages  # page 1: flat slots per token
        indptr.append(len(indices))
        slots += tokens
        rows.append(kv[b, :n])
    return num_pages, indices, indptr, np.int32(slots), np.concatenate(rows)


def random_moe_inputs(rng, e, k, inter, n, tokens, top_k):
    """MXFP4 weights with scales near 1 (E8M0 122..129), distinct experts per
    token and positive routing weights: (w13, w13s, w2, w2s, ids, weights)."""
    w13 = rng.integers(0, 256, (e, 2 * inter, k // 2), dtype=np.uint8)
    w13s = rng.integers(122, 130, (e, 2 * inter, k // 32), dtype=np.uint8)
    w2 = rng.integers(0, 256, (e, n, inter // 2), dtype=np.uint8)
    w2s = rng.integers(122, 130, (e, n, inter // 32), dtype=np.uint8)
    ids = np.stack([rng.choice(e, top_k, replace=False) for _ in range(tokens)]).astype(np.int32)
    weights = rng.random((tokens, top_k)).astype(np.float32)
    return w13, w13s, w2, w2s, ids, weights
