#!/usr/bin/python3
"""Summarizes bench/amp_train_compare.sh output: per (who, model, precision) the median over the
rounds of ms/step (wall) and cpu ms/step (process CPU time), the ratios the mixed-precision
targets name, and the peak tracked memory."""
import json
import statistics
import sys

runs = [json.loads(line) for line in sys.stdin if line.strip()]
by = {}
for r in runs:
    by.setdefault((r["who"], r["model"], r["precision"]), []).append(r)


def med(key, field):
    vals = [x[field] for x in by.get(key, []) if x.get(field) is not None]
    return statistics.median(vals) if vals else float("nan")


print(f"{'who':6} {'model':5} {'precision':10} {'n':>2} {'wall ms':>8} {'x fp32':>6} "
      f"{'cpu ms':>8} {'x fp32':>6} {'peak MB':>8} {'x fp32':>6}")
for key in sorted(by):
    who, model, prec = key
    base = ("mixp", model, "fp32")
    mem = by[key][0].get("peak_memory_bytes")
    mem32 = by.get(base, [{}])[0].get("peak_memory_bytes")
    print(f"{who:6} {model:5} {prec:10} {len(by[key]):>2} {med(key, 'ms_per_step'):>8.2f} "
          f"{med(key, 'ms_per_step') / med(base, 'ms_per_step'):>6.3f} "
          f"{med(key, 'cpu_ms_per_step'):>8.2f} "
          f"{med(key, 'cpu_ms_per_step') / med(base, 'cpu_ms_per_step'):>6.3f} "
          f"{mem / 1e6 if mem else float('nan'):>8.1f} "
          f"{mem / mem32 if mem and mem32 else float('nan'):>6.3f}")
for model in sorted({k[1] for k in by}):
    m, t = ("mixp", model, "bf16"), ("torch", model, "bf16")
    if m in by and t in by:
        print(f"{model}: mixp bf16 / torch autocast bf16: wall {med(m, 'ms_per_step') / med(t, 'ms_per_step'):.3f}, "
              f"cpu {med(m, 'cpu_ms_per_step') / med(t, 'cpu_ms_per_step'):.3f}")
# The same ratios per round (each configuration against mixp fp32 of its own round), then the
# median over rounds: on a shared machine this follows the load less than a ratio of medians.
rounds = {}
for r in runs:
    rounds.setdefault((r["model"], r.get("round")), {})[(r["who"], r["precision"])] = r
for model in sorted({k[1] for k in by}):
    for who, prec in sorted({(k[0], k[2]) for k in by if k[1] == model}):
        per = [g[(who, prec)]["cpu_ms_per_step"] / g[("mixp", "fp32")]["cpu_ms_per_step"]
               for (m, _), g in sorted(rounds.items(), key=lambda kv: str(kv[0]))
               if m == model and (who, prec) in g and ("mixp", "fp32") in g
               and g[(who, prec)].get("cpu_ms_per_step") and g[("mixp", "fp32")].get("cpu_ms_per_step")]
        if per and (who, prec) != ("mixp", "fp32"):
            print(f"{model} {who} {prec}: cpu x fp32 per round {[round(x, 3) for x in per]}, "
                  f"median {statistics.median(per):.3f}")
