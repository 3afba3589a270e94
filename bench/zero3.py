#!/usr/bin/python3
"""ZeRO stage 3: peak memory per rank and step time (docs/distributed.md, "ZeRO stage 3"; results
in docs/benchmarks.md, "ZeRO stage 3"):

    /usr/bin/python3 bench/zero3.py --mixp build/release/mixp            # issue 33's shape
    /usr/bin/python3 bench/zero3.py --model gpt --width 64 --layers 4 --heads 2 --context 32 \\
        --batch 1 --precision fp32 --steps 4                             # a small shape

The default is issue 33's: GPT-2 124M (--model gpt2 at GPT-2's 50257-token vocabulary: 123.9M
parameters, since at --context 256 the position table has 256 rows, not GPT-2's 1024, which
would make 124.4M), bf16, batch 4 per rank, context 256. The vocabulary comes from the data (--data, an
llm.c token file, docs/data.md); without --data the bench writes one: 300,000 seeded
pseudo-random GPT-2 ids (bench/peers/gpt2_step_time.py write_tokens, seed 0, header vocabulary
0 = GPT-2's 50257). There is no GPT-2 BPE tokenizer offline, and the tokens' content does not
matter here: peak memory and step time depend on the shapes (vocabulary, batch, context), not on
which ids the batches hold. It runs, interleaved over --rounds:
  - memory: --ranks (default 4) ranks with --zero 3 and with --zero 0 (unsharded), and prints each
    rank-0 peak (peak_memory_bytes), their ratio (the target is <= 0.4) and `mixp plan
    --zero-stage 3 --ranks N --grad-comm W` at the same shape against the measured ZeRO-3 peak
    (and stage 0's plan against the unsharded peak: how far the plan's base is off at this
    shape);
  - speed: 2 ranks with --zero 3 (prefetch on, the default, and --zero3-prefetch 0) and with
    --zero 1 (the median ms/step of each run; the lowest over the rounds), their ratios (the
    target is <= 1.15), and where ZeRO 3's gathers spend the training thread's time per step
    (param_gather_ms_per_step and its wait, pack and unpack parts, from --json).
--speed-only skips the memory runs. --checkpointing checkpoints each block in every run and plan,
on both sides of each ratio (activation memory is what ZeRO does not shard).
Every rank runs 1 thread (--threads); the wire is --grad-comm (default bf16).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_mpi_yield_when_idle="1")


def shape_args(a):
    out = ["--model", a.model, "--data", a.data, "--precision", a.precision, "--batch",
           str(a.batch), "--context", str(a.context)]
    for flag in ("width", "layers", "heads"):
        if getattr(a, flag):
            out += ["--" + flag, str(getattr(a, flag))]
    if a.checkpointing:
        out.append("--checkpointing")
    return out


def train(a, ranks, zero, extra=()):
    cmd = ["mpirun", "--oversubscribe", "-np", str(ranks), a.mixp, "train"] + shape_args(a) + [
        "--steps", str(a.steps), "--no-eval", "--json", "--threads", str(a.threads),
        "--zero", str(zero), "--grad-comm", a.grad_comm] + list(extra)
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, check=True).stdout
    return json.JSONDecoder().raw_decode(out)[0]  # rank 0's summary


def plan(a, ranks, stage):
    cmd = [a.mixp, "plan"] + shape_args(a) + ["--zero-stage", str(stage), "--ranks", str(ranks),
                                              "--threads", str(a.threads), "--grad-comm",
                                              a.grad_comm, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mixp", default=os.path.join(HERE, "..", "build", "release", "mixp"))
    p.add_argument("--model", default="gpt2")
    p.add_argument("--data", default="", help="token file (default: GPT-2 ids, written here)")
    p.add_argument("--precision", default="bf16")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--width", type=int, default=0)
    p.add_argument("--layers", type=int, default=0)
    p.add_argument("--heads", type=int, default=0)
    p.add_argument("--grad-comm", default="bf16")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--speed-only", action="store_true")
    p.add_argument("--checkpointing", action="store_true",
                   help="checkpoint each block in every run and plan (both sides of each ratio)")
    a = p.parse_args()
    if not a.data:
        from gpt2_step_time import write_tokens
        a.data = os.path.join(tempfile.mkdtemp(), "tokens.bin")
        write_tokens(a.data, 300_000, 0)
    peak = {0: [], 3: []}
    runs = {"zero 3": ["--zero3-prefetch", "1"], "zero 3 no prefetch": ["--zero3-prefetch", "0"],
            "zero 1": []}
    ms = {k: [] for k in runs}
    split = {k: None for k in runs}
    for _ in range(a.rounds):
        if not a.speed_only:
            for z in (3, 0):
                j = train(a, a.ranks, z)
                peak[z].append(j["peak_memory_bytes"])
                params = j["parameters"]
        for k, extra in runs.items():
            j = train(a, 2, 1 if k == "zero 1" else 3, extra)
            ms[k].append(j["ms_per_step"])
            if split[k] is None or j["ms_per_step"] <= min(ms[k]):
                split[k] = j
    t = {k: min(v) for k, v in ms.items()}
    print(f"step, 2 ranks: " + ", ".join(f"{k} {v:.1f} ms" for k, v in t.items()) +
          f"; zero 3 / zero 1 {t['zero 3'] / t['zero 1']:.3f}, without prefetch "
          f"{t['zero 3 no prefetch'] / t['zero 1']:.3f}")
    for k in ("zero 3", "zero 3 no prefetch"):
        j = split[k]
        print(f"  {k} (its fastest run): {j['ms_per_step']:.1f} ms/step, gathers "
              f"{j['param_gather_ms_per_step']:.1f} ms (wait {j['param_gather_wait_ms_per_step']:.1f}"
              f", pack {j['param_pack_ms_per_step']:.1f}, unpack "
              f"{j['param_unpack_ms_per_step']:.1f}), comm {j['comm_ms_per_step']:.1f} ms, "
              f"{j['param_gathers_prefetched_last_step']} of {j['param_gathers_last_step']} "
              f"gathers prefetched")
    if a.speed_only:
        return
    p3, p0 = min(peak[3]), min(peak[0])
    planned = plan(a, a.ranks, 3)["peak_bytes"]
    planned0 = plan(a, a.ranks, 0)["peak_bytes"]
    print(f"model: {params / 1e6:.1f}M parameters")
    print(f"peak per rank, {a.ranks} ranks: zero 3 {p3 / 2**20:.2f} MiB, unsharded "
          f"{p0 / 2**20:.2f} MiB, ratio {p3 / p0:.3f}")
    print(f"mixp plan --zero-stage 3 --ranks {a.ranks}: {planned / 2**20:.2f} MiB, "
          f"{planned / p3:.3f}x the measured peak (--zero-stage 0: {planned0 / 2**20:.2f} MiB, "
          f"{planned0 / p0:.3f}x the unsharded peak)")


if __name__ == "__main__":
    main()
