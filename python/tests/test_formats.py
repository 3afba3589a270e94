"""mixp.round / quantize / dequantize / describe / formats against the C++ path (the CLI, known
codes) and against the independent NumPy references of numpy_reference.py, bit for bit."""
import json

import numpy as np
import pytest

import mixp
from conftest import run_cli
from numpy_reference import (FLOATS, MX, int4_fake_quant, int8_fake_quant, mx_fake_quant,
                             nf4_fake_quant, round_float)


def bits32(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def same_bits(a, b):
    """Equal as fp32 bit patterns, any NaN equal to any NaN."""
    a = np.asarray(a, dtype=np.float32).ravel()
    b = np.asarray(b, dtype=np.float32).ravel()
    assert a.shape == b.shape
    nan = np.isnan(a)
    np.testing.assert_array_equal(nan, np.isnan(b))
    bad = np.nonzero((bits32(a) != bits32(b)) & ~nan)[0]
    assert bad.size == 0, (bad[:5], a[bad[:5]], b[bad[:5]])


def sample(n=50_000, seed=1):
    """Random fp32 bit patterns (every exponent, subnormals, inf, NaN) plus values around every
    format's rounding boundaries."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    wide = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 20, n))).astype(np.float32)
    special = np.float32([0, -0.0, np.inf, -np.inf, np.nan, 448, 464, 465, 480, 57344, 61440,
                          65504, 65520, 7.5, 7.75, 28, 30, 6, 6.5, 7, 1 / 3, np.pi, 1e-45, 3e-39])
    return np.concatenate([raw, wide, special, -special])


@pytest.mark.parametrize("fmt", sorted(FLOATS))
@pytest.mark.parametrize("saturate", [False, True])
def test_round_matches_numpy_reference(fmt, saturate):
    x = sample()
    same_bits(mixp.round(x, fmt, saturate=saturate), round_float(x, fmt, saturate=saturate))


def test_round_matches_torch_bf16_and_numpy_fp16():
    x = sample()
    x = x[np.isfinite(x)]
    same_bits(mixp.round(x, "fp16"), x.astype(np.float16).astype(np.float32))
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    same_bits(mixp.round(x, "bf16"), t)


def test_round_keeps_shape_dtype_and_input():
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7
    before = x.copy()
    y = mixp.round(x, "bf16")
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_array_equal(x, before)
    same_bits(y.ravel(), round_float(x.astype(np.float32).ravel(), "bf16"))
    # non-contiguous input and scalars
    same_bits(mixp.round(x[:, ::2, 1:], "fp8_e4m3"), round_float(x[:, ::2, 1:].astype(np.float32), "fp8_e4m3"))
    assert mixp.round(np.pi, "bf16").shape == ()
    assert float(mixp.round(np.pi, "bf16")) == 3.140625


def test_stochastic_is_reproducible_unbiased_and_chunk_independent():
    x = np.full(1 << 17, 1 + 2.0**-9, dtype=np.float32)  # 1/4 of a bf16 ulp above 1
    a = mixp.round(x, "bf16", rounding="stochastic", seed=7)
    b = mixp.round(x, "bf16", rounding="stochastic", seed=7)
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a)) == {1.0, 1 + 2.0**-7}
    assert abs(np.mean(a) - (1 + 2.0**-9)) < 2.0**-7 * 0.01
    # element i draws sr_bits(seed, i): the tail of a long call equals the same values alone
    # only through the index, so a shifted slice differs but a prefix agrees
    np.testing.assert_array_equal(mixp.round(x[:1000], "bf16", rounding="stochastic", seed=7), a[:1000])
    assert not np.array_equal(mixp.round(x, "bf16", rounding="stochastic", seed=8), a)


def test_round_against_cli_formats():
    values = ["3.14159265", "-1e-9", "448.5", "0x1.8p3", "1e6", "-inf", "nan", "0.1"]
    fmts = ["bf16", "fp16", "tf32", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1"]
    for saturate in (False, True):
        extra = ["--saturate"] if saturate else []
        cli = run_cli("formats", "--formats", ",".join(fmts), *extra, "--", *values)
        for i, row in enumerate(cli["values"]):
            x = np.float32(mixp.describe(values[i], "fp64")["value"])
            for f in row["formats"]:
                got = mixp.describe(values[i], f["format"], saturate=saturate)
                for k in ("bits", "fields", "status", "unit_scale"):
                    assert got[k] == f[k], (values[i], f["format"], k)
                want = float(f["value"])
                r = float(mixp.round(x, f["format"], saturate=saturate))
                if f["status"] == "nan" or np.isnan(want):
                    # fp6/fp4 have no NaN: describe stores 0 (status nan), round keeps NaN
                    assert np.isnan(r)
                elif values[i] != "0.1" and values[i] != "3.14159265":  # fp32 input vs exact decimal
                    assert r == want, (values[i], f["format"])


def test_describe_known_bits_and_formats_table():
    assert mixp.describe(np.pi, "bf16")["bits"] == "0x4049"
    assert mixp.describe(np.pi, "bf16")["fields"] == "0|10000000|1001001"
    assert mixp.describe(448, "fp8_e4m3")["bits"] == "0x7e"
    assert mixp.describe(1e6, "fp8_e4m3")["status"] == "overflow"
    assert len(mixp.describe(1.0)) == 13
    table = {f["format"]: f for f in mixp.formats()}
    assert table["fp8_e4m3"]["max_finite"] == 448 and table["fp8_e4m3"]["nan"] == "0x7f"
    assert table["bf16"]["safetensors"] == "BF16" and table["e8m0"]["kind"] == "scale"
    cli = run_cli("formats", "--table")
    assert [f["format"] for f in cli["formats"]] == [f["format"] for f in mixp.formats()]
    for c, p in zip(cli["formats"], mixp.formats()):
        assert c == p


@pytest.mark.parametrize("scheme", sorted(MX))
def test_mx_matches_numpy_reference(scheme):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8, 100)) * np.exp2(rng.integers(-20, 20, (8, 1)))).astype(np.float32)
    x[0, :32] = 0
    x[1, 5] = np.nan
    x[2, 40] = np.inf
    q = mixp.quantize(x, scheme)
    codes, scales = q
    assert scales.dtype == np.uint8 and scales.shape == (8, 4)
    same_bits(mixp.dequantize(q).ravel(), mx_fake_quant(x, scheme).ravel())


def test_mx_axis_and_known_codes():
    x = np.float32([[1, 2, 3, 4, 5, 6, 0.5, -6]])
    q = mixp.quantize(x, "mxfp4")
    # amax 6: floor(log2 6) = 2, emax 2 -> scale 2^0 = e8m0 127; E2M1 codes of 1,2,3,4,6,0.5,-6
    # (5 ties to 4: even mantissa), element 2i in the low nibble (block_mx.h)
    assert q.scales.tolist() == [[127]]
    assert q.codes.tolist() == [0x42, 0x65, 0x76, 0xF1]
    np.testing.assert_array_equal(mixp.dequantize(q), np.float32([[1, 2, 3, 4, 4, 6, 0.5, -6]]))
    y = np.random.default_rng(0).standard_normal((64, 3)).astype(np.float32)
    qa = mixp.quantize(y, "mxfp8_e4m3", axis=0)
    assert qa.scales.shape == (3, 2) and qa.codes.shape == (3, 64)
    same_bits(mixp.dequantize(qa).ravel(), mx_fake_quant(y.T, "mxfp8_e4m3").T.ravel())
    fp8 = mixp.quantize(np.float32([[448, 1, -2, 0.5]]), "mxfp8_e4m3")
    # 448 -> scale 2^(8-8): codes are OCP E4M3FN bits, as ml_dtypes.float8_e4m3fn stores them
    assert fp8.codes.tolist() == [[0x7E, 0x38, 0xC0, 0x30]]


@pytest.mark.parametrize("scheme,ref", [("nf4", nf4_fake_quant), ("int4", int4_fake_quant),
                                        ("int8", int8_fake_quant)])
def test_int_and_nf4_match_numpy_reference(scheme, ref):
    x = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    q = mixp.quantize(x, scheme)
    same_bits(mixp.dequantize(q), ref(x))


def _write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def _read_safetensors(path):
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    dt = {"U8": np.uint8, "F32": np.float32, "I32": np.int32}
    out = {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                            dtype=dt[v["dtype"]]).reshape(v["shape"]) for k, v in header.items()}
    return out, meta


@pytest.mark.parametrize("scheme", ["mxfp8_e4m3", "mxfp4", "mxfp6_e3m2", "mxint8", "nf4", "int4",
                                    "int8", "int8_channel"])
def test_quantize_matches_cli_convert(tmp_path, scheme):
    """The same codes and scales as `mixp convert --to SCHEME` writes
    (include/mixp/io/quantized_safetensors.h: <name> U8 codes, <name>.scale)."""
    x = (np.random.default_rng(5).standard_normal((4, 96)) * 3).astype(np.float32)
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    _write_safetensors(src, {"w": x})
    run_cli("convert", str(src), "-o", str(dst), "--to", scheme)
    tensors, meta = _read_safetensors(dst)
    q = mixp.quantize(x, scheme)
    desc = json.loads(meta["mixp.w"]) if isinstance(meta["mixp.w"], str) else meta["mixp.w"]
    assert desc["scheme"] == q.scheme and desc["element"] == q.element
    np.testing.assert_array_equal(tensors["w"].ravel(), q.codes.view(np.uint8).ravel())
    np.testing.assert_array_equal(tensors["w.scale"].ravel(), q.scales.ravel())


def test_bad_arguments_raise_with_mixp_messages():
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="unknown"):
        mixp.round(x, "fp7")
    with pytest.raises(ValueError, match="element-wise"):
        mixp.round(x, "nf4")
    with pytest.raises(ValueError):
        mixp.round(x, "bf16", rounding="up")
    with pytest.raises(ValueError, match="unknown block format"):
        mixp.quantize(x, "mxfp9")
    with pytest.raises(ValueError, match="NaN|nan|inf"):
        mixp.quantize(np.float32([1, np.nan]), "int8")
    with pytest.raises(ValueError):
        mixp.quantize(x, "mxfp4", block_size=3)


@pytest.mark.parametrize("fmt", sorted(FLOATS))
def test_encode_decode_codes(fmt):
    x = sample(20_000)
    if FLOATS[fmt][3] == "finite":  # no NaN code: NaN encodes as +0 (float_codec.h)
        x = x[~np.isnan(x)]
    codes = mixp.encode(x, fmt)
    same_bits(mixp.decode(codes, fmt), mixp.round(x, fmt))
    # the codes are the ones describe (the CLI's `mixp formats`) prints, for a few values
    for v in (np.pi, -0.1, 448.0, 1e-3, 5.0):
        want = int(mixp.describe(v, fmt)["bits"], 16)
        if fmt == "fp32" or float(np.float32(v)) == v:
            assert int(mixp.encode(np.float32(v), fmt)) == want, (fmt, v)
    # pi: fp8 E4M3 0|1000|101 (3.25), E5M2 0|10000|10 (3.0), E2M3 0|10|101 (3.25),
    # E3M2 0|100|10 (3.0), E2M1 0|10|1 (3.0)
    known = {"bf16": 0x4049, "fp16": 0x4248, "fp8_e4m3": 0x45, "fp8_e5m2": 0x42,
             "fp6_e2m3": 0x15, "fp6_e3m2": 0x12, "fp4_e2m1": 0x5, "tf32": 0x40490000,
             "fp32": 0x40490FDB}
    assert int(mixp.encode(np.float32(np.pi), fmt)) == known[fmt]


def test_encode_layout_equals_numpy_float16_and_torch_bf16():
    x = sample(20_000)
    x = x[np.isfinite(x) & (np.abs(x) < 65504)]
    np.testing.assert_array_equal(mixp.encode(x, "fp16"), x.astype(np.float16).view(np.uint16))
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(mixp.encode(x, "bf16"), t)


@pytest.mark.parametrize("scheme", ["mxfp8_e4m3", "mxfp8_e5m2"])
def test_mxfp8_direct_path_shapes_blocks_rounding(scheme):
    """mixp.quantize's MXFP8 path (python/src/formats_module.cpp quantize_mxfp8: mx_quantize into
    the returned arrays) on every layout: scalars, empty arrays, partial blocks, other block
    sizes; the values against the NumPy reference, the scale shape as quantize_block gives it."""
    rng = np.random.default_rng(8)
    for shape, block in [((), 32), ((0,), 32), ((5,), 32), ((3, 45), 32), ((2, 3, 70), 16),
                         ((4, 30), 7)]:
        x = (rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape))).astype(np.float32)
        q = mixp.quantize(x, scheme, block_size=block if block != 32 else 0)
        assert q.block_size == block and q.codes.shape == np.shape(x)
        k = shape[-1] if shape else 1
        assert q.scales.shape == (shape[:-1] + (-(-k // block),) if shape else (1,))
        want = mx_fake_quant(x.reshape(-1, k) if x.size else x.reshape(0, 1), scheme, block)
        same_bits(mixp.dequantize(q).ravel(), want.ravel())
    x = rng.standard_normal((6, 64)).astype(np.float32)
    a = mixp.quantize(x, scheme, rounding="stochastic", seed=3)
    b = mixp.quantize(x, scheme, rounding="stochastic", seed=3)
    c = mixp.quantize(x, scheme, rounding="stochastic", seed=4)
    np.testing.assert_array_equal(a.codes, b.codes)  # reproducible from the seed
    assert (a.codes != c.codes).any()
    near = mixp.dequantize(mixp.quantize(x, scheme))
    err = np.abs(mixp.dequantize(a) - x)
    assert (err <= 2 * np.abs(near - x) + 1e-30).mean() > 0.5  # stochastic, not wild
    with pytest.raises(ValueError, match="block_size"):
        mixp.quantize(x, scheme, block_size=-4)
