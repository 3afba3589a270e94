#!/usr/bin/python3
"""Data-parallel equivalence (docs/distributed.md; results in docs/benchmarks.md):

    /usr/bin/python3 bench/dist_equivalence.py --mixp build/release/mixp --steps 50

trains the default gpt for --steps steps as 1 rank x batch 16, 2 ranks x batch 8 and 4 ranks x
batch 4 (--oversubscribe), fp32 gradients on the wire, and prints the largest relative difference
of the per-step losses and the largest absolute (and relative to the weight's magnitude)
difference of the final weights, against the single process.
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


def run(args, ranks, out):
    cmd = [args.mixp, "train", "--model", "gpt", "--steps", str(args.steps), "--no-eval",
           "--batch", str(args.batch // ranks), "--threads", "1" if ranks > 1 else "2",
           "--optimizer", args.optimizer,
           "--log", os.path.join(out, f"{ranks}.jsonl"), "--save", os.path.join(out, str(ranks))]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    subprocess.run(cmd, env=ENV, check=True, capture_output=True)
    losses = [json.loads(l)["loss"] for l in open(os.path.join(out, f"{ranks}.jsonl"))]
    return losses, weights(os.path.join(out, str(ranks)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mixp", default="build/release/mixp")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=16, help="global batch")
    p.add_argument("--optimizer", default="adamw")
    args = p.parse_args()
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
