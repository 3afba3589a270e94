#!/usr/bin/python3
"""Generates optim_fixture.json: torch.optim.SGD/Adam/AdamW trajectories on fixed parameters and
gradients, for tests/optim/test_optimizers_vs_torch.cpp.

Run with Debian's /usr/bin/python3 (python3-torch, CPU):  /usr/bin/python3 gen_optim_fixture.py
Deterministic: parameters and per-step gradients come from torch.Generator seeds written below,
and are stored in the file, so the C++ test never needs torch. Everything is fp32, as in training.

Each case: {"name", "optimizer": "sgd"|"adam"|"adamw", "options": {...torch kwargs...},
"lrs": [lr of each step] (a changing lr checks that lr is read at every step),
"params": [{"shape", "init": [...]}], "grads": [[per-param flat grads] per step],
"expected": [[per-param flat values after the step] per step],
"state": {"<param index>.<slot>": flat values after the last step}}.
"""
import json
import os

import torch

STEPS = 6
SHAPES = [[3, 4], [5]]


def case(name, optimizer, options, lrs=None, none_grad_step=None):
    g = torch.Generator().manual_seed(sum(map(ord, name)))  # a fixed seed per case
    params = [torch.randn(s, generator=g, dtype=torch.float32).requires_grad_() for s in SHAPES]
    init = [p.detach().flatten().tolist() for p in params]
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[optimizer]
    opt = cls(params, **options)
    lrs = lrs or [options["lr"]] * STEPS
    grads, expected = [], []
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = lrs[step]
        step_grads = []
        for i, p in enumerate(params):
            if none_grad_step == step and i == 1:
                p.grad = None  # this parameter has no gradient at this step: torch skips it
                step_grads.append(None)
                continue
            gr = (torch.randn(p.shape, generator=g, dtype=torch.float32) * 0.5)
            p.grad = gr.clone()
            step_grads.append(gr.flatten().tolist())
        opt.step()
        grads.append(step_grads)
        expected.append([p.detach().flatten().tolist() for p in params])
    state = {}
    for i, p in enumerate(params):
        for k, v in opt.state[p].items():
            if torch.is_tensor(v) and v.numel() == p.numel():
                state[f"{i}.{k}"] = v.flatten().tolist()
            elif k == "step":
                state[f"{i}.step"] = float(v)
    return {"name": name, "optimizer": optimizer, "options": options, "lrs": lrs,
            "params": [{"shape": s, "init": v} for s, v in zip(SHAPES, init)],
            "grads": grads, "expected": expected, "state": state}


def main():
    cases = [
        case("sgd_plain", "sgd", {"lr": 0.1}),
        case("sgd_momentum", "sgd", {"lr": 0.05, "momentum": 0.9}),
        case("sgd_momentum_wd", "sgd", {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}),
        case("sgd_nesterov", "sgd", {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.001}),
        case("sgd_dampening", "sgd", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3}),
        case("adam", "adam", {"lr": 1e-2}),
        case("adam_wd", "adam", {"lr": 1e-2, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
        case("adamw", "adamw", {"lr": 1e-2}),  # torch default weight_decay 0.01
        case("adamw_wd", "adamw", {"lr": 3e-3, "weight_decay": 0.2}, lrs=[3e-3, 2e-3, 1e-3, 5e-4, 2e-4, 1e-4]),
        case("adamw_skip", "adamw", {"lr": 1e-2}, none_grad_step=2),
        case("sgd_momentum_skip", "sgd", {"lr": 0.05, "momentum": 0.9}, none_grad_step=0),
    ]
    out = {"generator": "tests/golden/optim/gen_optim_fixture.py", "torch": torch.__version__, "steps": STEPS,
           "cases": cases}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_fixture.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases")


if __name__ == "__main__":
    main()
