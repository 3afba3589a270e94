#!/usr/bin/env python3
"""`mixp plan` against measured peaks (issue 15): for each model, shape and recipe it runs
`mixp plan --json` and then the real `mixp train --steps N --no-eval --json` of the same
configuration, and prints planned (probes, and the analytic model) and measured peak tensor
memory, and the probes' step and the estimate from GEMM throughput (measured by `mixp plan` just
before the run, so under the same load) against the measured median step, with their ratios
(docs/plan.md; results in docs/benchmarks.md).

    python3 bench/plan_validation.py --models gpt2 --shapes B8T256 \\
        --recipes fp32,bf16,bf16-pure,bf16+ckpt --data tokens.bin
"""
import argparse
import json
import os
import struct
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2")
    ap.add_argument("--shapes", default="B8T256")
    ap.add_argument("--recipes", default="fp32,bf16,bf16-pure,bf16+ckpt")
    ap.add_argument("--data", default="", help="token file (default: 300k random GPT-2 tokens)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="steps of the measured run (median)")
    ap.add_argument("--mixp", default=os.path.join(ROOT, "build", "release", "mixp"))
    a = ap.parse_args()
    data = a.data
    if not data:
        import random
        rng = random.Random(0)
        data = os.path.join(tempfile.mkdtemp(), "tokens.bin")
        n = 300_000
        with open(data, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
            f.write(struct.pack(f"<{n}H", *(rng.randrange(50257) for _ in range(n))))
    rows = []
    for model in a.models.split(","):
        for shape in a.shapes.split(","):
            B, T = shape[1:].split("T")
            for recipe in a.recipes.split(","):
                prec = recipe.split("+")[0]
                common = ["--model", model, "--data", data, "--batch", B, "--context", T,
                          "--precision", prec, "--threads", str(a.threads)]
                if recipe.endswith("+ckpt"):
                    common.append("--checkpointing")
                plan = run([a.mixp, "plan", *common, "--json"])
                real = run([a.mixp, "train", *common, "--steps", str(a.steps), "--no-eval", "--json"])
                row = {"model": model, "shape": shape, "recipe": recipe,
                       "planned_peak": plan["peak_bytes"], "measured_peak": real["peak_memory_bytes"],
                       "peak_ratio": plan["peak_bytes"] / real["peak_memory_bytes"],
                       "planned_ms": plan["step_ms"], "measured_ms": real["ms_per_step"],
                       "ms_ratio": plan["step_ms"] / real["ms_per_step"],
                       "analytic_peak": plan["analytic_peak_bytes"],
                       "analytic_ratio": plan["analytic_peak_bytes"] / real["peak_memory_bytes"],
                       "gemm_gflops": plan["gemm_gflops"],
                       "estimated_ms": plan["estimated_step_ms"],
                       "estimate_ratio": plan["estimated_step_ms"] / real["ms_per_step"]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\n{'model':12} {'shape':8} {'recipe':10} {'planned':>11} {'analytic':>11}"
          f" {'measured':>11} {'ratio':>6} {'ratio':>6} {'probe ms':>8} {'est. ms':>8}"
          f" {'real ms':>8} {'ratio':>6} {'ratio':>6} {'GEMM GF/s':>9}")
    for r in rows:
        print(f"{r['model']:12} {r['shape']:8} {r['recipe']:10} {r['planned_peak'] / 2**20:7.0f} MiB"
              f" {r['analytic_peak'] / 2**20:7.0f} MiB"
              f" {r['measured_peak'] / 2**20:7.0f} MiB {r['peak_ratio']:6.3f}"
              f" {r['analytic_ratio']:6.3f} {r['planned_ms']:8.0f} {r['estimated_ms']:8.0f}"
              f" {r['measured_ms']:8.0f} {r['ms_ratio']:6.2f} {r['estimate_ratio']:6.2f}"
              f" {r['gemm_gflops']:9.0f}")


if __name__ == "__main__":
    main()
