#!/usr/bin/env python3
"""mixp vs PyTorch step time, measured in one run on the same machine (issue targets: mixp fp32
at least 1.25x faster than PyTorch CPU on mlp, cnn and gpt; bf16 no slower than PyTorch autocast).

For each model and precision it runs `mixp train --steps N --no-eval --json` and
`torch_peer.py --steps N --json` alternately (`--rounds` times, so drifting load hits both
sides alike) and prints the median ms/step of each side and the ratio PyTorch/mixp (> 1 means
mixp is faster). Same model, batch, optimizer (AdamW, PyTorch defaults) and thread count.

    /usr/bin/python3 bench/peers/compare_step_time.py --models mlp,cnn,gpt --precisions fp32 --threads 2

Note which BLAS PyTorch loaded (the JSON's math_libraries): Debian's python3-torch uses whatever
libblas.so.3 the alternatives system points at; scripts/bootstrap.sh installs OpenBLAS
(libopenblas0-pthread), PyTorch's fastest CPU fp32 GEMM here, so the comparison is against it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
STEPS = {"mlp": 60, "cnn": 20, "gpt": 6}


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"command failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr.strip()}")
    text = out.stdout.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # a progress line before the object
        return json.loads(text.splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,cnn,gpt")
    ap.add_argument("--precisions", default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="timed steps per run (default: per model)")
    ap.add_argument("--mixp", default=os.path.join(ROOT, "build", "release", "mixp"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    rows = []
    for model in args.models.split(","):
        for prec in args.precisions.split(","):
            steps = args.steps or STEPS[model]
            mixp_ms, torch_ms, blas = [], [], None
            for _ in range(args.rounds):
                m = run_json([args.mixp, "train", "--model", model, "--precision", prec, "--steps", str(steps + 2),
                              "--no-eval", "--json", "--threads", str(args.threads)], env)
                mixp_ms.append(m["ms_per_step"])
                t = run_json([sys.executable, os.path.join(HERE, "torch_peer.py"), "--model", model, "--precision", prec,
                              "--steps", str(steps), "--warmup", "2", "--threads", str(args.threads), "--json"], env)
                if t.get("status") == "unsupported":
                    torch_ms = None
                    break
                torch_ms.append(t["ms_per_step"])
                blas = t.get("math_libraries", blas)
            mm = statistics.median(mixp_ms)
            tm = statistics.median(torch_ms) if torch_ms else None
            rows.append({"model": model, "precision": prec, "threads": args.threads, "mixp_ms_per_step": mm,
                         "torch_ms_per_step": tm, "torch_over_mixp": (tm / mm) if tm else None,
                         "rounds": args.rounds, "torch_math_libraries": blas})
    if args.json:
        print(json.dumps({"results": rows}))
        return
    print(f"{'model':6} {'prec':6} {'mixp ms':>9} {'torch ms':>9} {'torch/mixp':>10}")
    for r in rows:
        tm = f"{r['torch_ms_per_step']:9.2f}" if r["torch_ms_per_step"] else "      n/a"
        ratio = f"{r['torch_over_mixp']:9.2f}x" if r["torch_over_mixp"] else "       n/a"
        print(f"{r['model']:6} {r['precision']:6} {r['mixp_ms_per_step']:9.2f} {tm} {ratio}")
    print(f"PyTorch math libraries: {rows[-1]['torch_math_libraries']}")


if __name__ == "__main__":
    main()
