"""mixp.train: a training run through the library `mixp train` calls (python/src/engine_module.cpp)."""
from __future__ import annotations

import json

from . import _mixp

# Keys of the model's shape (nested under "model" in train_config.h's JSON) and the CLI flags whose
# JSON key differs.
_MODEL_KEYS = {"width", "layers", "heads", "context", "vocab", "mlp_width", "checkpointing"}
_ALIASES = {"warmup": "warmup_steps", "log": "log_path", "save": "save_dir",
            "resume": "resume_dir", "model_seed": None}


def _config(model, data, precision, flags):
    cfg = json.loads(_mixp.default_train_config())
    known = set(cfg) - {"model"}
    cfg["model"]["name"] = model
    if data is not None:
        cfg["data"] = data
    cfg["precision"] = precision
    for key, value in flags.items():
        if key == "no_eval":
            cfg["evaluate"] = not value
            continue
        key = _ALIASES.get(key, key) or key
        if key in _MODEL_KEYS:
            cfg["model"][key] = value
        elif key == "model_seed":
            cfg["model"]["seed"] = value
        elif key in known:
            cfg[key] = value
        else:
            raise ValueError(f"train: unknown flag {key!r}; known: "
                             + ", ".join(sorted(known | _MODEL_KEYS | {"no_eval", "warmup"})))
    return cfg


def train(model="mlp", data=None, precision="fp32", progress=None, on_step=None, **flags):
    """Trains like `mixp train --model MODEL --data DATA --precision PRECISION --FLAG VALUE ...`
    and returns the dict `mixp train --json` prints. Flags take the CLI's names with '_' for '-'
    (steps=20, batch=32, lr=1e-3, width=64, seed=1, no_eval=True, ...). progress: called after
    every optimizer step with a dict (step, total_steps, epoch, loss, loss_scale, skipped,
    grad_norm, lr, ms, elapsed_s); on_step is the same (the name Keras/Lightning-style callbacks
    use; give one of the two). The GIL is released while training runs and held for the
    callback; an exception the callback raises stops the run after that step and is re-raised
    here."""
    if not isinstance(model, str) or not isinstance(precision, str):
        raise ValueError("model and precision must be strings")
    if data is not None and not isinstance(data, str):
        data = str(data)  # a pathlib.Path
    if on_step is not None:
        if progress is not None:
            raise ValueError("train: give progress or on_step, not both")
        progress = on_step
    if progress is not None and not callable(progress):
        raise ValueError("progress/on_step must be callable")
    cfg = _config(model, data, precision, flags)
    return json.loads(_mixp.train(json.dumps(cfg), progress))


def compare(model="mlp", data=None, precisions=None, seeds=1, out=None, force=False,
            timing_rounds=5, progress=None, **flags):
    """The precision study, as `mixp compare --json` runs and prints it: the same model trained
    in each of `precisions` (None: the CLI's default study), `seeds` seeds each; returns the dict
    of results.json. out: a folder for results.json and report.html (None: write nothing).
    Without steps= or epochs=, one epoch, as the CLI. progress: called with a dict per event
    (kind run_begin / step / evaluate / run_end, run_index, run_count, precision, seed, step)."""
    if isinstance(precisions, str):
        precisions = [p for p in precisions.split(",") if p]
    if precisions is not None and not all(isinstance(p, str) for p in precisions):
        raise ValueError("precisions must be a list of names")
    if progress is not None and not callable(progress):
        raise ValueError("progress must be callable")
    if "steps" in flags and "epochs" in flags:
        raise ValueError("compare: steps and epochs both given; give one")
    if "steps" not in flags and "epochs" not in flags:
        flags["epochs"] = 1
    cfg = _config(model, None if data is None else str(data), "fp32", flags)
    return json.loads(_mixp.compare(json.dumps(cfg), list(precisions or []), seeds,
                                    "" if out is None else str(out), bool(force),
                                    timing_rounds, progress))


# `mixp plan`'s flags besides --model/--model-shape/--data/--precision (tools/mixp/cmd_plan.cpp).
_PLAN_FLAGS = {"batch", "grad_accum", "optimizer", "checkpointing", "optimizer_in_backward",
               "width", "layers", "heads", "context", "mlp_width", "ffn", "threads", "seed"}
# The counts the CLI range-checks as >= 1 (tools/mixp/flag_range.cpp shared_flag_ranges).
_PLAN_POSITIVE = {"batch", "grad_accum", "threads", "width", "layers", "heads", "context",
                  "mlp_width", "vocab"}


def plan(model=None, data=None, precision="fp32", model_shape=None, family="gpt2", vocab=None,
         zero_stage=0, ranks=1, gemm_record=False, **flags):
    """Plans like `mixp plan --json` with the same flags and returns its dict: model=... (with
    data=..., probed by training two small copies) or model_shape=... (a preset such as
    "llama-7b", or "custom" with family, layers, width, heads, vocab; analytic). Flags: batch,
    grad_accum, optimizer, checkpointing, optimizer_in_backward, width, layers, heads, context,
    mlp_width (ffn), threads, seed. The GIL is released while the probes run."""
    if (model is None) == (model_shape is None):
        raise ValueError("plan: give model or model_shape (not both)")
    if model_shape is not None and data is not None:
        raise ValueError("plan: model_shape plans from the shape: data is not read")
    for name, value in (("model", model), ("model_shape", model_shape), ("precision", precision),
                        ("family", family)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"plan: {name} must be a string")
    if "ffn" in flags:
        if "mlp_width" in flags:
            raise ValueError("plan: give mlp_width or ffn, not both")
        flags["mlp_width"] = flags.pop("ffn")
    for key in flags:
        if key not in _PLAN_FLAGS:
            raise ValueError(f"plan: unknown flag {key!r}; known: "
                             + ", ".join(sorted(_PLAN_FLAGS | {"data", "precision", "model_shape",
                                                              "family", "vocab", "zero_stage",
                                                              "ranks", "gemm_record"})))
    given = dict(flags)
    if vocab is not None:
        given["vocab"] = vocab
    for key, value in given.items():
        if key in _PLAN_POSITIVE and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
            raise ValueError(f"plan: {key} must be a positive integer, got {value!r}")
    for key, value in (("zero_stage", zero_stage), ("ranks", ranks)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"plan: {key} must be an integer, got {value!r}")
    if not -2**31 <= zero_stage < 2**31 or not -2**31 <= ranks < 2**31:
        raise ValueError("plan: zero_stage or ranks out of range")
    cfg = _config(model or "", None if data is None else str(data), precision, flags)
    shape_fields = [k for k in ("layers", "width", "heads", "mlp_width", "vocab", "context", "batch")
                    if k in given]
    return json.loads(_mixp.plan(json.dumps(cfg), model_shape or "", family, vocab or 0,
                                 shape_fields, zero_stage, ranks, bool(gemm_record)))
