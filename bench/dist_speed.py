#!/usr/bin/python3
"""Data-parallel speed on one machine (docs/distributed.md; results in docs/benchmarks.md):

    /usr/bin/python3 bench/dist_speed.py --mixp build/release/mixp --steps 20 --batch 16

measures, in one run and interleaved, the gpt in bf16 at the same global batch:
  mixp 1 rank x all cores threads            (the baseline)
  mixp N ranks x 1 thread (mpirun), for --grad-comm fp32 and bf16, and fp32 without overlapping
  the reduction with backward (--no-comm-overlap)
  PyTorch DDP, N processes x 1 thread, gloo, fp32 gradients and fp16_compress_hook
and prints ms/step and the ratios the issue asks for: mixp N x 1 samples/s over mixp 1 x N, and
mixp's step time over PyTorch DDP's.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def mixp(args, ranks, comm, global_batch, steps, extra=()):
    cmd = [args.mixp, "train", "--model", "gpt", "--precision", "bf16", "--steps", str(steps),
           "--no-eval", "--json"]
    if ranks == 1:
        cmd += ["--batch", str(global_batch), "--threads", str(os.cpu_count())]
    else:
        cmd = ["mpirun", "-np", str(ranks)] + cmd + ["--batch", str(global_batch // ranks),
                                                     "--threads", "1", "--grad-comm", comm]
        cmd += list(extra)
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, check=True).stdout
    return json.loads(out)["ms_per_step"]


def torch_ddp(args, ranks, hook, global_batch, steps):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "peers", "torch_ddp_peer.py"), "--ranks", str(ranks),
           "--batch", str(global_batch // ranks), "--steps", str(steps), "--hook", hook]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["ms_per_step"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mixp", default=os.path.join(HERE, "..", "build", "release", "mixp"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=16, help="global batch")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    n, b, s = args.ranks, args.batch, args.steps
    runs = {
        f"mixp 1x{os.cpu_count()} threads": lambda: mixp(args, 1, "fp32", b, s),
        f"mixp {n}x1 fp32 wire": lambda: mixp(args, n, "fp32", b, s),
        f"mixp {n}x1 bf16 wire": lambda: mixp(args, n, "bf16", b, s),
        f"torch DDP {n}x1 fp32 grads": lambda: torch_ddp(args, n, "none", b, s),
        f"torch DDP {n}x1 fp16 hook": lambda: torch_ddp(args, n, "fp16", b, s),
        f"mixp {n}x1 fp32, no overlap": lambda: mixp(args, n, "fp32", b, s, ["--no-comm-overlap"]),
    }
    best = {k: float("inf") for k in runs}
    for r in range(args.rounds):  # interleaved; the best of the rounds
        for k, f in runs.items():
            best[k] = min(best[k], f())
            print(f"round {r + 1}: {k}: {best[k]:.1f} ms/step", file=sys.stderr)
    keys = list(runs)
    print(f"gpt bf16, global batch {b}, {s} steps, best of {args.rounds} rounds (ms/step):")
    for k in keys:
        print(f"  {k:32s} {best[k]:8.1f}")
    base = best[keys[0]]
    print(f"samples/s, mixp {n}x1 (fp32 wire) over mixp 1x{os.cpu_count()}: {base / best[keys[1]]:.2f}")
    print(f"samples/s, mixp {n}x1 (bf16 wire) over mixp 1x{os.cpu_count()}: {base / best[keys[2]]:.2f}")
    print(f"step time, mixp fp32 wire / torch DDP fp32: {best[keys[1]] / best[keys[3]]:.2f}")
    print(f"step time, mixp bf16 wire / torch DDP fp16 hook: {best[keys[2]] / best[keys[4]]:.2f}")
    print(f"step time, mixp fp32 wire with overlap / without: {best[keys[1]] / best[keys[5]]:.2f}")


if __name__ == "__main__":
    main()
