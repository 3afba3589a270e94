#!/usr/bin/python3
"""What MPI_THREAD_MULTIPLE costs a data-parallel run that does not need it (docs/benchmarks.md,
"The cost of MPI_THREAD_MULTIPLE"):

    /usr/bin/python3 bench/mpi_thread_level.py --mixp build/release/mixp

mixp initialises MPI with MPI_THREAD_MULTIPLE (src/dist/mpi_group.cpp) so that ZeRO 3's prefetch
thread can call MPI beside the training thread. Every other run pays for whatever that level
costs in OpenMPI (a lock around its progress engine) without using it. MIXP_MPI_THREAD=funneled
asks for MPI_THREAD_FUNNELED instead. This bench runs the same `mpirun -np 2 mixp train --zero 1`
under both levels, interleaved over --rounds, and prints each run's median ms/step (from --json),
the best over the rounds per level, and funneled / multiple. Two transports:
  - shared memory (the default on one host: the gradients do not go through MPI);
  - MIXP_SHARED_MEMORY=0 (every gradient byte through MPI, as between hosts), where a progress
    lock would show most.
The model is --model gpt at a small width by default (communication a large share of the step),
or GPT-2 124M with --gpt2 (needs --data, GPT-2 ids; bench/zero3.py writes them).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_mpi_yield_when_idle="1")


def run(a, level, shm):
    cmd = ["mpirun", "--oversubscribe", "-np", "2", "-x", "MIXP_MPI_THREAD=" + level, "-x",
           "MIXP_SHARED_MEMORY=" + shm, a.mixp, "train"] + a.shape + [
               "--steps", str(a.steps), "--no-eval", "--json", "--threads", "1", "--zero", "1",
               "--grad-comm", a.grad_comm]
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, check=True).stdout
    return json.JSONDecoder().raw_decode(out)[0]["ms_per_step"]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mixp", default=os.path.join(HERE, "..", "build", "release", "mixp"))
    p.add_argument("--gpt2", action="store_true", help="GPT-2 124M, B4 T256, bf16 (needs --data)")
    p.add_argument("--data", default="")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--grad-comm", default="bf16")
    a = p.parse_args()
    if a.gpt2:
        if not a.data:
            sys.exit("--gpt2 needs --data (GPT-2 ids: bench/zero3.py writes them)")
        a.shape = ["--model", "gpt2", "--data", a.data, "--precision", "bf16", "--batch", "4",
                   "--context", "256"]
    else:
        a.shape = ["--model", "gpt", "--width", "128", "--layers", "4", "--heads", "4",
                   "--context", "64", "--batch", "8", "--precision", "bf16"]
    print("shape:", " ".join(a.shape), f"--zero 1 --grad-comm {a.grad_comm}, 2 ranks x 1 thread")
    for shm, name in (("1", "shared memory"), ("0", "MPI (MIXP_SHARED_MEMORY=0)")):
        best = {}
        for r in range(a.rounds):
            for level in ("multiple", "funneled"):
                ms = run(a, level, shm)
                best[level] = min(best.get(level, ms), ms)
                print(f"  round {r}: {name:28s} {level:9s} {ms:9.2f} ms/step", flush=True)
        print(f"{name}: multiple {best['multiple']:.2f} ms, funneled {best['funneled']:.2f} ms, "
              f"funneled / multiple = {best['funneled'] / best['multiple']:.3f}")


if __name__ == "__main__":
    main()
