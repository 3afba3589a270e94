#!/usr/bin/env python3
"""What looking inside a run costs (issue 14, docs/inspect.md "Overhead"): the whole training
time of `mixp train` without any inspection, with `--inspect every=N`, with `--profile`, and
(when --base is given) of a build without the kernel-observer hooks, measured interleaved in one
run so that drifting load hits all alike. Prints the median train_time_s of each and its ratio
to "off" (the targets: base/off within 1%, inspect <= 1.05, profile <= 1.10).

The whole training time, not the median step: --inspect every=100 costs three steps out of 300,
which a median would hide.

    python3 bench/inspect_overhead.py --mixp build/release/mixp --rounds 3
    python3 bench/inspect_overhead.py --mixp build/release/mixp --base /tmp/base/mixp \\
        --model-args "--model gpt --width 128 --layers 2 --heads 4 --context 64 --batch 8"
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile

DEFAULT_MODEL = "--model gpt --width 128 --layers 2 --heads 4 --context 64 --batch 8"


def child_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(binary, model_args, steps, threads, extra):
    """(train_time_s, process CPU seconds, final loss) of one run."""
    cmd = [binary, "train", *model_args.split(), "--steps", str(steps), "--threads",
           str(threads), "--no-eval", "--json", *extra]
    c0 = child_cpu_s()
    out = subprocess.run(cmd, capture_output=True, text=True)
    cpu = child_cpu_s() - c0
    if out.returncode != 0:
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr.strip()}")
    text = out.stdout
    r = json.loads(text[text.index("{"):])
    return r["train_time_s"], cpu, r["final_loss"]


def excess_of_inspected_steps(log_path, every, start=1):
    """From a --log file: the time the inspected steps took beyond their neighbours, as a
    fraction of the run. elapsed_s(k) - elapsed_s(k-1) holds step k and the callbacks of step
    k-1, so an inspected step k shows in the deltas of k and k+1; each is compared with the
    median delta of the 10 steps before it."""
    rows = [json.loads(line) for line in open(log_path)]
    t = [r["elapsed_s"] for r in rows]
    d = [t[0]] + [t[i] - t[i - 1] for i in range(1, len(t))]
    extra = 0.0
    for k in range(start, len(rows) + 1, every):  # 1-based steps
        ref = statistics.median(d[max(0, k - 12):max(1, k - 2)])
        for i in (k - 1, k):
            if i < len(d):
                extra += d[i] - ref
    return extra / t[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mixp", required=True, help="the mixp binary with inspection")
    ap.add_argument("--base", help="a mixp binary without the hooks (the commit before)")
    ap.add_argument("--model-args", default=DEFAULT_MODEL)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mixp_inspect_bench_")
    configs = [("off", a.mixp, [])]
    if a.base:
        configs.insert(0, ("base", a.base, []))
    configs += [
        (f"inspect every={a.every}", a.mixp,
         ["--inspect", f"every={a.every},out={os.path.join(tmp, 'stats.jsonl')}"]),
        ("profile", a.mixp, ["--profile"]),
    ]
    log = os.path.join(tmp, "steps.jsonl")
    configs[-2][2].extend(["--log", log])
    times = {name: [] for name, _, _ in configs}
    cpus = {name: [] for name, _, _ in configs}
    excess = []
    losses = {}
    for rnd in range(a.rounds):
        for name, binary, extra in configs:
            t, cpu, loss = run(binary, a.model_args, a.steps, a.threads, extra)
            times[name].append(t)
            cpus[name].append(cpu)
            losses[name] = loss
            line = f"round {rnd + 1} {name}: {t:.2f} s train, {cpu:.2f} s CPU (loss {loss:.6f})"
            if name.startswith("inspect"):
                excess.append(excess_of_inspected_steps(log, a.every))
                line += f", inspected steps' excess {100 * excess[-1]:.2f}% of the run"
            print(line, flush=True)
    off_t, off_c = statistics.median(times["off"]), statistics.median(cpus["off"])
    print(f"\n{a.model_args}, {a.steps} steps, {a.threads} thread(s), {a.rounds} rounds "
          "(medians)")
    print(f"{'config':<22} {'train s':>8} {'ratio':>7} {'CPU s':>8} {'ratio':>7}")
    for name, _, _ in configs:
        mt, mc = statistics.median(times[name]), statistics.median(cpus[name])
        print(f"{name:<22} {mt:>8.2f} {mt / off_t:>7.4f} {mc:>8.2f} {mc / off_c:>7.4f}")
    print(f"inspected steps' excess over their neighbours (same run): median "
          f"{100 * statistics.median(excess):.2f}% of the run")
    same = len({round(v, 12) for v in losses.values()}) == 1
    print("final losses identical across configs:", same)


if __name__ == "__main__":
    main()
