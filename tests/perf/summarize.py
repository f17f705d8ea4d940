"""Collects what tests/perf/gpu_train_compare.sh measured into OUT/results.json and OUT/RESULTS.md.

Inputs: RAW/v1.json, v2.json, v2b.json, v5a.json, v5b.json, v5c.json (the PyTorch variants),
RAW/v3.json (the bare LibTorch loop), RAW/v4_wall.json and RAW/build_rc (the mpsd run),
RAW/v4b_events.jsonl (the mpsd job again with drop_last: true, step events left out),
RAW/bench_torch.json and RAW/bench_mpsd.jsonl (ResNet-50 inference: PyTorch eager, and the mpsd
BenchJob's events), the mpsd job's events (`mpsctl --json submit --follow`, one JobEvent per line),
`mpsctl --json device` (before and after the job, one line each) and env.txt. Missing inputs are
reported as not measured; nothing here needs torch."""

import argparse
import datetime
import json
import os
import statistics


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_lines(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return rows


def parse_time(stamp):
    # RFC 3339 with up to 9 fractional digits and a Z.
    stamp = stamp.rstrip("Z")
    if "." in stamp:
        head, frac = stamp.split(".")
        stamp = f"{head}.{frac[:6]}"
    else:
        stamp += ".0"
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f")


def mpsd_result(events, wall, build_rc):
    result = {"variant": "4", "description": "mpsd TrainJob end to end (mpsd on a unix socket, "
              "mpsctl submit --follow --json)", "build_rc": build_rc}
    if build_rc != 0:
        result["error"] = "build failed (build.log)"
        return result
    epochs = [e["epoch"] for e in events if "epoch" in e]
    summaries = [e["summary"] for e in events if "summary" in e]
    states = [e["state"] for e in events if "state" in e]
    logs = [e["log"].get("text", "") for e in events if "log" in e]
    steps = sum(1 for e in events if "step" in e)
    result["final_state"] = states[-1].get("state") if states else None
    if states and states[-1].get("message"):
        result["final_message"] = states[-1]["message"]
    result["step_events"] = steps
    result["logs"] = logs
    times = [e.get("epoch_time_s", 0.0) for e in epochs]
    result["epoch_times_s"] = times
    if times:
        steady = times[1:] if len(times) > 1 else times
        result["s_per_epoch"] = statistics.median(steady)
        result["test_accuracies"] = [e.get("test_accuracy", 0.0) for e in epochs]
        result["test_accuracy"] = result["test_accuracies"][-1]
    if summaries:
        s = summaries[-1]
        result["summary"] = s
        if "test_accuracy" in s:
            result["test_accuracy"] = s["test_accuracy"]
    if wall:
        result["submit_rc"] = wall.get("submit_rc")
        if "t0" in wall and "t1" in wall:
            result["wall_submit_to_end_s"] = wall["t1"] - wall["t0"]
    stamped = [e for e in events if "time" in e]
    if len(stamped) >= 2:
        result["events_first_to_last_s"] = (
            parse_time(stamped[-1]["time"]) - parse_time(stamped[0]["time"])).total_seconds()
    return result


def env_lines(path):
    try:
        with open(path) as f:
            return [line.rstrip("\n") for line in f]
    except OSError:
        return []


def fmt(value, spec):
    return format(value, spec) if isinstance(value, (int, float)) else "—"


def mib(value):
    try:
        return f"{int(value) / 2**20:,.1f} MiB"
    except (TypeError, ValueError):
        return "—"


# Row order of the table; "4" is mpsd.
VARIANTS = ("1", "2", "2b", "3", "5a", "5b", "5c", "4", "4b")
PYTORCH_FILES = ("1", "2", "2b", "3", "5a", "5b", "5c")


def bench_rows(raw):
    """ResNet-50 inference rows keyed (batch_size, precision, memory_format): PyTorch's from
    bench_torch.json, mpsd's from the BenchJob's bench_row events."""
    torch_rows = (load_json(os.path.join(raw, "bench_torch.json")) or {}).get("rows", [])
    mpsd_rows = [e["bench_row"] for e in load_lines(os.path.join(raw, "bench_mpsd.jsonl"))
                 if "bench_row" in e]
    table = {}
    for side, rows in (("torch", torch_rows), ("mpsd", mpsd_rows)):
        for r in rows:
            if side == "mpsd" and not str(r.get("device", "")).startswith("cuda"):
                continue
            key = (int(r.get("batch_size", r.get("batchSize", 0))), r.get("precision", "fp32"),
                   r.get("memory_format", r.get("memoryFormat", "contiguous")) or "contiguous")
            table.setdefault(key, {})[side] = r
    return [{"batch_size": k[0], "precision": k[1], "memory_format": k[2], **v}
            for k, v in sorted(table.items())]


def render_bench(rows):
    out = ["## ResNet-50 inference (random weights, [N, 3, 224, 224], eval, no autograd)", "",
           "Median ms per batch over the timed iterations, the device synchronised before every "
           "clock read; ratio = mpsd / PyTorch (target: at most 1.05).", "",
           "| batch | precision | layout | PyTorch eager ms | mpsd BenchJob ms | ratio | "
           "mpsd samples/s |", "|---:|---|---|---:|---:|---:|---:|"]
    for r in rows:
        t = r.get("torch", {}).get("median_ms")
        m = r.get("mpsd", {})
        mm = m.get("median_ms", m.get("medianMs"))
        ratio = (mm / t) if (t and mm) else None
        status = m.get("status", "")
        note = "" if not status or status == "OK" else f" ({status})"
        out.append(f"| {r['batch_size']} | {r['precision']} | {r['memory_format']} | "
                   f"{fmt(t, '.2f')} | {fmt(mm, '.2f')}{note} | {fmt(ratio, '.3f')} | "
                   f"{fmt(m.get('samples_per_second', m.get('samplesPerSecond')), ',.0f')} |")
    out.append("")
    return out


def render(results):
    env = results["environment"]
    rows = results["variants"]
    v4 = rows.get("4", {})
    out = ["# mpsd vs PyTorch on one GPU: Fashion-MNIST ConvNet", ""]
    out.append(f"Written by tests/perf/summarize.py ({results['written_at']}).")
    out.append("")
    out.append("```")
    out.extend(env)
    out.append("```")
    out.append("")
    out.append(f"Fashion-MNIST (60,000 train / 10,000 test), the seed ConvNet, batch "
               f"{results['batch_size']}, Adam lr {results['lr']}, {results['epochs']} epochs, "
               "seed 1. s/epoch = median of epochs 2..N of the training pass (test pass not "
               "timed); accuracy = test accuracy after the last epoch.")
    out.append("")
    out.append("| variant | s/epoch | epoch times (s) | test accuracy |")
    out.append("|---|---:|---|---:|")
    for key in VARIANTS:
        r = rows.get(key)
        if not r:
            out.append(f"| ({key}) not measured | — | — | — |")
            continue
        times = ", ".join(f"{t:.3f}" for t in r.get("epoch_times_s", []))
        out.append(f"| ({key}) {r.get('description', '')} | {fmt(r.get('s_per_epoch'), '.3f')} "
                   f"| {times or '—'} | {fmt(r.get('test_accuracy'), '.4f')} |")
    out.append("")
    if results["ratios"]:
        out.append("Ratios of s/epoch (below 1: mpsd faster): " + ", ".join(
            f"{k} = {v:.3f}" for k, v in results["ratios"].items()))
        out.append("")
    if v4:
        out.append("mpsd job: " + ", ".join(filter(None, [
            f"final state {v4.get('final_state')}",
            f"wall time submit → end {fmt(v4.get('wall_submit_to_end_s'), '.2f')} s",
            f"first → last event {fmt(v4.get('events_first_to_last_s'), '.2f')} s",
            f"{v4.get('step_events', 0)} step events",
        ])))
        s = v4.get("summary", {})
        if s:
            m = s.get("memory", {})
            out.append("")
            out.append(f"Summary: device {s.get('device')}, total {fmt(s.get('total_time_s'), '.2f')}"
                       f" s, data load {fmt(s.get('data_load_time_s'), '.2f')} s, median epoch "
                       f"{fmt(s.get('median_epoch_time_s'), '.3f')} s, "
                       f"{fmt(s.get('samples_per_second'), ',.0f')} samples/s; memory: allocated "
                       f"before {mib(m.get('allocated_before_bytes', 0))}, peak "
                       f"{mib(m.get('peak_allocated_bytes', 0))}, after "
                       f"{mib(m.get('allocated_after_bytes', 0))}; reserved before "
                       f"{mib(m.get('reserved_before_bytes', 0))}, after "
                       f"{mib(m.get('reserved_after_bytes', 0))}.")
        if v4.get("error") or v4.get("final_message"):
            out.append("")
            out.append(f"mpsd problem: {v4.get('error') or v4.get('final_message')}")
    if results.get("bench"):
        out.append("")
        out.extend(render_bench(results["bench"]))
    for i, d in enumerate(results.get("device", [])):
        out.append("")
        out.append(f"`mpsctl device` ({'before' if i == 0 else 'after'} the job): "
                   f"{d.get('name')} ({d.get('kind')}), total {mib(d.get('total_memory_bytes', 0))}, "
                   f"allocated {mib(d.get('allocated_bytes', 0))}, reserved "
                   f"{mib(d.get('reserved_bytes', 0))}, LibTorch {d.get('torch_version')}, "
                   f"available {d.get('available')}")
    out.append("")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--raw", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--env", required=True)
    parser.add_argument("--events", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()

    variants = {}
    for key in PYTORCH_FILES:
        r = load_json(os.path.join(args.raw, f"v{key}.json"))
        if r:
            variants[key] = r
    build_rc = None
    try:
        with open(os.path.join(args.raw, "build_rc")) as f:
            build_rc = int(f.read().strip())
    except (OSError, ValueError):
        pass
    if build_rc is not None:
        variants["4"] = mpsd_result(load_lines(args.events),
                                    load_json(os.path.join(args.raw, "v4_wall.json")), build_rc)
        v4b_events = load_lines(os.path.join(args.raw, "v4b_events.jsonl"))
        if v4b_events:
            v4b = mpsd_result(v4b_events, None, build_rc)
            v4b["variant"] = "4b"
            v4b["description"] = ("mpsd TrainJob as (4) with drop_last: true (every step a full "
                                  "batch, as (5c))")
            variants["4b"] = v4b
    ratios = {}
    t4 = variants.get("4", {}).get("s_per_epoch")
    for key in PYTORCH_FILES:
        tk = variants.get(key, {}).get("s_per_epoch")
        if t4 and tk:
            ratios[f"(4)/({key})"] = t4 / tk
    t4b, t5c = variants.get("4b", {}).get("s_per_epoch"), variants.get("5c", {}).get("s_per_epoch")
    if t4b and t5c:
        ratios["(4b)/(5c)"] = t4b / t5c
    job = {}
    try:
        with open(os.path.join(args.raw, "job.yaml")) as f:
            job["yaml"] = f.read()
    except OSError:
        pass
    results = {
        "written_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "environment": env_lines(args.env),
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "variants": variants,
        "ratios": ratios,
        "device": load_lines(args.device),
        "job": job,
        "bench": bench_rows(args.raw),
    }
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = render(results)
    with open(os.path.join(args.out, "RESULTS.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
