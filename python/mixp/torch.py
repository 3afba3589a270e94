"""mixp's exact fake quantization for PyTorch (CPU tensors): `import mixp.torch`.

    model = mixp.torch.convert(model, precision="fp8", skip=["lm_head"])

swaps every nn.Linear (except the skipped ones) for an Fp8Linear that computes, in forward and
backward, what mixp's own FP8 linear layer computes (include/mixp/amp/fp8_linear.h, docs/fp8.md):
  fp8 / fp8-current  per-tensor scaling, TransformerEngine's DelayedScaling / Float8CurrentScaling,
                     HYBRID: E4M3 for input and weight, E5M2 for the output gradient;
                       y  = (q_x @ q_w^T) * (scale_inv_x * scale_inv_w) + b
                       dx = (q_g @ q_w) * (scale_inv_g * scale_inv_w)
                       dw = (q_g^T @ q_x) * (scale_inv_g * scale_inv_x),   db = sum(g)
                     where q = the FP8 codes of t * scale (mixp's cast, saturating, ties to even);
  mxfp8 / mxfp4      OCP MX blocks of 32 along each GEMM's reduction dimension (K forward, N for
                     dgrad, M for wgrad), each operand quantized from the high-precision tensor.
The codes come from the C++ library (mixp._mixp.fp8_cast, mixp.quantize), so they are mixp's bits;
the GEMMs are PyTorch's fp32 matmuls of those exact values.
"""
from __future__ import annotations

import fnmatch

import numpy as np
import torch
from torch import nn

from . import _mixp
from ._formats import dequantize, quantize

PRECISIONS = ("fp8", "fp8-current", "mxfp8", "mxfp4")
_MX_SCHEME = {"mxfp8": "mxfp8_e4m3", "mxfp4": "mxfp4"}


def _np(t):
    return t.detach().to(torch.float32).contiguous().numpy()


class Fp8Meta:
    """One layer's FP8 state (TE's fp8_meta): for delayed scaling a mixp Fp8ScalingState per role
    (input, weight, grad_output); none for current scaling and MX."""

    def __init__(self, precision="fp8", amax_history_len=16, amax_compute_algo="max", margin=0,
                 fp8_format="hybrid"):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
        if fp8_format not in ("hybrid", "e4m3"):
            raise ValueError(f"fp8_format must be 'hybrid' or 'e4m3', not {fp8_format!r}")
        self.precision = precision
        self.margin = int(margin)
        if self.margin < 0:
            raise ValueError("margin must be >= 0")
        grad = "fp8_e5m2" if fp8_format == "hybrid" else "fp8_e4m3"
        self.formats = {"input": "fp8_e4m3", "weight": "fp8_e4m3", "grad_output": grad}
        self.states = {}
        if precision == "fp8":
            self.states = {r: _mixp.Fp8ScalingState(f, int(amax_history_len), amax_compute_algo,
                                                    self.margin)
                           for r, f in self.formats.items()}

    def cast(self, t, role, record=True):
        """(codes as an exact fp32 tensor, scale_inv as np.float32) of a per-tensor FP8 cast.
        record=False (an evaluation pass) leaves the delayed-scaling state untouched, as mixp's
        Fp8Autocast entered without gradients does (fp8_linear.h)."""
        x = _np(t)
        fmt = self.formats[role]
        if self.precision == "fp8":
            st = self.states[role]
            codes, amax = _mixp.fp8_cast(x, fmt, st.scale)
            if record:
                st.record_amax(amax)
            scale_inv = np.float32(st.scale_inv)
        else:  # current scaling: TE compute_scale_from_amax with previous 1
            amax = _mixp.fp8_amax(x)
            scale = _mixp.fp8_scale_from_amax(amax, fmt, self.margin, 1.0)
            codes, _ = _mixp.fp8_cast(x, fmt, scale)
            scale_inv = np.float32(1) / np.float32(scale)
        return torch.from_numpy(codes), scale_inv

    def update(self, roles):
        for r in roles:
            if r in self.states:
                self.states[r].update()


def mx_fake_quantize(t, scheme, axis=-1):
    """t quantized and dequantized by an MX scheme with blocks along `axis` (mixp.quantize)."""
    return torch.from_numpy(dequantize(quantize(_np(t), scheme, axis=axis)))


class _Fp8LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, meta, training):
        x2 = x.reshape(-1, x.shape[-1])
        if meta.precision in _MX_SCHEME:
            s = _MX_SCHEME[meta.precision]
            y = mx_fake_quantize(x2, s, -1) @ mx_fake_quantize(w, s, -1).t()
            ctx.save_for_backward(x2, w)
        else:
            qx, sx = meta.cast(x2, "input", training)
            qw, sw = meta.cast(w, "weight", training)
            y = (qx @ qw.t()) * float(np.float32(sx * sw))
            ctx.save_for_backward(qx, qw)
            ctx.scale_inv = (sx, sw)
            if training:  # TE: the forward roles update when the fp8_autocast region exits
                meta.update(("input", "weight"))
        if b is not None:
            y = y + b
        ctx.meta, ctx.has_bias, ctx.x_shape = meta, b is not None, x.shape
        return y.reshape(*x.shape[:-1], w.shape[0]).to(x.dtype)

    @staticmethod
    def backward(ctx, gy):
        meta = ctx.meta
        g = gy.reshape(-1, gy.shape[-1]).to(torch.float32)
        a, w = ctx.saved_tensors
        if meta.precision in _MX_SCHEME:
            s = _MX_SCHEME[meta.precision]
            dx = mx_fake_quantize(g, s, -1) @ mx_fake_quantize(w, s, 0)       # reduce over N
            dw = mx_fake_quantize(g, s, 0).t() @ mx_fake_quantize(a, s, 0)    # reduce over M
        else:
            qg, sg = meta.cast(g, "grad_output")
            sx, sw = ctx.scale_inv
            dx = (qg @ w) * float(np.float32(sg * sw))
            dw = (qg.t() @ a) * float(np.float32(sg * sx))
            meta.update(("grad_output",))  # TE: at the end of backward
        db = g.sum(0) if ctx.has_bias else None
        return dx.reshape(ctx.x_shape), dw, db, None, None


def fp8_linear(x, weight, bias=None, meta=None):
    """F.linear in mixp's FP8 (the autograd Function above); meta: an Fp8Meta (kept across
    calls for delayed scaling)."""
    if meta is None:
        meta = Fp8Meta("fp8-current")
    return _Fp8LinearFn.apply(x, weight, bias, meta, torch.is_grad_enabled())


class Fp8Linear(nn.Module):
    """An nn.Linear computing in mixp's FP8 or MX (as te.Linear under fp8_autocast). Shares the
    wrapped layer's parameters; the state_dict keys are the Linear's."""

    def __init__(self, linear: nn.Linear, precision="fp8", **recipe):
        super().__init__()
        if not isinstance(linear, nn.Linear):
            raise ValueError(f"Fp8Linear wraps an nn.Linear, not {type(linear).__name__}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.meta = Fp8Meta(precision, **recipe)

    def forward(self, x):
        if x.device.type != "cpu":
            raise ValueError("mixp.torch works on CPU tensors")
        return _Fp8LinearFn.apply(x, self.weight, self.bias, self.meta,
                                  self.training and torch.is_grad_enabled())

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias is not None}, precision={self.meta.precision}"


def _skipped(name, patterns):
    leaf = name.rsplit(".", 1)[-1]
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(leaf, p) for p in patterns)


def convert(model: nn.Module, precision="fp8", skip=("lm_head",), **recipe):
    """Replaces, in place, every nn.Linear of `model` whose dotted name (or last component) matches
    none of the `skip` patterns (fnmatch: "lm_head", "blocks.0.*") by an Fp8Linear; returns the
    model. Other recipe fields: amax_history_len=16, amax_compute_algo="max", margin=0,
    fp8_format="hybrid"."""
    Fp8Meta(precision, **recipe)  # validate once, before changing anything
    if isinstance(skip, str):
        skip = [skip]
    targets = [(n, m) for n, m in model.named_modules()
               if isinstance(m, nn.Linear) and n and not _skipped(n, skip)]
    for name, lin in targets:
        parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        setattr(parent, name.rsplit(".", 1)[-1], Fp8Linear(lin, precision, **recipe))
    return model


__all__ = ["Fp8Linear", "Fp8Meta", "PRECISIONS", "convert", "fp8_linear", "mx_fake_quantize"]
