#!/usr/bin/python3
"""Summarizes bench/amp_train_compare.sh output: median ms/step per (who, model, precision) over
the rounds, the ratios the mixed-precision targets name, and peak tracked memory."""
import json
import statistics
import sys

runs = [json.loads(line) for line in sys.stdin if line.strip()]
by = {}
for r in runs:
    by.setdefault((r["who"], r["model"], r["precision"]), []).append(r)
med = {k: statistics.median(x["ms_per_step"] for x in v) for k, v in by.items()}
print(f"{'who':6} {'model':5} {'precision':10} {'rounds':>6} {'ms/step':>9} {'vs mixp fp32':>12} {'peak MB':>8} {'vs fp32':>7}")
for (who, model, prec), v in sorted(by.items()):
    base = med.get(("mixp", model, "fp32"))
    mem = v[0].get("peak_memory_bytes")
    mem32 = by.get(("mixp", model, "fp32"), [{}])[0].get("peak_memory_bytes")
    print(f"{who:6} {model:5} {prec:10} {len(v):>6} {med[(who, model, prec)]:>9.2f} "
          f"{med[(who, model, prec)] / base if base else float('nan'):>12.3f} "
          f"{mem / 1e6 if mem else float('nan'):>8.1f} {mem / mem32 if mem and mem32 else float('nan'):>7.3f}")
for model in sorted({k[1] for k in by}):
    m16 = med.get(("mixp", model, "bf16"))
    t16 = med.get(("torch", model, "bf16"))
    if m16 and t16:
        print(f"{model}: mixp bf16 / torch autocast bf16 = {m16 / t16:.3f}")
