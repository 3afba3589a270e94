#!/usr/bin/env python3
"""mixp.round(x, "bf16") and mixp.quantize(x, "mxfp8_e4m3") against a vectorised NumPy
implementation of the same rounding and PyTorch's x.to(torch.bfloat16) (issue 34's speed check;
docs/python.md, docs/benchmarks.md). Interleaved rounds in one run; medians.

    PYTHONPATH=build/release/python python3 bench/python_round.py [N] [ROUNDS]   # N default 1e7
"""
import sys
import time

import numpy as np

import mixp


def numpy_bf16(x):
    """Round-to-nearest-even to bf16, returned as float32: the usual bit trick, vectorised
    (NaN kept quiet)."""
    u = x.view(np.uint32)
    r = ((u >> 16) & 1) + np.uint32(0x7FFF)
    y = ((u + r) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isnan(x), x, y)


def numpy_mxfp8(x, block=32):
    """OCP MXFP8 E4M3 fake quantization, vectorised over blocks of `block` along the last dim."""
    b = x.reshape(-1, block).astype(np.float32)
    amax = np.max(np.abs(b), axis=1, keepdims=True)
    e = np.floor(np.log2(np.where(amax > 0, amax, np.float32(2.0**-126)))) - 8
    scale = np.exp2(np.clip(e, -127, 127)).astype(np.float32)
    s = np.clip(b / scale, -448, 448)
    ex = np.floor(np.log2(np.maximum(np.abs(s), np.float32(2.0**-6))))
    ulp = np.exp2(ex - 3).astype(np.float32)
    return (np.round(s / ulp) * ulp * scale).reshape(x.shape)


def main():
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 10**7
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    cases = {
        "mixp.round bf16": lambda: mixp.round(x, "bf16"),
        "numpy bf16": lambda: numpy_bf16(x),
        "mixp.quantize mxfp8_e4m3": lambda: mixp.quantize(x, "mxfp8_e4m3"),
        "mixp quantize+dequantize mxfp8": lambda: mixp.dequantize(mixp.quantize(x, "mxfp8_e4m3")),
        "numpy mxfp8 fake-quant": lambda: numpy_mxfp8(x),
    }
    try:
        import torch
        t = torch.from_numpy(x)
        cases["torch .to(bfloat16)"] = lambda: t.to(torch.bfloat16)
        cases["torch .to(bfloat16).float()"] = lambda: t.to(torch.bfloat16).float()
        threads = torch.get_num_threads()
    except ImportError:
        threads = None
    np.testing.assert_array_equal(mixp.round(x[:10**5], "bf16"), numpy_bf16(x[:10**5]))
    times = {k: [] for k in cases}
    for _ in range(rounds):
        for k, f in cases.items():
            s = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - s)
    print(f"n = {n:.0e} float32, {rounds} interleaved rounds, torch threads {threads}")
    base = np.median(times["numpy bf16"])
    mx_base = np.median(times["numpy mxfp8 fake-quant"])
    for k, v in times.items():
        m = np.median(v)
        vs = f"{mx_base / m:6.2f}x numpy mxfp8" if "mxfp8" in k else f"{base / m:6.2f}x numpy bf16"
        print(f"{k:34s} {m * 1e3:9.1f} ms  {n / m / 1e6:8.0f} M/s  {vs}")


if __name__ == "__main__":
    main()
