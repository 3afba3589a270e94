"""The keyword API over mixp._mixp's format functions (python/src/formats_module.cpp)."""
from __future__ import annotations

import builtins
from dataclasses import dataclass, field

import numpy as np

from . import _mixp


def _check_str(name, v):
    if not isinstance(v, str):
        raise ValueError(f"{name} must be a string, not {type(v).__name__}")
    return v


def _check_int(name, v, lo=None):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, not {type(v).__name__}")
    v = int(v)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, not {v}")
    return v


def _check_seed(seed):
    seed = _check_int("seed", seed, 0)
    if seed >= 1 << 64:
        raise ValueError(f"seed must be below 2**64, not {seed}")
    return seed


def _as_float32(x):
    """x as a C-contiguous float32 array (0-d stays 0-d): no copy when it already is one."""
    if isinstance(x, (str, bytes)) or x is None:
        raise ValueError(f"x must be an array of numbers, not {type(x).__name__}")
    a = np.asarray(x)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        raise ValueError(f"x must be an array of real numbers, not dtype {a.dtype}")
    if np.iscomplexobj(a):
        raise ValueError("x must be real, not complex")
    return np.asarray(a, dtype=np.float32, order="C")


def round(x, fmt, rounding="nearest", saturate=False, seed=0):  # noqa: A001 (numpy's name)
    """x rounded to `fmt` ("bf16", "fp16", "tf32", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3",
    "fp6_e3m2", "fp4_e2m1", "fp32") and returned as float32 values, NaN where the format gives NaN.

    rounding: "nearest" (ties to even), "toward_zero", "stochastic" (bits from `seed` and the
    element's flat index, reproducible), "nearest_away". saturate=True clamps overflow to the
    largest finite value instead of inf (fp8 E4M3: NaN). fp6/fp4 always saturate (no inf, no NaN
    encoding; a NaN input stays NaN here)."""
    a = _as_float32(x)
    out = _mixp.round(a, _check_str("fmt", fmt), _check_str("rounding", rounding),
                      bool(saturate), _check_seed(seed))
    return out


def encode(x, fmt, rounding="nearest", saturate=False, seed=0):
    """The element codes of x in an element-wise format (the bits mixp.round's values have):
    uint16 for bf16/fp16 (view as ml_dtypes.bfloat16 / np.float16), uint8 for fp8_e4m3 /
    fp8_e5m2 (ml_dtypes.float8_e4m3fn / float8_e5m2) and for fp6/fp4 in the low bits
    (ml_dtypes.float6_e2m3fn, float6_e3m2fn, float4_e2m1fn), uint32 for tf32/fp32."""
    return _mixp.encode(_as_float32(x), _check_str("fmt", fmt), _check_str("rounding", rounding),
                        bool(saturate), _check_seed(seed))


def decode(codes, fmt):
    """float32 values of element codes laid out as encode returns them."""
    if isinstance(codes, (str, bytes)) or codes is None:
        raise ValueError(f"codes must be an array of unsigned integers, not {type(codes).__name__}")
    return _mixp.decode(np.asarray(codes), _check_str("fmt", fmt))


@dataclass
class Quantized:
    """A block-quantized tensor: `codes` (packed element bits, uint8; int8 for the int8 schemes)
    and `scales` (uint8 e8m0 exponents for MX, float32 otherwise), plus what dequantize needs.
    Unpacks as `codes, scales = q`."""
    scheme: str
    shape: tuple
    axis: int | None
    block_size: int
    element: str
    codes: np.ndarray
    scale_dtype: str
    scales: np.ndarray
    zero_points: list = field(default_factory=list)

    def __iter__(self):
        return iter((self.codes, self.scales))

    def dequantize(self):
        return dequantize(self)


# Where each scheme's `axis` goes: MX blocks run along the LAST dimension, int8_channel's channels
# are dimension 0 (include/mixp/format/block_tensor.h); the other schemes have no axis.
_AXIS_TO = {"mx": -1, "int8_channel": 0}


def _axis_target(scheme):
    if scheme.startswith("mx"):
        return -1
    return _AXIS_TO.get(scheme)


def quantize(x, scheme, axis=None, block_size=0, rounding="nearest", seed=0):
    """Quantizes x by a block scheme of mixp (mixp.formats.block_schemes()): "mxfp8_e4m3",
    "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8", "int4", "nf4", "int8",
    "int8_affine", "int8_channel". axis: the dimension MX blocks run along (default the last) or
    int8_channel's channel dimension (default 0); the other schemes take none.
    block_size 0 picks the scheme's default (32 for MX, 64 for int4/nf4)."""
    scheme = _check_str("scheme", scheme)
    a = _as_float32(x)
    target = _axis_target(scheme)
    if axis is not None:
        axis = _check_int("axis", axis)
        if target is None:
            raise ValueError(f"quantize: scheme '{scheme}' has no axis (its blocks run over the "
                             "flattened tensor); leave axis=None")
        if not -a.ndim <= axis < a.ndim:
            raise ValueError(f"quantize: axis {axis} is out of range for a {a.ndim}-d array")
        axis %= a.ndim
        a = np.ascontiguousarray(np.moveaxis(a, axis, target))
    d = _mixp.quantize(a, scheme, _check_int("block_size", block_size, 0),
                       _check_str("rounding", rounding), _check_seed(seed))
    codes = d["data"]
    if d["element"] == "int8":
        codes = codes.view(np.int8)
    if d["element"] in ("fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "int8"):
        codes = codes.reshape(a.shape)  # one code per byte: keep the (moved) shape
    scales = d["scales"]
    if d["scale_dtype"] == "fp32":
        scales = scales.view(np.float32)
    scales = scales.reshape(d["scale_shape"])
    return Quantized(scheme=d["scheme"], shape=tuple(np.shape(x)), axis=axis,
                     block_size=d["block_size"], element=d["element"], codes=codes,
                     scale_dtype=d["scale_dtype"], scales=scales, zero_points=list(d["zero_points"]))


def dequantize(q):
    """The float32 values a Quantized holds, in its original shape."""
    if not isinstance(q, Quantized):
        raise ValueError(f"dequantize takes a mixp.Quantized, not {type(q).__name__}")
    shape = tuple(q.shape)
    moved = shape
    target = _axis_target(q.scheme)
    if q.axis is not None and target is not None:
        moved = tuple(np.moveaxis(np.empty(shape, dtype=np.uint8), q.axis, target).shape)
    codes = np.ascontiguousarray(q.codes).view(np.uint8).reshape(-1)
    scales = np.ascontiguousarray(q.scales)
    if scales.dtype == np.float32:
        scales = scales.view(np.uint8)
    scales = scales.reshape(-1)
    out = _mixp.dequantize(q.scheme, list(moved), q.block_size, q.element, codes, q.scale_dtype,
                           scales, list(q.zero_points))
    if q.axis is not None and target is not None:
        out = np.ascontiguousarray(np.moveaxis(out, target, q.axis))
    return out


def describe(value, fmt=None, rounding="nearest", saturate=False, seed=0):
    """How `value` (a number, or text like "0x1.8p3" / "inf") is stored, as `mixp formats --json`
    prints it: a dict (format, value, bits, fields, abs_error, rel_error, status, unit_scale) for
    one format name, a list of them for a list of names or None (mixp formats' default formats)."""
    if fmt is not None and not isinstance(fmt, str):
        if not isinstance(fmt, (list, tuple)) or not builtins.all(isinstance(f, str) for f in fmt):
            raise ValueError("fmt must be a format name or a list of names")
        fmt = list(fmt)
    return _mixp.describe(value, fmt, _check_str("rounding", rounding), bool(saturate),
                          _check_seed(seed))


def formats():
    """The formats' facts as `mixp formats --table --json` lists them (a list of dicts)."""
    return _mixp.formats()


formats.block_schemes = _mixp.block_schemes
formats.names = _mixp.format_names
