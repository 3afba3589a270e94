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


def train(model="mlp", data=None, precision="fp32", progress=None, **flags):
    """Trains like `mixp train --model MODEL --data DATA --precision PRECISION --FLAG VALUE ...`
    and returns the dict `mixp train --json` prints. Flags take the CLI's names with '_' for '-'
    (steps=20, batch=32, lr=1e-3, width=64, seed=1, no_eval=True, ...). progress: called after
    every optimizer step with a dict (step, total_steps, epoch, loss, loss_scale, skipped,
    grad_norm, lr, ms, elapsed_s). The GIL is released while training runs."""
    if not isinstance(model, str) or not isinstance(precision, str):
        raise ValueError("model and precision must be strings")
    if data is not None and not isinstance(data, str):
        data = str(data)  # a pathlib.Path
    if progress is not None and not callable(progress):
        raise ValueError("progress must be callable")
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
