#!/usr/bin/python3
"""Data-parallel equivalence (docs/distributed.md; results in docs/benchmarks.md):

    /usr/bin/python3 bench/dist_equivalence.py --mixp build/release/mixp --steps 50

trains the default gpt for --steps steps as 1 rank x batch 16, 2 ranks x batch 8 and 4 ranks x
batch 4 (--oversubscribe), fp32 gradients on the wire, and prints the largest relative difference
of the per-step losses and the largest absolute (and relative to the weight's magnitude)
difference of the final weights, against the single process.

    /usr/bin/python3 bench/dist_equivalence.py --mixp build/release/mixp --steps 50 --detail

shows where the difference comes from: against runs of one process that change only the order
of the gradient sums (--grad-accum 2, 1 thread), the parameters that differ most, and how the
difference grows with the number of steps.
"""
import argparse
import json
import os
import struct
import subprocess
import tempfile

import numpy as np

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_mpi_yield_when_idle="1")


def weights(path):
    d = open(os.path.join(path, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    return {k: np.frombuffer(d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32)
            for k, v in h.items() if k != "__metadata__"}


def run(args, ranks, out, steps=None, threads=None, accum=1, tag=None):
    """ranks x (batch / ranks) for `steps` steps; with accum > 1 (one rank), micro-batches of
    batch / accum. Returns the per-step losses and the final weights."""
    steps = steps or args.steps
    tag = tag or f"{ranks}-{steps}-{threads}-{accum}"
    if tag in _runs:
        return _runs[tag]
    threads = threads or (1 if ranks > 1 else 2)
    cmd = [args.mixp, "train", "--model", "gpt", "--steps", str(steps), "--no-eval",
           "--batch", str(args.batch // ranks // accum), "--threads", str(threads),
           "--optimizer", args.optimizer, "--grad-accum", str(accum),
           "--log", os.path.join(out, f"{tag}.jsonl"), "--save", os.path.join(out, tag)]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    subprocess.run(cmd, env=ENV, check=True, capture_output=True)
    losses = [json.loads(l)["loss"] for l in open(os.path.join(out, f"{tag}.jsonl"))]
    _runs[tag] = losses, weights(os.path.join(out, tag))
    return _runs[tag]


_runs = {}  # tag -> (losses, weights): each configuration runs once


def worst(a, b):
    """The largest absolute weight difference, and the parameter it is in."""
    d = {k: float(np.max(np.abs(a[k] - b[k]))) for k in a}
    k = max(d, key=d.get)
    return d[k], k


def detail(args, out):
    """Where the AdamW difference comes from (docs/distributed.md, "Equivalence with one
    process"): the same comparison against other single-process runs that only change the
    summation order, the parameters that differ most, and how the difference grows with steps."""
    base_l, base_w = run(args, 1, out)
    print(f"max |weight difference| after {args.steps} steps against 1 rank x batch {args.batch}, 2 threads:")
    # One process with another thread count sums its gradients in another order too: the floor
    # that any other summation order (the ranks' split of the batch) is measured against.
    others = [("2 ranks x batch {}".format(args.batch // 2), dict(ranks=2)),
              ("1 rank x batch {}, 1 thread".format(args.batch), dict(ranks=1, threads=1))]
    for name, kw in others:
        _, w = run(args, out=out, **kw)
        dw, k = worst(base_w, w)
        print(f"  {name:34s} {dw:.2e} (in {k})")
    _, w2 = run(args, 2, out)
    d = sorted(((float(np.max(np.abs(base_w[k] - w2[k]))), k) for k in base_w), reverse=True)
    print("the parameters that differ most (2 ranks against 1):")
    for v, k in d[:6]:
        print(f"  {k:40s} {v:.2e}  (|w| up to {float(np.max(np.abs(base_w[k]))):.3f})")
    # The attention's qkv bias is [query | key | value]: the key bias has no effect on the
    # softmax (it adds the same number to a row's scores), so its gradient is zero but for
    # rounding, and Adam turns that noise into steps of about lr.
    for k in sorted(base_w):
        if not k.endswith("attn.qkv.bias"):
            continue
        diff = np.abs(base_w[k] - w2[k]).reshape(3, -1).max(axis=1)
        print(f"  {k:40s} query {diff[0]:.2e}, key {diff[1]:.2e}, value {diff[2]:.2e}")
    print("growth with steps (2 ranks against 1 rank, same steps):")
    for steps in args.growth:
        _, a = run(args, 1, out, steps=steps)
        _, b = run(args, 2, out, steps=steps)
        dw, k = worst(a, b)
        print(f"  {steps:3d} steps: {dw:.2e} (in {k})")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mixp", default="build/release/mixp")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=16, help="global batch")
    p.add_argument("--optimizer", default="adamw")
    p.add_argument("--detail", action="store_true",
                   help="where the difference comes from: reference runs, parameters, growth")
    p.add_argument("--growth", default="1,2,5,10,20,50",
                   help="with --detail: the step counts of the growth table")
    args = p.parse_args()
    args.growth = [int(x) for x in args.growth.split(",")]
    if args.detail:
        with tempfile.TemporaryDirectory() as out:
            detail(args, out)
        return
    with tempfile.TemporaryDirectory() as out:
        base_l, base_w = run(args, 1, out)
        print(f"gpt fp32, {args.optimizer}, global batch {args.batch}, {args.steps} steps, against 1 rank:")
        for n in (2, 4):
            l, w = run(args, n, out)
            dl = max(abs(a - b) / abs(a) for a, b in zip(base_l, l))
            dw = max(float(np.max(np.abs(base_w[k] - w[k]))) for k in base_w)
            rw = max(float(np.max(np.abs(base_w[k] - w[k]) / (np.abs(base_w[k]) + 1e-3))) for k in base_w)
            print(f"  {n} ranks x batch {args.batch // n}: losses max rel diff {dl:.2e}, "
                  f"weights max abs diff {dw:.2e} (max |diff| / (|w| + 1e-3): {rw:.2e})")


if __name__ == "__main__":
    main()
