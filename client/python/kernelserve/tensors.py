"""NumPy (and torch) arrays to and from kernelserve tensors.

bf16 has no NumPy dtype: on the way in, a float array bound for a bf16 field
is rounded once to bf16 (nearest, ties to even, as the server's default
rounding); on the way out, bf16 comes back as float32 arrays that hold bf16
values exactly (or as torch.bfloat16 when the call was given torch tensors).
FP8, packed FP4 and E8M0 travel as their uint8 codes: wrap them with
Tensor(codes, "fp8_e4m3fn") or fp4(packed) so their type is explicit.
"""
import sys

import numpy as np

from kernelserve.v1 import tensor_pb2

# Name (as kernelctl spells it) -> (proto enum, bytes per element, NumPy dtype of the raw codes).
_DTYPES = {
    "bf16": (tensor_pb2.BF16, 2, np.uint16),
    "fp16": (tensor_pb2.FP16, 2, np.float16),
    "fp32": (tensor_pb2.FP32, 4, np.float32),
    "fp64": (tensor_pb2.FP64, 8, np.float64),
    "fp8_e4m3fn": (tensor_pb2.FP8_E4M3FN, 1, np.uint8),
    "fp8_e4m3fnuz": (tensor_pb2.FP8_E4M3FNUZ, 1, np.uint8),
    "fp8_e5m2": (tensor_pb2.FP8_E5M2, 1, np.uint8),
    "fp4_e2m1": (tensor_pb2.FP4_E2M1, 0.5, np.uint8),
    "e8m0": (tensor_pb2.E8M0, 1, np.uint8),
    "int32": (tensor_pb2.INT32, 4, np.int32),
    "int64": (tensor_pb2.INT64, 8, np.int64),
    "uint8": (tensor_pb2.UINT8, 1, np.uint8),
}
_BY_ENUM = {v[0]: k for k, v in _DTYPES.items()}


def dtype_name(enum_value):
    return _BY_ENUM.get(enum_value, "unspecified")


def dtype_enum(name):
    key = str(name).lower().replace("-", "_")
    if key not in _DTYPES:
        raise ValueError("unknown dtype %r; one of %s" % (name, ", ".join(_DTYPES)))
    return _DTYPES[key][0]


def _torch():
    """torch, imported (for a caller that asked for torch tensors back), or None where it is not installed."""
    try:
        import torch
        return torch
    except ImportError:
        return None


def is_torch(x):
    # A torch tensor exists only once its process has imported torch: look it up rather than import it.
    # Without torch installed, a failed import per argument took ~60 % of a small call's client time.
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def bf16_bits(x):
    """float values -> bf16 bit patterns (uint16), rounded once to nearest even; NaN stays NaN."""
    x = np.asarray(x)
    f = np.ascontiguousarray(x, dtype=np.float32)
    if x.dtype != np.float64:
        # In 32 bits: b + 0x8000 wraps only for negative NaNs, which are set below.
        b = f.view(np.uint32)
        bits = ((b + (0x7FFF + ((b >> 16) & 1))) >> 16).astype(np.uint16)
        nan = np.isnan(f)
        if nan.any():
            bits[nan] = 0x7FC0 | ((b[nan] >> 16) & 0x8000).astype(np.uint16)
        return bits
    b = f.view(np.uint32).astype(np.uint64)
    if x.dtype == np.float64:
        # float64 goes through float32 first; where that rounding landed exactly on a bf16 tie the tie
        # is not real: nudge it toward the float64 value so the result is x rounded once.
        tie = ((b & 0xFFFF) == 0x8000) & (f.astype(np.float64) != x) & np.isfinite(x)
        b = np.where(tie & (np.abs(x) > np.abs(f.astype(np.float64))), b + 1, np.where(tie, b - 1, b))
    bits = (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        bits[nan] = 0x7FC0 | ((b[nan] >> 16) & 0x8000).astype(np.uint16)
    return bits


# Above this many elements in all, arrays are rounded one by one: the pass's bytes, not NumPy's per-call cost,
# set their time, and one pass over them all would copy them once more.
_BATCH_ELEMENTS = 1 << 16


def batchable_bf16(x):
    """Whether bf16_batch takes x: a float32 or float16 ndarray."""
    return isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float16)


def bf16_batch(arrays):
    """float32/float16 ndarrays -> bf16 Tensors, in order, rounded in one NumPy pass where they are small: each
    NumPy call costs ~1 us whatever its size, so a small call's q, k and v rounded together take ~15 us instead
    of ~35. The bits are those of Tensor(a, "bf16") for each array alone."""
    if len(arrays) < 2 or sum(a.size for a in arrays) > _BATCH_ELEMENTS:
        return [Tensor(a, "bf16") for a in arrays]
    bits = bf16_bits(np.concatenate([a.reshape(-1) for a in arrays]))
    out, at = [], 0
    for a in arrays:
        out.append(Tensor(bits[at:at + a.size].reshape(a.shape), "bf16", raw=True))
        at += a.size
    return out


def bf16_values(bits):
    """bf16 bit patterns -> float32 holding the same values exactly."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bf16(x):
    """x rounded to bf16 (nearest even), as float32: what the server sees when you pass x."""
    return bf16_values(bf16_bits(x))


class Tensor:
    """An array with an explicit kernelserve dtype.

    Tensor(codes, "fp8_e4m3fn"), Tensor(x, "bf16") (float values, rounded), Tensor(bits, "bf16", raw=True)
    (uint16 bit patterns), Tensor(packed, "fp4_e2m1", shape=[..., K]) (packed bytes; shape counts elements).
    """

    def __init__(self, data, dtype, shape=None, raw=False):
        dtype_enum(dtype)  # raises on an unknown name
        self.dtype = str(dtype).lower().replace("-", "_")
        self.enum, _, code_type = _DTYPES[self.dtype]
        if is_torch(data):
            data = _torch_to_numpy(data)
        a = np.asarray(data)
        if self.dtype == "bf16" and not raw and a.dtype != np.uint16:
            a = bf16_bits(a)
        elif self.dtype == "bf16" and raw:
            a = a.astype(np.uint16, copy=False)
        else:
            a = a.astype(code_type, copy=False)
        self.array = np.ascontiguousarray(a)
        if shape is None:
            shape = list(a.shape)
            if self.dtype == "fp4_e2m1":
                shape = shape[:-1] + [2 * shape[-1]] if shape else shape
        self.shape = [int(s) for s in shape]

    def data(self):
        return self.array.astype(self.array.dtype.newbyteorder("<"), copy=False).tobytes()

    def proto(self):
        return tensor_pb2.Tensor(dtype=self.enum, shape=self.shape, data=self.data())


def fp4(packed, shape=None):
    """Packed MXFP4 (E2M1) bytes [..., K/2] (element 2i in the low nibble of byte i) as a [..., K] tensor."""
    return Tensor(packed, "fp4_e2m1", shape=shape)


def e8m0(scales):
    """E8M0 scale codes (uint8, 2^(e-127))."""
    return Tensor(scales, "e8m0")


def _torch_to_numpy(t):
    torch = _torch()
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    return t.numpy()


def to_tensor(x, default):
    """x (ndarray, list, scalar, torch tensor or Tensor) -> Tensor for a field whose natural dtype is `default`.

    Floats go to bf16/fp32 fields as values; integers to int32 fields; anything else needs a Tensor wrapper.
    """
    if isinstance(x, Tensor):
        return x
    if is_torch(x):
        x = _torch_to_numpy(x)
    a = np.asarray(x)
    if default in ("bf16", "fp32"):
        if a.dtype.kind not in "fiu":
            raise TypeError("expected a float array for a %s field, got dtype %s" % (default, a.dtype))
        if a.dtype == np.uint8:
            raise TypeError("a uint8 array for a %s field is ambiguous: pass float values, or wrap codes as "
                            "kernelserve.Tensor(codes, 'fp8_e4m3fn')" % default)
        return Tensor(a if a.dtype == np.float64 else a.astype(np.float32), default)
    if default == "int32":
        if a.dtype.kind not in "iu":
            raise TypeError("expected an integer array for an int32 field, got dtype %s" % a.dtype)
        return Tensor(a, "int64" if a.dtype.itemsize == 8 and np.abs(a).max(initial=0) >= 2 ** 31 else "int32")
    return Tensor(a, default)


def from_proto(t, as_torch=False):
    """A kernelserve Tensor proto -> ndarray (bf16 -> float32 values; fp8/fp4/e8m0 -> uint8 codes)."""
    return from_buffer(t.data, t.dtype, list(t.shape), as_torch)


def from_buffer(data, dtype_enum_value, shape, as_torch=False):
    """A tensor's little-endian bytes (bytes, bytearray, memoryview) -> ndarray, as from_proto.

    From a bytearray, codes of one byte and types already in the machine's byte order are views of it
    (no copy, writable); read-only data (bytes) is copied once so that the caller may write the array;
    bf16 is widened to float32 values once.
    """
    name = dtype_name(dtype_enum_value)
    if name not in _DTYPES:
        raise ValueError("unknown dtype %d in a response" % dtype_enum_value)
    code_type = np.dtype(_DTYPES[name][2]).newbyteorder("<")
    a = np.frombuffer(data, dtype=code_type)
    shape = list(shape)
    if name == "fp4_e2m1" and shape:
        shape = shape[:-1] + [shape[-1] // 2]
    a = a.reshape(shape)
    if name == "bf16":
        a = bf16_values(a)
        if as_torch:
            torch = _torch()
            return torch.from_numpy(a.copy()).to(torch.bfloat16)
    elif not a.dtype.isnative or not a.flags.writeable:
        a = a.astype(a.dtype.newbyteorder("="))  # a copy the caller owns and may write (bytes are read-only)
    return a


# ------------------------------------------------------------------ FP8 helpers for KV rows and FP8 inputs
_FP8_MAX = {"fp8_e4m3fn": 448.0, "fp8_e4m3fnuz": 240.0}


def fp8_table(fmt="fp8_e4m3fn"):
    """The 256 code values of e4m3fn (bias 7, NaN S.1111.111) or e4m3fnuz (bias 8, NaN 0x80), float64."""
    fmt = fmt if fmt.startswith("fp8_") else "fp8_" + fmt
    bias = 7 if fmt == "fp8_e4m3fn" else 8
    c = np.arange(256)
    e, m = (c >> 3) & 0xF, c & 7
    mag = np.where(e == 0, m / 8.0 * 2.0 ** (1 - bias), (1 + m / 8.0) * 2.0 ** (e - bias))
    vals = np.where(c & 0x80, -mag, mag)
    if fmt == "fp8_e4m3fn":
        vals[[0x7F, 0xFF]] = np.nan
    else:
        vals[0x80] = np.nan
    return vals


def fp8_decode(codes, fmt="fp8_e4m3fn"):
    return fp8_table(fmt)[np.asarray(codes, np.uint8)]


def fp8_encode(x, fmt="fp8_e4m3fn"):
    """float values -> FP8 codes (uint8): nearest, ties to the even code, saturating to +-max (DESIGN section 4)."""
    fmt = fmt if fmt.startswith("fp8_") else "fp8_" + fmt
    vals = fp8_table(fmt)
    codes = np.array([c for c in range(128) if np.isfinite(vals[c])])
    codes = codes[np.argsort(vals[codes])]
    grid = vals[codes]
    x = np.asarray(x, dtype=np.float64)
    ax = np.minimum(np.abs(x), _FP8_MAX[fmt])
    i = np.clip(np.searchsorted(grid, ax), 1, len(grid) - 1)
    lo, hi = grid[i - 1], grid[i]
    take_hi = (hi - ax < ax - lo) | ((hi - ax == ax - lo) & (codes[i] % 2 == 0))
    c = np.where(take_hi, codes[i], codes[i - 1])
    neg = np.signbit(x) & ((c != 0) if fmt == "fp8_e4m3fnuz" else True)
    return np.where(neg, c | 0x80, c).astype(np.uint8)
