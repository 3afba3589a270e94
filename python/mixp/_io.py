"""safetensors files and the inspector's statistics from Python (python/src/io_module.cpp).

bf16 and fp8 have no NumPy dtype (ml_dtypes adds them; Debian has no package). load_safetensors
returns their float32 values by default (what ml_dtypes' `.astype(np.float32)` gives: exact) and
their codes with codes=True (what ml_dtypes' `.view(np.uint16)` / `.view(np.uint8)` gives, so
`a.view(ml_dtypes.bfloat16)` makes the ml_dtypes array without a copy).
"""
from __future__ import annotations

import json
import os

import numpy as np

from . import _mixp
from ._formats import decode, encode

# mixp dtype names <-> safetensors dtypes this library reads and writes (format/dtype.h).
_CODED = {"bf16": np.uint16, "fp8_e4m3": np.uint8, "fp8_e5m2": np.uint8}
_NATIVE = {np.dtype(np.float64): "fp64", np.dtype(np.float32): "fp32",
           np.dtype(np.float16): "fp16", np.dtype(np.int64): "int64", np.dtype(np.int32): "int32",
           np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8", np.dtype(np.bool_): "bool"}
_ALIASES = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
            "e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2", "float8_e4m3fn": "fp8_e4m3",
            "float8_e5m2": "fp8_e5m2", "F64": "fp64", "F32": "fp32", "F16": "fp16",
            "BF16": "bf16", "F8_E4M3": "fp8_e4m3", "F8_E5M2": "fp8_e5m2"}


def _path(path, what):
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{what}: path must be a str or os.PathLike, not {type(path).__name__}")
    return os.fspath(path)


def load_safetensors(path, codes=False, metadata=False):
    """The tensors of a .safetensors file as {name: np.ndarray}, in file order, read and
    validated by mixp's reader (a malformed file: ValueError with mixp's message; a missing one:
    FileNotFoundError). F64/F32/F16 and the integer dtypes come as their NumPy dtypes; BF16 and
    F8_E4M3/F8_E5M2 as float32 values, or as uint16/uint8 codes with codes=True.
    metadata=True returns (tensors, the header's __metadata__ dict)."""
    tensors, meta = _mixp.load_safetensors(_path(path, "load_safetensors"))
    out = {}
    for name, dtype, raw in tensors:
        out[name] = raw if codes or dtype not in _CODED else decode(raw, dtype)
    return (out, meta) if metadata else out


def _dtype_for(name, array, dtypes):
    want = dtypes.get(name) if isinstance(dtypes, dict) else dtypes
    if want is None:
        return None
    if not isinstance(want, str):
        raise ValueError(f"save_safetensors: {name}: dtype must be a string, not {want!r}")
    return _ALIASES.get(want, want)


def save_safetensors(path, tensors, dtypes=None, metadata=None):
    """Writes {name: array} to a .safetensors file with mixp's writer (atomically: nothing is left
    at `path` after an error), in the dict's order. dtypes: one name for every floating array or
    a {name: dtype} dict ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp64", or the
    safetensors/ml_dtypes spellings); a floating array stored as bf16/fp16/fp8 is rounded to
    nearest-even (as ml_dtypes' astype and `mixp convert`; overflow gives inf, NaN in E4M3), a
    uint16 (bf16) or uint8 (fp8) array is taken as the codes themselves. Without a dtype an array
    keeps its own (float64 F64, float32 F32, float16 F16, int64/int32/int8/uint8/bool)."""
    path = _path(path, "save_safetensors")
    if not isinstance(tensors, dict):
        raise ValueError("save_safetensors: tensors must be a dict {name: array}")
    if dtypes is not None and not isinstance(dtypes, (str, dict)):
        raise ValueError("save_safetensors: dtypes must be a string or a dict {name: dtype}")
    if isinstance(dtypes, dict):
        unknown = set(dtypes) - set(tensors)
        if unknown:
            raise ValueError(f"save_safetensors: dtypes names no tensor: {sorted(unknown)}")
    meta = {} if metadata is None else metadata
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in meta.items()):
        raise ValueError("save_safetensors: metadata must be a dict of str to str")
    items = []
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise ValueError(f"save_safetensors: tensor names must be strings, not {name!r}")
        a = np.asarray(value)
        want = _dtype_for(name, a, dtypes)
        if want is not None and a.dtype.kind not in "fiub":
            raise ValueError(f"save_safetensors: {name}: cannot store {a.dtype} as {want}")
        if want is None or (a.dtype.kind != "f" and want not in _CODED):
            if a.dtype not in _NATIVE:
                raise ValueError(f"save_safetensors: {name}: no safetensors dtype for {a.dtype}"
                                 " (give dtypes=, e.g. 'bf16' for uint16 codes)")
            dt = _NATIVE[a.dtype] if want is None else want
            if want is not None and _NATIVE[a.dtype] != want:
                raise ValueError(f"save_safetensors: {name}: a {a.dtype} array cannot be stored "
                                 f"as {want}")
            items.append((name, dt, a))
        elif want in _CODED:
            if a.dtype.kind == "f":
                raw = encode(a, want)
            elif a.dtype == np.dtype(_CODED[want]):
                raw = a
            else:
                raise ValueError(f"save_safetensors: {name}: {want} codes are "
                                 f"{np.dtype(_CODED[want]).name}, not {a.dtype}")
            items.append((name, want, raw))
        elif want == "fp16":
            items.append((name, "fp16", encode(a, "fp16").view(np.float16)))
        elif want in ("fp32", "fp64"):
            items.append((name, want, a.astype(np.float32 if want == "fp32" else np.float64)))
        else:
            raise ValueError(f"save_safetensors: {name}: unknown dtype {want!r} (fp64 fp32 fp16 "
                             "bf16 fp8_e4m3 fp8_e5m2)")
    _mixp.save_safetensors(path, items, meta)


def inspect(source, formats=None):
    """The inspector's statistics (docs/inspect.md) as a list of records, each the dict
    `mixp train --inspect` writes per tensor (tensor_inspector.h to_json_line): range, rms,
    nan/inf/zeros and per format the overflow/underflow/subnormal fractions and counts and the
    mse. source: a .safetensors path (its floating tensors, in file order), one array, or a
    {name: array} dict. Each record has step 0 and role "weight"; the name splits at its last dot
    into module and tensor. formats: a subset of fp16 bf16 fp8_e4m3 fp8_e5m2 mxfp8 int8."""
    if isinstance(formats, str):
        formats = [formats]
    if formats is not None and not all(isinstance(f, str) for f in formats):
        raise ValueError("inspect: formats must be a list of names")
    if isinstance(source, (str, os.PathLike)):
        lines = _mixp.inspect_file(os.fspath(source), formats)
    else:
        arrays = source if isinstance(source, dict) else {"tensor": source}
        named, dtypes = [], []
        for name, value in arrays.items():
            if not isinstance(name, str):
                raise ValueError(f"inspect: names must be strings, not {name!r}")
            a = np.asarray(value)
            if a.dtype.kind != "f":
                raise ValueError(f"inspect: {name}: statistics need a floating array, not {a.dtype}")
            dtypes.append(_NATIVE.get(a.dtype, "fp32"))  # fp64 values are rounded to fp32
            named.append((name, a.astype(np.float32, copy=False)))
        lines = _mixp.inspect_arrays(named, dtypes, formats)
    return [json.loads(line) for line in lines]
