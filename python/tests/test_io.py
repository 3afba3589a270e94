"""mixp.load_safetensors / save_safetensors (the library's reader and writer) and mixp.inspect
(the inspector's records), against the CLI: `mixp convert` and `mixp train --inspect`."""
import json
import os

import numpy as np
import pytest

import mixp
from conftest import run_cli


def sample():
    rng = np.random.default_rng(11)
    return {"w": (rng.standard_normal((3, 40)) * 4).astype(np.float32),
            "b": np.float32([0.1, -2.5, 448.5, 1e-9]),
            "ids": np.arange(6, dtype=np.int64).reshape(2, 3)}


def test_round_trip_every_dtype(tmp_path):
    t = sample()
    p = tmp_path / "all.safetensors"
    dtypes = {"w": "bf16", "b": "fp8_e4m3"}
    mixp.save_safetensors(p, {**t, "h": t["w"], "e5": t["b"]},
                          dtypes={**dtypes, "h": "fp16", "e5": "fp8_e5m2"},
                          metadata={"who": "test"})
    got, meta = mixp.load_safetensors(p, metadata=True)
    assert list(got) == ["w", "b", "ids", "h", "e5"] and meta == {"who": "test"}
    np.testing.assert_array_equal(got["w"], mixp.round(t["w"], "bf16"))
    np.testing.assert_array_equal(got["b"], mixp.round(t["b"], "fp8_e4m3"))  # 448.5 -> 448
    np.testing.assert_array_equal(got["e5"], mixp.round(t["b"], "fp8_e5m2"))
    assert got["h"].dtype == np.float16
    np.testing.assert_array_equal(got["h"], t["w"].astype(np.float16))  # NumPy's own RNE cast
    np.testing.assert_array_equal(got["ids"], t["ids"])
    assert got["w"].dtype == np.float32 and got["w"].shape == (3, 40)
    codes = mixp.load_safetensors(p, codes=True)
    assert codes["w"].dtype == np.uint16 and codes["b"].dtype == np.uint8
    np.testing.assert_array_equal(codes["w"], mixp.encode(t["w"], "bf16"))
    # codes written back as codes: the same bytes
    q = tmp_path / "codes.safetensors"
    mixp.save_safetensors(q, codes, dtypes={**dtypes, "h": "fp16", "e5": "fp8_e5m2"},
                          metadata={"who": "test"})
    assert q.read_bytes() == p.read_bytes()


def test_round_trip_with_cli_convert(tmp_path):
    t = sample()
    src, bf, back = (tmp_path / n for n in ("src.safetensors", "bf16.safetensors",
                                             "fp32.safetensors"))
    mixp.save_safetensors(src, t)
    report = run_cli("convert", str(src), "-o", str(bf), "--to", "bf16")
    assert report  # the CLI read what Python wrote
    got = mixp.load_safetensors(bf)
    np.testing.assert_array_equal(got["w"], mixp.round(t["w"], "bf16"))
    np.testing.assert_array_equal(got["ids"], t["ids"])  # integers pass through
    assert mixp.load_safetensors(bf, codes=True)["w"].dtype == np.uint16
    # Python writes bf16, the CLI widens it back to fp32: the values Python stored
    mixp.save_safetensors(src, {"w": t["w"]}, dtypes="bf16")
    run_cli("convert", str(src), "-o", str(back), "--to", "fp32")
    np.testing.assert_array_equal(mixp.load_safetensors(back)["w"], mixp.round(t["w"], "bf16"))


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        mixp.load_safetensors(tmp_path / "missing.safetensors")
    p = tmp_path / "x.safetensors"
    mixp.save_safetensors(p, {"w": np.ones((2, 2), np.float32)})
    raw = bytearray(p.read_bytes())
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(raw[:-3]))  # truncated data
    with pytest.raises(ValueError, match="bad.safetensors"):
        mixp.load_safetensors(bad)
    bad.write_bytes(b"\xff" * 8 + bytes(raw[8:]))  # an absurd header size
    with pytest.raises(ValueError, match="header"):
        mixp.load_safetensors(bad)
    with pytest.raises(ValueError, match="header"):
        mixp.inspect(bad)
    out = tmp_path / "never.safetensors"
    with pytest.raises(ValueError, match="codes are uint16"):
        mixp.save_safetensors(out, {"w": np.ones(3, np.int32)}, dtypes="bf16")
    with pytest.raises(ValueError, match="no safetensors dtype"):
        mixp.save_safetensors(out, {"w": np.ones(3, np.uint16)})
    with pytest.raises(ValueError, match="unknown dtype"):
        mixp.save_safetensors(out, {"w": np.ones(3, np.float32)}, dtypes="fp7")
    with pytest.raises(ValueError, match="names no tensor"):
        mixp.save_safetensors(out, {"w": np.ones(3, np.float32)}, dtypes={"v": "bf16"})
    with pytest.raises(ValueError):
        mixp.save_safetensors(out, {"__metadata__": np.ones(3, np.float32)})  # the writer refuses
    assert not out.exists()  # atomic: nothing left behind
    with pytest.raises(FileNotFoundError):
        mixp.save_safetensors(tmp_path / "no" / "dir" / "x.safetensors", {"w": np.ones(2)})


FORMATS = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "int8"]


def test_inspect_equals_cli_records(tmp_path):
    """The records of `mixp train --inspect ...,dump=DIR` against mixp.inspect of the dumped
    tensors: the same statistics, key for key."""
    out, dump = tmp_path / "run.jsonl", tmp_path / "dump"
    run_cli("train", "--model", "mlp", "--data", "synthetic", "--steps", "2", "--batch", "16",
            "--width", "32", "--threads", "1", "--no-eval",
            "--inspect", f"roles=weight+activation,out={out},dump={dump}")
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) > 4
    for rec in records:
        x = np.fromfile(os.path.join(dump, rec["dump"]), dtype="<f4").reshape(rec["shape"])
        name = f"{rec['module']}.{rec['tensor']}" if rec["module"] else rec["tensor"]
        (mine,) = mixp.inspect({name: x})
        assert list(mine) == [k for k in rec if k != "dump"]
        for key in ("module", "tensor", "dtype", "shape", "numel", "amax", "amin_nz",
                    "dynamic_range", "rms", "nan", "inf", "zeros", "formats"):
            assert mine[key] == rec[key], (rec["module"], rec["role"], key)
        assert mine["role"] == "weight" and mine["step"] == 0


def test_inspect_file_and_arrays(tmp_path):
    t = sample()
    x = t["w"].copy()
    x[0, :3] = [np.nan, np.inf, 0.0]
    p = tmp_path / "m.safetensors"
    mixp.save_safetensors(p, {"layer.w": x, "ids": t["ids"], "layer.h": x}, dtypes={"layer.h": "bf16"})
    recs = mixp.inspect(p, formats=["bf16", "fp8_e4m3"])
    assert [(r["module"], r["tensor"], r["dtype"]) for r in recs] == \
           [("layer", "w", "fp32"), ("layer", "h", "bf16")]  # ids: no statistics
    assert list(recs[0]["formats"]) == ["bf16", "fp8_e4m3"]
    r = recs[0]
    assert r["nan"] == 1 and r["inf"] == 1 and r["zeros"] == 1 and r["numel"] == 120
    finite = x[np.isfinite(x)]
    assert r["amax"] == float(np.abs(finite).max())
    # the bf16 tensor's statistics are those of its values as an array
    (same,) = mixp.inspect({"layer.h": mixp.round(x, "bf16")}, formats=["bf16", "fp8_e4m3"])
    assert {k: v for k, v in same.items() if k != "dtype"} == \
           {k: v for k, v in recs[1].items() if k != "dtype"}
    (one,) = mixp.inspect(np.float16([1.0, 65504.0]))
    assert one["tensor"] == "tensor" and one["dtype"] == "fp16"
    assert one["formats"]["fp8_e4m3"]["overflow_count"] == 1
    with pytest.raises(ValueError, match="unknown format"):
        mixp.inspect(x, formats=["fp7"])
    with pytest.raises(ValueError, match="floating"):
        mixp.inspect({"i": t["ids"]})
    with pytest.raises(FileNotFoundError):
        mixp.inspect(tmp_path / "missing.safetensors")
