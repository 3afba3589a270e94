"""mixp from Python: the number formats on NumPy arrays (docs/python.md).

    import numpy as np, mixp
    y = mixp.round(np.float32([1/3, 448.5]), "fp8_e4m3")      # values fp8 E4M3 stores
    q = mixp.quantize(x, "mxfp8_e4m3")                         # codes + e8m0 scales
    x2 = mixp.dequantize(q)

`mixp.torch` (fake quantization of PyTorch tensors) is imported on demand: `import mixp.torch`.
"""
from ._engine import compare, plan, train
from ._io import inspect, load_safetensors, save_safetensors
from ._formats import (Quantized, decode, dequantize, describe, encode, formats,  # noqa: A004
                       quantize, round)

__all__ = ["Quantized", "decode", "dequantize", "describe", "encode", "formats", "quantize",
           "round", "compare", "plan", "train", "inspect", "load_safetensors",
           "save_safetensors"]
