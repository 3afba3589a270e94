"""1000 random bad calls: each must raise a Python exception (never crash the interpreter,
never succeed silently). A crash (abort, segfault) kills pytest and fails the ctest test."""
import numpy as np
import pytest

import mixp

ALLOWED = (ValueError, TypeError, FileNotFoundError, RuntimeError)

BAD_STRINGS = ["", "fp7", "BF16x", "mxfp9", "nearest-odd", "int3", "e8m0", "bool", "fp64x", "\x00",
               "nf4 ", "x" * 1000, "stochastic!", "🙂"]
BAD_VALUES = [None, 1.5, -1, 2**70, "3", b"bf16", [1, 2], {"a": 1}, object(), np.nan, True]


def good_array(rng):
    shape = tuple(rng.integers(1, 6, rng.integers(1, 4)))
    return rng.standard_normal(shape).astype(np.float32)


def bad_call(rng):
    """One call with exactly one argument made invalid."""
    x = good_array(rng)
    kind = rng.integers(0, 11)
    pick = lambda seq: seq[rng.integers(0, len(seq))]  # noqa: E731
    if kind == 0:
        return lambda: mixp.round(x, pick(BAD_STRINGS + ["nf4", "int8", "fp64", "e8m0"]))
    if kind == 1:
        return lambda: mixp.round(x, "bf16", rounding=pick(BAD_STRINGS + BAD_VALUES[:3]))
    if kind == 2:
        return lambda: mixp.round(pick([None, "abc", b"xy", {"a": 1}, [[1], [2, 3]], object(),
                                        np.array(["a"]), 1j]), "bf16")
    if kind == 3:
        return lambda: mixp.round(x, "fp16", seed=pick([-1, 2**64, 1.5, "7", None]))
    if kind == 4:
        return lambda: mixp.quantize(x, pick(BAD_STRINGS + BAD_VALUES[:3]))
    if kind == 5:
        return lambda: mixp.quantize(x, pick(["mxfp4", "nf4", "int4"]),
                                     block_size=pick([-1, 3, 7, -64, 1.5, "32", 2**40]))
    if kind == 6:
        scheme = pick(["int8", "int4", "nf4", "int8_affine", "int8_channel"])
        y = x.copy()
        y.flat[rng.integers(0, y.size)] = pick([np.nan, np.inf, -np.inf])
        return lambda: mixp.quantize(y, scheme)
    if kind == 7:
        q = mixp.quantize(x, pick(["mxfp8_e4m3", "mxfp4", "nf4", "int8", "int4", "mxint8"]))
        field = rng.integers(0, 6)
        if field == 4 and q.block_size == 0:  # the int8 schemes have no blocks
            field = 0
        if field == 0:
            q.codes = q.codes.reshape(-1)[: max(0, q.codes.size - 1 - int(rng.integers(0, 3)))]
        elif field == 1:
            q.scales = np.zeros(q.scales.size + 1 + int(rng.integers(0, 3)), q.scales.dtype)
        elif field == 2:
            q.shape = tuple(int(s) + 1 for s in q.shape)
        elif field == 3:
            q.scheme = pick(BAD_STRINGS)
        elif field == 4:
            # (a larger block than the rows hold is still consistent, so only negative ones)
            q.block_size = int(pick([-1, -32]))
        else:
            q.element = pick(BAD_STRINGS)
        return lambda: mixp.dequantize(q)
    if kind == 9:
        return lambda: mixp.encode(x, pick(BAD_STRINGS + ["nf4", "int8", "fp64", "e8m0"]))
    if kind == 10:
        fmt = pick(["bf16", "fp16", "fp8_e4m3", "fp4_e2m1", "tf32"])
        bad = pick([np.zeros(3, np.float32), np.zeros(3, np.int64), np.zeros(3, np.complex64),
                    "abc", None, np.zeros(3, np.uint8) if fmt in ("bf16", "fp16", "tf32") else
                    np.zeros(3, np.uint16)])
        return lambda: mixp.decode(bad, fmt)
    return lambda: mixp.describe(pick(["abc", "1e", "0x", None, [1], object(), "--1"]),
                                 pick([None, "bf16"]))


def test_fuzz_1000_bad_calls_raise():
    rng = np.random.default_rng(2026)
    raised = 0
    for i in range(1000):
        call = bad_call(rng)
        with pytest.raises(ALLOWED):
            call()
        raised += 1
    assert raised == 1000


def test_dequantize_rejects_non_quantized():
    with pytest.raises(ValueError):
        mixp.dequantize((np.zeros(4, np.uint8), np.zeros(1, np.uint8)))


def bad_io_call(rng, tmp):
    """One bad call to the file, inspector and planner functions (python/mixp/_io.py, _engine.py)."""
    pick = lambda seq: seq[rng.integers(0, len(seq))]  # noqa: E731
    x = good_array(rng)
    kind = rng.integers(0, 7)
    if kind == 0:  # a path that is not a file, not a path, or a corrupt file
        junk = tmp / f"junk{rng.integers(0, 1 << 30)}.safetensors"
        junk.write_bytes(rng.integers(0, 256, int(rng.integers(0, 64)), dtype=np.uint8).tobytes())
        return lambda: mixp.load_safetensors(pick([junk, tmp / "missing", tmp, None, 3, b"\x00"]))
    if kind == 1:  # a bad dtype, dict, name or metadata
        args = pick([dict(dtypes=pick(BAD_STRINGS + BAD_VALUES[:3] + [5])),
                     dict(dtypes={"nope": "bf16"}), dict(metadata={"k": 1}),
                     dict(metadata="m")])
        return lambda: mixp.save_safetensors(tmp / "f.safetensors", {"x": x}, **args)
    if kind == 2:
        bad = pick([{1: x}, {"x": np.zeros(3, np.complex64)}, {"x": np.zeros(3, np.uint16)},
                    [x], "x", {"__metadata__": x}, {"x": np.array(["a"])}])
        return lambda: mixp.save_safetensors(tmp / "f.safetensors", bad)
    if kind == 3:
        return lambda: mixp.inspect(x, formats=pick([["fp7"], [1], "mxfp9", [None]]))
    if kind == 4:
        return lambda: mixp.inspect(pick([{"i": np.arange(3)}, {2: x}, tmp / "none.safetensors",
                                          np.array(["a"]), {"c": np.zeros(2, np.complex64)}]))
    if kind == 5:  # planner arguments refused before any probe runs
        bad = pick([dict(batch=0), dict(batch=1.5), dict(layers=-1), dict(lr=1.0),
                    dict(zero_stage=9), dict(ranks=0), dict(vocab=True), dict(width="8")])
        return lambda: mixp.plan(model_shape=pick(["gpt2", "custom", "llama-99b"]), **bad)
    return lambda: mixp.plan(model=pick([None, 3, "gpt"]), model_shape=pick([None, 4, "gpt2"]),
                             data=pick([None, "synthetic"]), precision=pick(["bf17", 5]))


def test_fuzz_300_bad_io_calls_raise(tmp_path):
    rng = np.random.default_rng(34)
    for _ in range(300):
        call = bad_io_call(rng, tmp_path)
        with pytest.raises(ALLOWED):
            call()
    assert not (tmp_path / "f.safetensors").exists()  # no refused write left a file
