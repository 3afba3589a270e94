#!/usr/bin/python3
"""Writes fixture.safetensors with an independent writer (plain struct + json, numpy for data,
torch only for bfloat16), so the C++ reader is checked against something it did not produce.

Run with Debian's python (numpy + torch):  /usr/bin/python3 gen_safetensors_fixture.py
The output is committed; tests/io/test_safetensors_fixture.cpp checks it value by value.

Deliberate differences from mixp's own writer, to exercise the reader:
  - json.dumps defaults: ", " and ": " separators, non-ASCII metadata escaped as \\uXXXX;
  - header keys in name order, data laid out in a different order (offsets not monotone in
    header order), so the reader must sort by offset;
  - a scalar (shape []) and an empty tensor (shape [0, 4]).
Format: huggingface safetensors (u64 LE header size, JSON header padded with spaces, buffer).
"""
import json
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def bf16_bytes(values):
    t = torch.tensor(values, dtype=torch.float32).to(torch.bfloat16)
    return t.view(torch.int16).numpy().astype("<i2").tobytes()


# (name, dtype, shape, little-endian bytes), in the order the data go into the buffer.
TENSORS = [
    ("codes", "I8", [5], np.array([-128, -1, 0, 1, 127], dtype="i1").tobytes()),
    ("layer.weight", "F32", [2, 3],
     np.array([1.5, -2.25, 0.1, 3.4028234663852886e38, -0.0, 1e-45], dtype="<f4").tobytes()),
    ("empty", "F32", [0, 4], b""),
    ("emb", "BF16", [2, 2], bf16_bytes([1.0, -3.140625, 3.3895313892515355e38, 2.0 ** -133])),
    ("step", "I64", [], np.array([1234567890123], dtype="<i8").tobytes()),
    ("ids", "I64", [3], np.array([-(2 ** 63), 0, 2 ** 63 - 1], dtype="<i8").tobytes()),
    ("layer.bias", "F16", [4],
     np.array([65504.0, 2.0 ** -14, 2.0 ** -24, -np.inf], dtype="<f2").tobytes()),
]

METADATA = {"format": "pt", "producer": "gen_safetensors_fixture.py", "note": "\u00fcn\u00efcode \u2713"}


def main():
    header = {}
    offset = 0
    entries = {}
    for name, dtype, shape, data in TENSORS:
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header["__metadata__"] = METADATA
    for name in sorted(entries):
        header[name] = entries[name]
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(HERE, "fixture.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in TENSORS:
            f.write(data)


if __name__ == "__main__":
    main()
