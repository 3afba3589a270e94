#!/usr/bin/python3
"""Generates quant_fixture.json: torch.ao.quantization observers and fake quantization on fixed
batches, for tests/quant/test_observer.cpp and test_fake_quantize.cpp.

Run with Debian's /usr/bin/python3 (python3-torch 1.13, CPU):  /usr/bin/python3 gen_quant_fixture.py
Deterministic: the batches come from torch.Generator seeds and are stored in the file, so the C++
tests never need torch. Everything is fp32.

observers: [{"name", "kind": "min_max"|"moving_average", "per_channel", "axis", "dtype":
  "quint8"|"qint8", "scheme": "affine"|"symmetric", "reduce_range", "batches": [{"shape", "x"}],
  "after": [{"min": [...], "max": [...], "scale": [...], "zero_point": [...]} per batch]}]
fake_quant: [{"name", "scale", "zero_point", "qmin", "qmax", "x": [...], "y": [...],
  "grad": [...]}] (grad of sum(y * w) with w = 1: torch's straight-through mask)
"""
import json
import os

import torch
from torch.ao.quantization import observer as obs

BATCHES = 5


def batches(seed, shape, spread):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(BATCHES):
        # Batches of changing range, one with a positive-only range, so that min_neg/max_pos and
        # the moving average both matter.
        x = torch.randn(shape, generator=g, dtype=torch.float32) * spread * (1 + 0.5 * i)
        if i == 2:
            x = x.abs() + 0.25
        out.append(x)
    return out


def observer_case(name, cls, kwargs, shape, spread, seed, per_channel=False, axis=0):
    o = cls(**kwargs)
    xs = batches(seed, shape, spread)
    after = []
    for x in xs:
        o(x)
        s, z = o.calculate_qparams()
        after.append({"min": o.min_val.flatten().tolist(), "max": o.max_val.flatten().tolist(),
                      "scale": s.flatten().tolist(), "zero_point": z.flatten().tolist()})
    dtype = kwargs.get("dtype", torch.quint8)
    qscheme = kwargs.get("qscheme", torch.per_tensor_affine)
    return {"name": name,
            "kind": "moving_average" if "MovingAverage" in cls.__name__ else "min_max",
            "per_channel": per_channel, "axis": axis,
            "averaging_constant": kwargs.get("averaging_constant", 0.01),
            "dtype": "quint8" if dtype == torch.quint8 else "qint8",
            "scheme": "symmetric" if qscheme in (torch.per_tensor_symmetric,
                                                 torch.per_channel_symmetric) else "affine",
            "reduce_range": kwargs.get("reduce_range", False),
            "batches": [{"shape": list(x.shape), "x": x.flatten().tolist()} for x in xs],
            "after": after}


def fake_quant_case(name, scale, zp, qmin, qmax, seed):
    g = torch.Generator().manual_seed(seed)
    # Random values over and beyond the range, exact ties (k + 0.5) * scale, range ends.
    lo, hi = (qmin - zp) * scale, (qmax - zp) * scale
    x = torch.rand(200, generator=g, dtype=torch.float32) * (hi - lo) * 1.4 + lo - 0.2 * (hi - lo)
    ties = torch.tensor([(k + 0.5) * scale for k in range(qmin - zp - 2, qmin - zp + 3)] +
                        [(k + 0.5) * scale for k in range(qmax - zp - 3, qmax - zp + 2)] +
                        [(k + 0.5) * scale for k in (-3, -2, -1, 0, 1, 2)], dtype=torch.float32)
    x = torch.cat([x, ties, torch.tensor([lo, hi, 0.0], dtype=torch.float32)]).requires_grad_()
    y = torch.fake_quantize_per_tensor_affine(x, scale, zp, qmin, qmax)
    y.sum().backward()
    return {"name": name, "scale": scale, "zero_point": zp, "qmin": qmin, "qmax": qmax,
            "x": x.detach().tolist(), "y": y.detach().tolist(), "grad": x.grad.tolist()}


def main():
    observers = [
        observer_case("minmax_quint8_affine", obs.MinMaxObserver,
                      {"dtype": torch.quint8, "qscheme": torch.per_tensor_affine}, [4, 33], 1.0, 1),
        observer_case("minmax_quint8_affine_reduce", obs.MinMaxObserver,
                      {"dtype": torch.quint8, "qscheme": torch.per_tensor_affine,
                       "reduce_range": True}, [4, 33], 2.0, 2),
        observer_case("minmax_qint8_symmetric", obs.MinMaxObserver,
                      {"dtype": torch.qint8, "qscheme": torch.per_tensor_symmetric}, [50], 0.3, 3),
        observer_case("ma_quint8_affine", obs.MovingAverageMinMaxObserver,
                      {"dtype": torch.quint8, "qscheme": torch.per_tensor_affine}, [8, 16], 1.5, 4),
        observer_case("ma_quint8_affine_reduce_c0.1", obs.MovingAverageMinMaxObserver,
                      {"dtype": torch.quint8, "qscheme": torch.per_tensor_affine,
                       "reduce_range": True, "averaging_constant": 0.1}, [8, 16], 1.5, 5),
        observer_case("perchannel_qint8_symmetric", obs.PerChannelMinMaxObserver,
                      {"dtype": torch.qint8, "qscheme": torch.per_channel_symmetric, "ch_axis": 0},
                      [6, 3, 3, 2], 0.2, 6, per_channel=True, axis=0),
        observer_case("perchannel_qint8_symmetric_axis1", obs.PerChannelMinMaxObserver,
                      {"dtype": torch.qint8, "qscheme": torch.per_channel_symmetric, "ch_axis": 1},
                      [4, 5, 3], 0.5, 7, per_channel=True, axis=1),
        observer_case("ma_perchannel_qint8_symmetric", obs.MovingAveragePerChannelMinMaxObserver,
                      {"dtype": torch.qint8, "qscheme": torch.per_channel_symmetric, "ch_axis": 0},
                      [5, 12], 0.1, 8, per_channel=True, axis=0),
        observer_case("perchannel_quint8_affine", obs.PerChannelMinMaxObserver,
                      {"dtype": torch.quint8, "qscheme": torch.per_channel_affine, "ch_axis": 0},
                      [3, 20], 1.0, 9, per_channel=True, axis=0),
    ]
    fake = [
        fake_quant_case("quint8_zp37", 0.0173, 37, 0, 255, 11),
        fake_quant_case("quint8_reduce_zp0", 0.05, 0, 0, 127, 12),
        fake_quant_case("qint8_symmetric", 0.0031, 0, -128, 127, 13),
        fake_quant_case("qint8_reduce", 0.25, 3, -64, 63, 14),
    ]
    out = {"torch": torch.__version__, "observers": observers, "fake_quant": fake}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quant_fixture.json")
    with open(path, "w") as f:
        json.dump(out, f)
    print("wrote", path)


if __name__ == "__main__":
    main()
