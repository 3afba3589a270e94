#!/usr/bin/python3
"""Independent reference fixtures for mixp's scalar format core (tests/format/test_exhaustive_*.cpp).

Regenerate (deterministic: the same bytes on every run with the same numpy/torch):

    /usr/bin/python3 tests/golden/format/gen_format_fixtures.py

(Debian's /usr/bin/python3 with python3-numpy and python3-torch; the pyenv `python3` lacks them.)
The C++ tests read only the committed .bin files and need neither numpy nor torch.

Where each expected output comes from, and why it is independent of src/format/float_codec.cpp:
  fp16_decode.bin  numpy: every fp16 bit pattern -> astype(float32).
  fp16_encode.bin  numpy: float32 -> astype(float16) (round to nearest even, Overflow::ieee).
                   numpy keeps NaN payloads its own way, so the test compares NaN only as
                   "NaN with the same sign" and checks mixp's own NaN rule separately.
  bf16_encode.bin  torch 1.13: tensor(float32).to(bfloat16). NaN inputs are left out: this torch
                   returns 0xFFFF (vectorised path) or 0x7FC0 (scalar path) for every NaN; mixp
                   keeps the sign (docs/formats.md), tested separately.
  fp8_e4m3.bin, fp8_e5m2.bin, fp6_e2m3.bin, fp6_e3m2.bin, fp4_e2m1.bin, tf32.bin:
                   neither numpy nor torch 1.13 has these formats, so this script carries its own
                   reference that does NOT follow the C++ algorithm (which shifts integer
                   significands): it lists every representable value of the format as an exact
                   fractions.Fraction, finds the two neighbours of the exact input by bisection,
                   and picks one by comparing exact rational distances (ties: the even code for
                   nearest-even, the larger magnitude for nearest-away; toward-zero: the smaller).
                   Overflow follows docs/formats.md "Overflow": beyond max finite the next
                   "virtual" grid point is max + top-binade ulp (fp16 65536, e4m3 480, e5m2 65536,
                   fp4 8, ...). A value that rounds to it overflows: inf (IEEE formats),
                   NaN S.1111.111 (E4M3FN), max finite (fp6/fp4, and every format under
                   Overflow::saturate). Toward-zero never picks it, so it gives max finite
                   (IEEE 754 section 7.4). The script asserts that the resulting thresholds are
                   docs/formats.md's numbers (fp16 65520, e4m3 464, e5m2 61440).
                   NaN inputs: keep the sign, quiet NaN with the top payload bits (IEEE formats),
                   S.1111.111 (E4M3FN), +0 (fp6/fp4, which have no NaN). Infinite inputs: inf where
                   the format has one (under Overflow::ieee, whatever the rounding), NaN for E4M3FN,
                   else max finite.

Binary layout of every .bin (little endian):
  bytes 0..3   magic b"MXFX"
  u32          version (1)
  u32          in_bytes   size of the input field of a record (2: fp16 bit pattern, 4: fp32 bits)
  u32          out_bytes  size of each output field (1, 2 or 4)
  u32          n_out      outputs per record
  u32          count      records
  then `count` records: input (in_bytes) followed by n_out outputs (out_bytes each).
Outputs per record:
  fp16_decode.bin  [fp32 bits]
  fp16_encode.bin  [fp16 bits, nearest-even, Overflow::ieee]
  bf16_encode.bin  [bf16 bits, nearest-even, Overflow::ieee]
  fp8/fp6/fp4      [nearest-even ieee, nearest-even saturate, toward-zero ieee, nearest-away ieee]
                   as the format's code (sign at bit bits-1)
  tf32.bin         [nearest-even ieee, nearest-away ieee, toward-zero ieee, nearest-even saturate]
                   in fp32 layout (low 13 bits zero)

Inputs (fp32 bit patterns; signs drawn at random where a case is sign-symmetric): every finite
value of the format, every midpoint between adjacent values (including max and the virtual next
point, i.e. the overflow threshold), each midpoint +-1 fp32 ulp, the subnormal boundary region,
the overflow region, infinities, NaNs and random fp32 patterns (splitmix64, seeded, a quarter of them
uniform over all 2^32 patterns and the rest with exponents near the format's range).
"""
import bisect
import os
import struct
import sys
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
MASK64 = (1 << 64) - 1


class SplitMix64:
    """Tiny seeded generator (Steele et al.), so the inputs do not depend on numpy's RNG streams."""

    def __init__(self, seed):
        self.s = seed & MASK64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def u32(self):
        return self.next() >> 32


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def f32_fraction(b):
    """Exact value of a finite fp32 bit pattern."""
    return Fraction(f32_from_bits(b))


def f32_of_fraction(q):
    """fp32 bits of q, which must be exactly representable in fp32."""
    b = f32_bits(float(q))
    assert f32_fraction(b) == q, q
    return b


def random_patterns(rng, n, lo_exp, hi_exp):
    """n fp32 patterns: a quarter uniform over all 2^32, the rest with unbiased exponent in
    [lo_exp, hi_exp] (clipped to fp32's finite range), random sign and mantissa."""
    out = []
    for i in range(n):
        r = rng.u32()
        if i % 4 == 0:
            out.append(r)
            continue
        e = lo_exp + rng.u32() % (hi_exp - lo_exp + 1)
        biased = min(max(e + 127, 0), 254)
        out.append((r & 0x807FFFFF) | (biased << 23))
    return out


def write_fixture(name, in_bytes, out_bytes, records):
    """records: list of (input, [outputs])."""
    n_out = len(records[0][1])
    fmt_in = {2: "<H", 4: "<I"}[in_bytes]
    fmt_out = {1: "<B", 2: "<H", 4: "<I"}[out_bytes]
    parts = [b"MXFX", struct.pack("<5I", 1, in_bytes, out_bytes, n_out, len(records))]
    for inp, outs in records:
        assert len(outs) == n_out
        parts.append(struct.pack(fmt_in, inp))
        for o in outs:
            parts.append(struct.pack(fmt_out, o))
    data = b"".join(parts)
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    print(f"{name}: {len(records)} records, {len(data)} bytes")


def dedupe(seq):
    return list(dict.fromkeys(seq))


# --------------------------------------------------------------------------------------------
# The exact-rational reference for formats numpy and torch lack.

class RefFormat:
    def __init__(self, name, E, M, bias, specials):
        self.name, self.E, self.M, self.bias, self.specials = name, E, M, bias, specials
        self.bits = 1 + E + M
        self.sign = 1 << (E + M)
        exp_all = (1 << E) - 1
        self.inf_code = (exp_all << M) if specials == "ieee" else None
        self.nan_code = (exp_all << M) | ((1 << M) - 1) if specials != "finite" else None
        pairs = []
        for code in range(1 << (E + M)):
            v = self.value(code)
            if isinstance(v, Fraction):
                pairs.append((v, code))
        pairs.sort()
        self.vals = [v for v, _ in pairs]
        self.codes = [c for _, c in pairs]
        self.max_val, self.max_code = self.vals[-1], self.codes[-1]
        # The grid point after max finite if the exponent range went on (its code is max_code+1).
        self.virtual_next = self.max_val + (self.vals[-1] - self.vals[-2])
        self.threshold = (self.max_val + self.virtual_next) / 2

    def value(self, code):
        """The definition of the format (OCP OFP8 / MX v1.0 / IEEE 754), not mixp's decoder."""
        e, m = code >> self.M, code & ((1 << self.M) - 1)
        top = e == (1 << self.E) - 1
        if self.specials == "ieee" and top:
            return "inf" if m == 0 else "nan"
        if self.specials == "fn" and top and m == (1 << self.M) - 1:
            return "nan"
        if e == 0:
            return Fraction(m, 1 << self.M) * Fraction(2) ** (1 - self.bias)
        return (1 + Fraction(m, 1 << self.M)) * Fraction(2) ** (e - self.bias)

    def overflow_code(self, saturate):
        if saturate or self.specials == "finite":
            return self.max_code
        return self.nan_code if self.specials == "fn" else self.inf_code

    def encode(self, b, mode, saturate):
        """Encode fp32 bit pattern b. mode: 'rne' | 'rtz' | 'rna'."""
        s = self.sign if b >> 31 else 0
        exp, frac = (b >> 23) & 0xFF, b & 0x7FFFFF
        if exp == 0xFF and frac:  # NaN
            if self.specials == "finite":
                return 0
            if self.specials == "fn":
                return s | self.nan_code
            payload = frac >> (23 - self.M)
            return s | self.inf_code | payload | (1 << (self.M - 1))
        if exp == 0xFF:  # inf: not a rounding overflow, so the rounding mode does not matter
            return s | self.overflow_code(saturate)
        a = abs(f32_fraction(b))
        i = bisect.bisect_left(self.vals, a)
        if i < len(self.vals) and self.vals[i] == a:
            return s | self.codes[i]
        lo_v, lo_c = self.vals[i - 1], self.codes[i - 1]
        if i == len(self.vals):
            hi_v, hi_c, hi_over = self.virtual_next, self.max_code + 1, True
        else:
            hi_v, hi_c, hi_over = self.vals[i], self.codes[i], False
        d_lo, d_hi = a - lo_v, hi_v - a
        if mode == "rtz":
            up = False
        elif d_lo != d_hi:
            up = d_hi < d_lo
        elif mode == "rna":
            up = True
        else:
            up = hi_c % 2 == 0
        if not up:
            return s | lo_c
        return s | (self.overflow_code(saturate) if hi_over else hi_c)


def ref_inputs(fmt, rng, n_random, value_stride=1, extra=()):
    """fp32 input patterns for a RefFormat (see the module docstring)."""
    ins = []
    n = len(fmt.vals)
    picked = set(range(0, n, value_stride))
    picked |= set(range(min(n, 64))) | set(range(max(0, n - 64), n))
    if value_stride > 1:  # binade edges of big formats
        for k in range(n):
            if fmt.codes[k] & ((1 << fmt.M) - 1) in (0, (1 << fmt.M) - 1):
                picked.add(k)
    for k in sorted(picked):
        sign = (rng.u32() & 1) << 31
        ins.append(sign | f32_of_fraction(fmt.vals[k]))
        nxt = fmt.vals[k + 1] if k + 1 < n else fmt.virtual_next
        mid = f32_of_fraction((fmt.vals[k] + nxt) / 2)
        for b in (mid - 1, mid, mid + 1):
            ins.append(((rng.u32() & 1) << 31) | b)
    # Below half the smallest subnormal, and fp32's own extremes.
    min_sub = fmt.vals[1]
    for q in (min_sub / 4, min_sub * 3 / 8, min_sub * 5 / 8, min_sub * 3 / 4, min_sub * 5 / 4):
        ins.append(f32_of_fraction(q))
    ins += [0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x80000001]
    for q in (fmt.max_val * 2, fmt.virtual_next, fmt.virtual_next * 4):
        if q < Fraction(2) ** 128:  # tf32's are beyond fp32
            b = f32_of_fraction(q)
            ins += [b, b | 0x80000000]
    ins += [0x00000000, 0x80000000, 0x7F800000, 0xFF800000]
    ins += [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF, 0xFFE00001,
            0x7F802000, 0x7FB00000]
    ins += list(extra)
    min_exp = 1 - fmt.bias - fmt.M
    max_exp = (fmt.max_val.numerator.bit_length() - fmt.max_val.denominator.bit_length())
    ins += random_patterns(rng, n_random, min_exp - 4, max_exp + 2)
    return dedupe(ins)


def gen_ref_format(fmt, file, rng, n_random, value_stride=1, extra=(), tf32=False):
    ins = ref_inputs(fmt, rng, n_random, value_stride, extra)
    if tf32:
        modes = (("rne", False), ("rna", False), ("rtz", False), ("rne", True))
    else:
        modes = (("rne", False), ("rne", True), ("rtz", False), ("rna", False))
    recs = []
    for b in ins:
        outs = [fmt.encode(b, m, sat) for m, sat in modes]
        if tf32:  # 19-bit S.E8.M10 code -> fp32 layout
            outs = [((o >> 18) << 31) | ((o & 0x3FFFF) << 13) for o in outs]
        recs.append((b, outs))
    write_fixture(file, 4, 4 if tf32 else 1, recs)


# --------------------------------------------------------------------------------------------
# numpy (fp16) and torch (bf16).

def grid_inputs(values_bits, to_f32, after, rng):
    """Every finite positive value, every midpoint to the next one and midpoint +-1 fp32 ulp.
    values_bits: the format's positive finite codes in increasing order; to_f32: code -> fp32 bits.
    after: exact value of the virtual point after max finite (the overflow midpoint comes from it)."""
    ins = []
    vals = [f32_fraction(to_f32(c)) for c in values_bits]
    vals.append(after)
    for k in range(len(values_bits)):
        ins.append(((rng.u32() & 1) << 31) | to_f32(values_bits[k]))
        mid = f32_of_fraction((vals[k] + vals[k + 1]) / 2)
        for b in (mid - 1, mid, mid + 1):
            ins.append(((rng.u32() & 1) << 31) | b)
    return ins


def check_reference_against(fmt, ins, outs, who):
    """The rational reference must agree with numpy (fp16) and torch (bf16) on every non-NaN
    input: evidence that the reference used for fp8/fp6/fp4/tf32 rounds correctly."""
    for b, o in zip(ins.tolist(), outs.tolist()):
        if (b >> 23) & 0xFF == 0xFF and b & 0x7FFFFF:
            continue
        r = fmt.encode(b, "rne", False)
        assert r == o, f"{fmt.name}: reference {r:#x} != {who} {o:#x} for fp32 {b:#010x}"
    print(f"{fmt.name}: rational reference agrees with {who} on {len(ins)} inputs")


def gen_fp16(np, rng):
    pats = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    dec = pats.view(np.float16).astype(np.float32).view(np.uint32)
    write_fixture("fp16_decode.bin", 2, 4, [(int(p), [int(d)]) for p, d in zip(pats, dec)])

    def fp16_to_f32(c):
        return int(np.array([c], dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)[0])

    ins = grid_inputs(list(range(0x7C00)), fp16_to_f32, Fraction(65536), rng)
    # Overflow region: every fp32 pattern from 65504 to 65536, then a few beyond.
    ins += [((rng.u32() & 1) << 31) | b for b in range(f32_bits(65504.0), f32_bits(65536.0) + 1)]
    ins += [f32_bits(x) for x in (65536.0, 1e5, 1e10, 3.0e38)]
    # Subnormal boundary region: random fp32 in [2^-27, 2^-13), where fp16 subnormals live.
    for _ in range(4096):
        e = -27 + rng.u32() % 14
        ins.append(((rng.u32() & 1) << 31) | ((e + 127) << 23) | (rng.u32() & 0x7FFFFF))
    ins += [0x00000001, 0x80000001, 0x00800000, f32_bits(2.0 ** -26), f32_bits(2.0 ** -25)]
    ins += [0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA00000, 0xFFFFFFFF]
    ins += random_patterns(rng, 32768, -28, 17)
    ins = dedupe(ins)
    arr = np.array(ins, dtype=np.uint32)
    with np.errstate(over="ignore"):
        out = arr.view(np.float32).astype(np.float16).view(np.uint16)
    write_fixture("fp16_encode.bin", 4, 2, [(int(a), [int(o)]) for a, o in zip(arr, out)])
    check_reference_against(RefFormat("fp16", 5, 10, 15, "ieee"), arr, out, "numpy")


def gen_bf16(np, torch, rng):
    def bf16_to_f32(c):
        return c << 16  # bf16 is the top half of fp32, by definition

    ins = grid_inputs(list(range(0x7F80)), bf16_to_f32, Fraction(2) ** 128, rng)
    # Overflow region: fp32 patterns around the threshold (max 0x7F7F0000 + half ulp 0x8000).
    ins += [((rng.u32() & 1) << 31) | b for b in range(0x7F7F7800, 0x7F7F8801)]
    ins += list(range(0x7F7FFF00, 0x7F800000))
    # Subnormal region: every fp32 pattern with low 16 bits in a tie/near-tie set, small values.
    for hi in range(0x0000, 0x0100):
        for lo in (0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF):
            ins.append(((rng.u32() & 1) << 31) | (hi << 16) | lo)
    ins += [0x7F800000, 0xFF800000]
    ins += random_patterns(rng, 32768, -140, 129)
    ins = [b for b in dedupe(ins) if not ((b >> 23) & 0xFF == 0xFF and b & 0x7FFFFF)]  # no NaN
    arr = np.array(ins, dtype=np.uint32)
    t = torch.from_numpy(arr.view(np.float32).copy()).to(torch.bfloat16)
    out = t.view(torch.int16).numpy().view(np.uint16)
    write_fixture("bf16_encode.bin", 4, 2, [(int(a), [int(o)]) for a, o in zip(arr, out)])
    check_reference_against(RefFormat("bf16", 8, 7, 127, "ieee"), arr, out, "torch")


def main():
    ref = {
        "fp8_e4m3": RefFormat("fp8_e4m3", 4, 3, 7, "fn"),
        "fp8_e5m2": RefFormat("fp8_e5m2", 5, 2, 15, "ieee"),
        "fp6_e2m3": RefFormat("fp6_e2m3", 2, 3, 1, "finite"),
        "fp6_e3m2": RefFormat("fp6_e3m2", 3, 2, 3, "finite"),
        "fp4_e2m1": RefFormat("fp4_e2m1", 2, 1, 1, "finite"),
    }
    # docs/formats.md's numbers, as a check on the reference itself.
    assert ref["fp8_e4m3"].max_val == 448 and ref["fp8_e4m3"].threshold == 464
    assert ref["fp8_e5m2"].max_val == 57344 and ref["fp8_e5m2"].threshold == 61440
    assert ref["fp6_e2m3"].max_val == Fraction(15, 2) and ref["fp6_e3m2"].max_val == 28
    assert [float(v) for v in ref["fp4_e2m1"].vals] == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert RefFormat("fp16", 5, 10, 15, "ieee").threshold == 65520

    rng = SplitMix64(0x6D697870)  # "mixp"
    for name, fmt in ref.items():
        gen_ref_format(fmt, name + ".bin", rng, 4096)
    tf32 = RefFormat("tf32", 8, 10, 127, "ieee")
    gen_ref_format(tf32, "tf32.bin", rng, 8192, value_stride=255, tf32=True)

    try:
        import numpy as np
        import torch
    except ImportError:
        sys.exit("needs Debian's python3-numpy and python3-torch: run with /usr/bin/python3")
    gen_fp16(np, rng)
    gen_bf16(np, torch, rng)


if __name__ == "__main__":
    main()
