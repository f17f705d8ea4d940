"""Writes FAST_PATH.md and fast_path.json from the raw results of tests/perf/gpu_fast_path.sh
(issue 15): the graphed-vs-eager check, the ConvNet rows of mpsd and PyTorch with their ratios
against the issue's targets, and the ResNet-50 train-step rows. Rows whose input is missing show
"—" rather than vanish."""

import argparse
import json
import os
import statistics

# The raw-result readers and the table cell of tests/perf/summarize.py (torch-free, as this
# script; tests/perf/common.py imports torch).
from summarize import fmt, load_json, load_lines


def get(d, snake):
    """A field by its proto name or its JSON (lowerCamel) name."""
    parts = snake.split("_")
    camel = parts[0] + "".join(p.title() for p in parts[1:])
    return d.get(snake, d.get(camel))


def mpsd_job(raw, name):
    events = load_lines(os.path.join(raw, f"mpsd_{name}.jsonl"))
    epochs = [e["epoch"] for e in events if "epoch" in e]
    logs = [get(e["log"], "text") or "" for e in events if "log" in e]
    graph = next((t for t in logs if "training step" in t), "")
    if not epochs:
        return {"name": name, "graph": graph}
    times = [get(e, "epoch_time_s") for e in epochs]
    steady = times[1:] if len(times) > 1 else times
    return {"name": name, "s_per_epoch": statistics.median(steady), "epoch_times_s": times,
            "test_accuracy": get(epochs[-1], "test_accuracy"), "graph": graph}


def torch_row(raw, name):
    r = load_json(os.path.join(raw, f"torch_{name}.json")) or {}
    return {"name": name, "s_per_epoch": r.get("s_per_epoch"),
            "epoch_times_s": r.get("epoch_times_s"), "test_accuracy": r.get("test_accuracy"),
            "description": r.get("description", "")}


def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--raw", required=True)
    parser.add_argument("--graph-check", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    check = (load_json(args.graph_check) or {}).get("cases", [])
    jobs = {n: mpsd_job(args.raw, n) for n in
            ("fp32", "bf16", "channels_last", "bf16_channels_last", "sgd_nesterov_onecycle")}
    torch = {n: torch_row(args.raw, n) for n in
             ("graph_fp32", "graph_bf16", "graph_bf16_cl", "eager_fp32", "eager_bf16")}
    resnet_torch = (load_json(os.path.join(args.raw, "torch_resnet_train.json")) or {}).get("rows", [])
    resnet_mpsd = [e["bench_row"] for e in load_lines(os.path.join(args.raw, "mpsd_resnet_train.jsonl"))
                   if "bench_row" in e]

    out = ["## Issue 15: the fast path for more options (tests/perf/gpu_fast_path.sh)", ""]
    out += ["### Graphed vs eager, 50 steps from the same seed (mpsd_graph_check)", "",
            "The seed ConvNet on 50 × 128 Fashion-MNIST examples, each case a real TrainJob run "
            "twice: with the whole step in one CUDA graph and eagerly. max diff = the largest "
            "|graphed − eager| step loss over max(1, |eager|).", "",
            "| case | result | max diff | tolerance | graphed s | eager s |",
            "|---|---|---:|---:|---:|---:|"]
    for c in check:
        out.append(f"| {c['case']} | {'PASS' if c['pass'] else 'FAIL'} | "
                   f"{fmt(c['max_rel_diff'], '.2e')} | {fmt(c['tolerance'], 'g')} | "
                   f"{fmt(c['graphed_epoch_s'], '.3f')} | {fmt(c['eager_epoch_s'], '.3f')} |")
    if not check:
        out.append("| (no result) | — | — | — | — | — |")

    best = {"fp32": "graph_fp32", "bf16": "graph_bf16", "channels_last": "graph_fp32",
            "bf16_channels_last": "graph_bf16_cl", "sgd_nesterov_onecycle": None}
    out += ["", "### ConvNet, Fashion-MNIST, bs 128, 3 epochs (s/epoch = median of epochs 2..3)", "",
            "Target (issue 15, 1): ≤ 0.20 s/epoch and ≤ 0.9× the best PyTorch variant of the same "
            "settings; fp32 ≤ 0.75× PyTorch's fp32 whole-step graph; bf16 (3) ≤ the fp32 graphed "
            "time and ≤ 0.7× PyTorch's best bf16.", "",
            "| mpsd job | s/epoch | test acc | PyTorch best same settings | its s/epoch | ratio | "
            "mpsd's log |", "|---|---:|---:|---|---:|---:|---|"]
    for name, job in jobs.items():
        t = torch.get(best[name]) if best[name] else None
        out.append(f"| {name} | {fmt(job.get('s_per_epoch'), '.3f')} | "
                   f"{fmt(job.get('test_accuracy'), '.4f')} | {best[name] or '—'} | "
                   f"{fmt(t and t['s_per_epoch'], '.3f')} | "
                   f"{fmt(ratio(job.get('s_per_epoch'), t and t['s_per_epoch']), '.3f')} | "
                   f"{job.get('graph', '')} |")
    out += ["", "| PyTorch variant | s/epoch | test acc | what |", "|---|---:|---:|---|"]
    for name, t in torch.items():
        out.append(f"| {name} | {fmt(t['s_per_epoch'], '.3f')} | {fmt(t['test_accuracy'], '.4f')} "
                   f"| {t['description']} |")

    out += ["", "### ResNet-50 train step, batch 64, [64, 3, 224, 224], SGD lr 0.01", "",
            "Median ms per step (synchronised around each). PyTorch eager: torch_bench.py --mode "
            "train, cudnn.benchmark on (as mpsd's executor sets it). mpsd: a BenchJob train_step "
            "row (eager LibTorch step). Target (4): bf16 + channels_last ≤ 0.9× PyTorch eager; fp32 "
            "contiguous ≤ eager.", "",
            "| precision | layout | PyTorch eager ms | mpsd BenchJob ms | ratio |",
            "|---|---|---:|---:|---:|"]
    keyed = {}
    for side, rows in (("torch", resnet_torch), ("mpsd", resnet_mpsd)):
        for r in rows:
            key = (get(r, "precision") or "fp32", get(r, "memory_format") or "contiguous")
            keyed.setdefault(key, {})[side] = get(r, "median_ms")
    for (precision, layout), v in sorted(keyed.items()):
        out.append(f"| {precision} | {layout} | {fmt(v.get('torch'), '.2f')} | "
                   f"{fmt(v.get('mpsd'), '.2f')} | {fmt(ratio(v.get('mpsd'), v.get('torch')), '.3f')} |")
    out.append("")
    text = "\n".join(out)
    with open(os.path.join(args.out, "FAST_PATH.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "fast_path.json"), "w") as f:
        json.dump({"graph_check": check, "mpsd": jobs, "torch": torch,
                   "resnet_train": {"torch": resnet_torch, "mpsd": resnet_mpsd}}, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
