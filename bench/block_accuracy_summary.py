#!/usr/bin/python3
"""Summarizes bench/block_accuracy.sh's results: per configuration the mean, sample standard
deviation and min..max over the seeds of the final validation loss (`mixp train --json`'s
`val_loss`); the ratio of the mean to bf16's mean and, for an ablation `<recipe>-no-<component>`,
to its full recipe's mean ("x full"); whether the min..max overlaps bf16's; the paired ratios
(each seed's loss over bf16's of the same seed: mean, min..max and the standard error of the mean,
and for an ablation the same against its full recipe); whether a paired mean is resolved (more than
two standard errors from 1); and issue 32's bars (fp8-block within 0.5% of bf16, nvfp4 within 1.5%;
a loss below bf16's passes). A run whose loss is missing
or not finite is counted as diverged; a run that failed (an .err file, no result) as failed; one
still being written (an .err and a .json.tmp) as running. None is dropped silently, and a
configuration with a diverged, failed or running seed gets no mean.

    bench/block_accuracy_summary.py OUT [--json]
"""
import glob
import json
import math
import os
import re
import statistics
import sys

# Issue 32's bars, relative to bf16's mean final validation loss.
BARS = {"fp8-block": 0.005, "nvfp4": 0.015}


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def load(out):
    study = {}
    path = os.path.join(out, "study.json")
    if os.path.exists(path):
        with open(path) as f:
            study = json.load(f)
    runs = {}  # config -> {seed: result dict or None (failed)}
    running = {}  # config -> [seed]
    name_re = re.compile(r"^(?P<config>.+)\.s(?P<seed>\d+)\.(?P<ext>json|err)$")
    for p in sorted(glob.glob(os.path.join(out, "*.s*.*"))):
        m = name_re.match(os.path.basename(p))
        if not m:
            continue
        config, seed = m["config"], int(m["seed"])
        if m["ext"] == "json":
            try:
                with open(p) as f:
                    runs.setdefault(config, {})[seed] = json.load(f)
            except (OSError, ValueError):
                runs.setdefault(config, {})[seed] = {"unreadable": True}
        elif not os.path.exists(p[:-len("err")] + "json.tmp"):
            runs.setdefault(config, {}).setdefault(seed, None)
        else:  # still running: stderr goes to the .err file while the result is written
            running.setdefault(config, []).append(seed)
    order = study.get("configs", "").split() or sorted(runs)
    order += [c for c in sorted(runs) if c not in order]
    return study, runs, running, order


def summarize(out):
    study, runs, running, order = load(out)
    rows = []
    for config in order:
        seeds = runs.get(config, {})
        losses, diverged, failed, ms, by_seed = [], [], [], [], {}
        precision = layers = None
        for seed, r in sorted(seeds.items()):
            if r is None or r.get("unreadable"):
                failed.append(seed)
                continue
            precision = r.get("precision", precision)
            layers = r.get("layer_precision", layers)
            loss = r.get("val_loss")
            if finite(loss) and finite(r.get("final_loss")):
                losses.append(float(loss))
                by_seed[seed] = float(loss)
            else:
                diverged.append(seed)
            if finite(r.get("ms_per_step")):
                ms.append(float(r["ms_per_step"]))
        complete = bool(losses) and not diverged and not failed and not running.get(config)
        rows.append({
            "config": config, "precision": precision, "layer_precision": layers,
            "seeds": sorted(seeds),
            "losses": losses, "diverged_seeds": diverged, "failed_seeds": failed,
            "running_seeds": sorted(running.get(config, [])),
            "mean": statistics.fmean(losses) if complete else None,
            "std": statistics.stdev(losses) if complete and len(losses) > 1 else None,
            "min": min(losses) if losses else None, "max": max(losses) if losses else None,
            "ms_per_step": statistics.median(ms) if ms else None, "by_seed": by_seed,
        })
    base = next((r for r in rows if r["config"] == "bf16"), None)
    base_mean = base["mean"] if base else None
    means = {r["config"]: r["mean"] for r in rows}
    # Paired: each seed's loss over bf16's of the same seed (the same initialisation and batches),
    # which removes the seed-to-seed spread that both runs share.
    base_seeds = base["by_seed"] if base else {}
    by_config = {r["config"]: r for r in rows}
    for r in rows:
        r["paired_ratios"] = paired(r["by_seed"], base_seeds)
        p = list(r["paired_ratios"].values())
        r["paired_mean"] = statistics.fmean(p) if p else None
        r["paired_min"], r["paired_max"] = (min(p), max(p)) if p else (None, None)
        r["paired_se"], r["paired_resolved"] = standard_error(p)
        # An ablation against its full recipe, seed by seed: the component's effect with the
        # initialisation and batches held fixed.
        full = r["config"].split("-no-")[0] if "-no-" in r["config"] else None
        q = list(paired(r["by_seed"], by_config[full]["by_seed"]).values()) if full in by_config \
            else []
        r["paired_to_full_mean"] = statistics.fmean(q) if q else None
        r["paired_to_full_se"], r["paired_to_full_resolved"] = standard_error(q)
    for r in rows:
        r["ratio"] = r["mean"] / base_mean if r["mean"] is not None and base_mean else None
        # An ablation "<recipe>-no-<component>" against its full recipe: the component's effect.
        full = r["config"].split("-no-")[0] if "-no-" in r["config"] else None
        r["ablation_of"] = full if full in means else None
        r["ratio_to_full"] = (r["mean"] / means[full] if r["ablation_of"] and r["mean"] is not None
                              and means[full] else None)
        bar = BARS.get(r["config"])
        r["bar"] = bar
        if bar is None:
            r["verdict"] = None
        elif r["ratio"] is None:
            r["verdict"] = "n/a"
        else:
            r["verdict"] = "pass" if r["ratio"] - 1 <= bar else "fail"
        # Inside the seeds' spread: this configuration's min..max overlaps bf16's.
        r["overlaps_bf16"] = (None if base is None or base["min"] is None or r["min"] is None
                              else r["min"] <= base["max"] and base["min"] <= r["max"])
    return study, rows


def paired(by_seed, ref_by_seed):
    """Each seed's loss over the reference's loss with the same seed."""
    return {str(s): v / ref_by_seed[s] for s, v in sorted(by_seed.items()) if ref_by_seed.get(s)}


def standard_error(ratios):
    """(standard error of the mean of the paired ratios, whether the mean is more than two of them
    from 1: a difference the seeds resolve); (None, None) with fewer than two seeds."""
    if len(ratios) < 2:
        return None, None
    se = statistics.stdev(ratios) / math.sqrt(len(ratios))
    return se, abs(statistics.fmean(ratios) - 1) > 2 * se


def fmt(x, spec):
    """x formatted by spec, or "-" in the same width when there is no value."""
    if x is not None:
        return format(x, spec)
    width = spec.split(".")[0]
    return "-".rjust(int(width)) if width.isdigit() else "-"


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: block_accuracy_summary.py OUT [--json]")
    out = sys.argv[1]
    study, rows = summarize(out)
    if "--json" in sys.argv[2:]:
        print(json.dumps({"study": study, "rows": rows}, indent=1))
        return
    if study:
        g = study.get
        print(f"gpt width {g('width')}, {g('layers')} layers, {g('heads')} heads, "
              f"context {g('context')}, batch {g('batch')}, {g('steps')} steps, lr {g('lr')}, "
              f"warmup {g('warmup')}, seeds {g('seeds')}, data {g('data')}")
    print(f"{'config':16} {'n':>2} {'val loss mean':>13} {'std':>7} {'min..max':>15} "
          f"{'x bf16':>7} {'bar':>6} {'verdict':>7} {'overlap':>7} {'x full':>7} "
          f"{'paired x bf16':>21} {'+-se':>7} {'paired x full':>14} {'ms/step':>8}  note")
    for r in rows:
        note = []
        if r["diverged_seeds"]:
            note.append("diverged: seeds " + ",".join(map(str, r["diverged_seeds"])))
        if r["failed_seeds"]:
            note.append("failed: seeds " + ",".join(map(str, r["failed_seeds"])))
        if r["running_seeds"]:
            note.append("running: seeds " + ",".join(map(str, r["running_seeds"])))
        rng = f"{r['min']:.4f}..{r['max']:.4f}" if r["min"] is not None else "-"
        ov = {None: "-", True: "yes", False: "no"}[r["overlaps_bf16"]]
        paired = (f"{r['paired_mean']:.4f} ({r['paired_min']:.4f}..{r['paired_max']:.4f})"
                  if r["paired_mean"] is not None else "-")
        se = fmt(r["paired_se"], "7.4f") + ("*" if r["paired_resolved"] else " ")
        to_full = "-"
        if r["paired_to_full_mean"] is not None:
            to_full = fmt(r["paired_to_full_mean"], ".4f")
            if r["paired_to_full_se"] is not None:  # two seeds or more
                to_full += "+-" + fmt(r["paired_to_full_se"], ".4f")
                to_full += "*" if r["paired_to_full_resolved"] else ""
        bar = f"{r['bar'] * 100:.1f}%" if r["bar"] is not None else "-"
        print(f"{r['config']:16} {len(r['losses']):>2} {fmt(r['mean'], '13.4f')} "
              f"{fmt(r['std'], '7.4f')} {rng:>15} {fmt(r['ratio'], '7.4f')} {bar:>6} "
              f"{r['verdict'] or '-':>7} {ov:>7} "
              f"{fmt(r['ratio_to_full'], '7.4f')} {paired:>21} {se:>8} {to_full:>14} "
              f"{fmt(r['ms_per_step'], '8.1f')}  {'; '.join(note)}")
    print("paired: each seed's loss over bf16's (x full: over its full recipe's) with the same seed; "
          "+-se: the standard error of that mean; *: more than two standard errors from 1")


if __name__ == "__main__":
    main()
