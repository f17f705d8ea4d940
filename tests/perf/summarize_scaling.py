#!/usr/bin/env python3
"""Issue 31's scaling curve from gpu_fast_path.sh phase k's raw results: SCALING.md.

Reads RAW/k_wall.txt ("k MODEL K SWEEP wall SECONDS" per sweep), RAW/k_events_MODEL_K_ID.jsonl
(each trial's events, `mpsctl logs --json`), RAW/k_smi_MODEL_K.csv (nvidia-smi samples during the
sweep: timestamp, utilization.gpu %, memory.used MiB), RAW/k_replica.json
(fused_step_profile.py --scaling) and RAW/k_ncu_K.csv (ncu --csv of one eager replica step:
per kernel gpu__time_duration.sum and sm__cycles_active.avg.pct_of_peak_sustained_elapsed).

Per model and K: the sweep's wall time and wall per trial, its training (the first trial's epoch
times summed), the fused group's peak allocated memory (largest over the trials), the GPU's busy
share while the sweep ran (nvidia-smi), and the trials' test accuracy range. For the ConvNet
replica: the graphed step per K, its FLOPs and the compute floor, and the SM use of its kernels
(ncu: the time-weighted mean share of cycles the SMs were active while each kernel ran).

Usage: summarize_scaling.py --raw RAW --out OUT_DIR
"""
import argparse
import csv
import glob
import json
import os
import statistics

from summarize import load_lines
from summarize_fast_path import get, num


# As tests/perf/fused_step_profile.py: the seed ConvNet's FLOPs per example (forward + backward)
# and the H200's dense TF32 rate.
CONVNET_FLOP_PER_EXAMPLE = 3 * 2 * (26 * 26 * 32 * 9 + 24 * 24 * 64 * 288 + 9216 * 128 + 128 * 10)
H200_DENSE_TF32 = 494.7e12


def trial_rows(raw, model, k):
    rows = []
    for path in sorted(glob.glob(os.path.join(raw, f"k_events_{model}_{k}_*.jsonl"))):
        events = load_lines(path)
        epochs = [get(e, "epoch") for e in events if get(e, "epoch")]
        summary = next((get(e, "summary") for e in events if get(e, "summary")), {})
        logs = [get(get(e, "log"), "text") or "" for e in events if get(e, "log")]
        rows.append({
            "epoch_times": [num(get(e, "epoch_time_s")) or 0 for e in epochs],
            "test_accuracy": num(get(epochs[-1], "test_accuracy")) if epochs else None,
            "peak": num(get(get(summary, "memory"), "peak_allocated_bytes")),
            "fused": any("trained together" in t or "fused step" in t for t in logs),
            "graph": next((t for t in logs if "CUDA graph" in t), ""),
        })
    return rows


def smi_busy(raw, model, k):
    values = []
    try:
        with open(os.path.join(raw, f"k_smi_{model}_{k}.csv"), encoding="utf-8") as f:
            for row in csv.reader(f):
                if len(row) >= 2 and num(row[1].strip()) is not None:
                    values.append(num(row[1].strip()))
    except OSError:
        return None
    return statistics.mean(values) if values else None


def ncu_sm_use(raw, k):
    """(kernels, their summed time in µs, time-weighted mean SM-active %) of one replica step."""
    path = os.path.join(raw, f"k_ncu_{k}.csv")
    kernels = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if line.startswith('"')]
    except OSError:
        return None
    for row in csv.DictReader(lines):
        kid = row.get("ID")
        name, value = row.get("Metric Name"), num((row.get("Metric Value") or "").replace(",", ""))
        if kid is None or name is None or value is None:
            continue
        entry = kernels.setdefault(kid, {})
        if name.startswith("gpu__time_duration"):
            unit = (row.get("Metric Unit") or "").strip()
            scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}.get(unit, 1e-3)
            entry["us"] = value * scale
        elif name.startswith("sm__cycles_active"):
            entry["sm"] = value
    timed = [e for e in kernels.values() if "us" in e and "sm" in e]
    if not timed:
        return None
    total = sum(e["us"] for e in timed)
    weighted = sum(e["us"] * e["sm"] for e in timed) / total if total else None
    below = sum(e["us"] for e in timed if e["sm"] < 50) / total * 100 if total else None
    return len(timed), total, weighted, below


def fmt(value, spec=".2f"):
    return format(value, spec) if isinstance(value, (int, float)) else "n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    sweeps = []
    try:
        with open(os.path.join(a.raw, "k_wall.txt"), encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[0] == "k":
                    sweeps.append((parts[1], int(parts[2]), parts[3], num(parts[5])))
    except OSError:
        pass
    out = ["# Issue 31: the scaling curve (gpu_fast_path.sh phase k)", ""]
    for model in dict.fromkeys(m for m, _, _, _ in sweeps):
        out += [f"## {model}", "",
                "| K | fused | wall | wall per trial | training (first trial) | training per trial "
                "| peak allocated | GPU busy (nvidia-smi) | test accuracy (range) |",
                "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
        for m, k, sweep, wall in sweeps:
            if m != model:
                continue
            rows = trial_rows(a.raw, model, k)
            training = sum(rows[0]["epoch_times"]) if rows else None
            peaks = [r["peak"] for r in rows if r["peak"]]
            accs = [r["test_accuracy"] for r in rows if r["test_accuracy"] is not None]
            fused = sum(r["fused"] for r in rows)
            out.append(
                f"| {k} | {fused} of {len(rows)} | {fmt(wall)} s | {fmt(wall / k if wall else None, '.3f')} s "
                f"| {fmt(training)} s | {fmt(training / k if training else None, '.3f')} s "
                f"| {fmt(max(peaks) / 2**30 if peaks else None, '.2f')} GiB "
                f"| {fmt(smi_busy(a.raw, model, k), '.0f')}% "
                f"| {fmt(min(accs), '.3f') if accs else 'n/a'}–{fmt(max(accs), '.3f') if accs else 'n/a'} |")
        out.append("")
    replica = None
    try:
        with open(os.path.join(a.raw, "k_replica.json"), encoding="utf-8") as f:
            replica = json.load(f)
    except (OSError, json.JSONDecodeError):
        pass
    if replica:
        out += ["## The ConvNet's fused step in PyTorch (fused_step_profile.py --scaling; ncu)", "",
                "| K | graphed step | per trial | peak allocated | GFLOP per step | compute floor "
                "(dense TF32) | achieved | ncu: kernels, their time | SM active (time-weighted) "
                "| time in kernels with SMs < 50% active |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in replica.get("rows", []):
            k = r["trials"]
            # Runs before the hand count was the one recorded kept flop_counter's in
            # flops_per_step (K^2: grouped backward counted as ungrouped): recompute.
            r["flops_per_step"] = k * replica.get("batch", 128) * CONVNET_FLOP_PER_EXAMPLE
            r["floor_ms"] = r["flops_per_step"] / H200_DENSE_TF32 * 1e3
            r["achieved_tflops"] = r["flops_per_step"] / r["ms_per_step"] / 1e9
            sm = ncu_sm_use(a.raw, k)
            out.append(
                f"| {k} | {fmt(r['ms_per_step'], '.3f')} ms | {fmt(r['ms_per_trial_step'], '.3f')} ms "
                f"| {fmt(r['peak_allocated_bytes'] / 2**30, '.2f')} GiB "
                f"| {fmt(r['flops_per_step'] / 1e9, '.1f')} "
                f"| {fmt(r['floor_ms'], '.3f')} ms | {fmt(r['achieved_tflops'], '.1f')} TFLOP/s "
                f"| {sm[0] if sm else 'n/a'}, {fmt(sm[1] / 1e3 if sm else None, '.3f')} ms "
                f"| {fmt(sm[2] if sm else None, '.0f')}% | {fmt(sm[3] if sm else None, '.0f')}% |")
        out.append("")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "SCALING.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
