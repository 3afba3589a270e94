"""Independent NumPy references for mixp's formats, written from the format definitions
(docs/formats.md, include/mixp/format/block_mx.h, block_int4.h, block_int8.h), not from mixp's code.
Everything is computed in float64, where every step below is exact."""
import numpy as np

# name: (exponent bits, mantissa bits, bias, specials) as in include/mixp/format/dtype.h
FLOATS = {
    "fp32": (8, 23, 127, "ieee"), "tf32": (8, 10, 127, "ieee"), "bf16": (8, 7, 127, "ieee"),
    "fp16": (5, 10, 15, "ieee"), "fp8_e4m3": (4, 3, 7, "fn"), "fp8_e5m2": (5, 2, 15, "ieee"),
    "fp6_e2m3": (2, 3, 1, "finite"), "fp6_e3m2": (3, 2, 3, "finite"), "fp4_e2m1": (2, 1, 1, "finite"),
}


def max_finite(fmt):
    e, m, bias, sp = FLOATS[fmt]
    top = (1 << e) - 1 - bias  # exponent of the top binade
    if sp == "ieee":
        top -= 1
        frac = 2 - 2.0 ** -m
    elif sp == "fn":
        frac = 2 - 2.0 ** -(m - 1)  # S.1111.111 is NaN: the largest mantissa is 1.110
    else:
        frac = 2 - 2.0 ** -m
    return frac * 2.0 ** top


def round_float(x, fmt, saturate=False):
    """Round-to-nearest-even of float64 x into the format, as float64; overflow: inf (ieee),
    NaN (fn) or max finite (finite formats, or saturate)."""
    e, m, bias, sp = FLOATS[fmt]
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.asarray(x, dtype=np.float64)
    out = np.full(x.shape, np.nan)
    fin = np.isfinite(x)
    ax = np.abs(np.where(fin, x, 1.0))
    emin = 1 - bias
    with np.errstate(divide="ignore"):
        ex = np.floor(np.log2(np.where(ax > 0, ax, 1.0)))
    # log2 may be off by one near powers of two: fix with exact comparisons
    ex = np.where(2.0 ** ex > ax, ex - 1, ex)
    ex = np.where(2.0 ** (ex + 1) <= ax, ex + 1, ex)
    ex = np.maximum(ex, emin)
    ulp = 2.0 ** (ex - m)
    q = np.round(np.where(fin, x, 0.0) / ulp) * ulp  # np.round: ties to even
    mf = max_finite(fmt)
    over = np.abs(q) > mf
    if saturate or sp == "finite":
        q = np.where(over, np.sign(q) * mf, q)
    elif sp == "fn":
        q = np.where(over, np.nan, q)
    else:
        with np.errstate(invalid="ignore"):
            q = np.where(over, np.sign(q) * np.inf, q)
    out = np.where(fin, q, out)
    inf = np.isinf(x)
    if sp == "finite" or saturate:  # saturate clamps +-inf too (rounding.h Overflow::saturate)
        out = np.where(inf, np.sign(np.where(inf, x, 0)) * mf, out)
    elif sp == "ieee":
        out = np.where(inf, x, out)
    return out


MX = {"mxfp8_e4m3": ("fp8_e4m3", 8), "mxfp8_e5m2": ("fp8_e5m2", 15), "mxfp6_e2m3": ("fp6_e2m3", 2),
      "mxfp6_e3m2": ("fp6_e3m2", 4), "mxfp4": ("fp4_e2m1", 2)}


def mx_fake_quant(x, scheme, block=32):
    """OCP MX v1.0: per block along the last dim, X = 2^(floor(log2 amax) - emax_elem), elements
    x/X rounded (saturating) to the element format, times X."""
    elem, emax = MX[scheme]
    x = np.asarray(x, dtype=np.float32)
    rows = x.reshape(-1, x.shape[-1]).astype(np.float64)
    out = np.empty_like(rows)
    for r in range(rows.shape[0]):
        for b in range(0, rows.shape[1], block):
            blk = rows[r, b:b + block]
            amax = np.max(np.abs(blk))
            if not np.isfinite(amax):
                out[r, b:b + block] = np.nan
                continue
            if amax == 0:
                e = -126
            else:
                _, e2 = np.frexp(amax)
                e = int(e2) - 1
            shared = min(max(e - emax, -127), 127)
            scale = 2.0 ** shared
            out[r, b:b + block] = round_float(blk / scale, elem, saturate=True) * scale
    return out.astype(np.float32).reshape(x.shape)


NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141792297, 0.24611230194568634, 0.33791524171829224,
                0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=np.float32)


def nf4_fake_quant(x, block=64):
    """QLoRA NF4: per block of 64 (flat order) absmax scale; nearest code, ties to the lower."""
    flat = np.asarray(x, dtype=np.float32).reshape(-1)
    out = np.empty_like(flat)
    codes = NF4.astype(np.float64)
    mids = (codes[:-1] + codes[1:]) / 2
    for b in range(0, flat.size, block):
        blk = flat[b:b + block]
        absmax = np.float32(np.max(np.abs(blk)))
        if absmax == 0:
            out[b:b + block] = 0
            continue
        n = (blk / absmax).astype(np.float32).astype(np.float64)
        idx = np.searchsorted(mids, n, side="left")  # n == mid stays at the lower code
        out[b:b + block] = NF4[idx] * absmax
    return out.reshape(np.shape(x))


def int4_fake_quant(x, block=64):
    flat = np.asarray(x, dtype=np.float32).reshape(-1)
    out = np.empty_like(flat)
    for b in range(0, flat.size, block):
        blk = flat[b:b + block]
        scale = np.float32(np.max(np.abs(blk))) / np.float32(7)
        if scale == 0:
            out[b:b + block] = 0
            continue
        q = np.clip(np.round(blk / scale), -8, 7) + 0.0  # integer codes: no -0
        out[b:b + block] = (q.astype(np.float32) * scale).astype(np.float32)
    return out.reshape(np.shape(x))


def int8_fake_quant(x):
    """PyTorch's symmetric per-tensor qint8 (MinMaxObserver): scale = max(-min, max) / 127.5,
    at least 2^-23; q = clamp(round(x * (1/scale)), -128, 127); every step in fp32."""
    x = np.asarray(x, dtype=np.float32)
    mn = min(np.float32(0), x.min())
    mx = max(np.float32(0), x.max())
    scale = np.float32(max(-mn, mx)) / np.float32(127.5)
    scale = max(scale, np.float32(2.0 ** -23))
    inv = np.float32(1) / np.float32(scale)
    q = np.clip(np.round((x * inv).astype(np.float32)), -128, 127) + np.float32(0)  # no -0
    return (q.astype(np.float32) * np.float32(scale)).astype(np.float32)
