"""Writes FAST_PATH.md and fast_path.json from the raw results of tests/perf/gpu_fast_path.sh
(issue 15): the graphed-vs-eager check; the ConvNet rows of mpsd against PyTorch's graph, eager
and torch.compile variants with every ratio of targets 1 and 3; the bare C++ loop with mpsd's
graph (target 6); the cifar_cnn rows (target 5); the ResNet-50 train step (target 4); peak
memory (target 8); and, from the traces of the profiled jobs, where a step's time goes. Rows
whose input is missing show "—" rather than vanish."""

import argparse
import json
import os
import re
import statistics

# The raw-result readers and the table cell of tests/perf/summarize.py (torch-free, as this
# script; tests/perf/common.py imports torch).
from summarize import fmt, load_json, load_lines


def get(d, snake):
    """A field by its proto name or its JSON (lowerCamel) name."""
    if not isinstance(d, dict):
        return None
    parts = snake.split("_")
    camel = parts[0] + "".join(p.title() for p in parts[1:])
    return d.get(snake, d.get(camel))


def num(value):
    """protobuf's JSON writes int64 as strings."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def mib(value):
    return fmt(value / 2**20 if isinstance(value, (int, float)) else None, ",.1f")


def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def verdict(value, limit):
    if not isinstance(value, (int, float)):
        return "not measured"
    return "met" if value <= limit else f"missed by {100 * (value / limit - 1):.0f}%"


def mpsd_job(raw, name):
    events = load_lines(os.path.join(raw, f"mpsd_{name}.jsonl"))
    epochs = [e["epoch"] for e in events if "epoch" in e]
    logs = [get(e["log"], "text") or "" for e in events if "log" in e]
    graph = next((t for t in logs if "training step" in t), "")
    summary = next((e["summary"] for e in events if "summary" in e), {})
    state = next((get(e, "state_change") for e in reversed(events) if get(e, "state_change")), {})
    row = {"name": name, "graph": graph, "state": get(state, "state"),
           "message": get(state, "message"),
           "peak_allocated_bytes": num(get(get(summary, "memory"), "peak_allocated_bytes")),
           "steps": num(get(summary, "steps")), "profile_path": get(summary, "profile_path")}
    if epochs:
        times = [get(e, "epoch_time_s") for e in epochs]
        steady = times[1:] if len(times) > 1 else times
        row.update(s_per_epoch=statistics.median(steady), epoch_times_s=times,
                   test_accuracy=get(epochs[-1], "test_accuracy"))
    return row


def result_row(raw, file, name):
    r = load_json(os.path.join(raw, file)) or {}
    return {"name": name, "s_per_epoch": r.get("s_per_epoch"),
            "epoch_times_s": r.get("epoch_times_s"), "test_accuracy": r.get("test_accuracy"),
            "description": r.get("description", ""),
            "peak_allocated_bytes": r.get("peak_allocated_bytes"),
            "steps_per_epoch": r.get("steps_per_epoch")}


# ---- traces -----------------------------------------------------------------------------------

def busy_time(intervals):
    """Length of the union of [start, end) intervals (microseconds)."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


KINDS = (  # (kind, a regular expression on the kernel's name); the first that matches
    ("convolutions and GEMMs (cuDNN, cuBLAS, their layout transposes)",
     r"xmma|cutlass|cudnn|wgrad|implicit|winograd|convolve|gemm|nchwTo|nhwcTo"),
    ("the optimizer (fused Adam, multi-tensor SGD)", r"multi_tensor_apply|fused_adam"),
    ("reductions (bias gradients, loss, correct count)", r"reduce_kernel"),
    ("max-pool forward and backward", r"max_pool"),
    ("copies and memsets", r"(?i)memset|memcpy"),
    ("other elementwise (ReLU, dropout, casts, loss)", r"."),
)


def kind_of(name):
    return next(kind for kind, pattern in KINDS if re.search(pattern, name))


def analyse_trace(path):
    """What the profiled steps spent. Kineto marks each ProfilerStep#N twice: on the host
    ("user_annotation": the host's time to queue the step) and on the device
    ("gpu_user_annotation": from the step's first kernel to its last). Per step (medians): the
    device span, the device's busy time in it (the union of its kernels and copies), the gaps
    between them, the kernel count; and the kernels that took longest, per step."""
    root = load_json(path)
    if root is None:
        return None
    events = root.get("traceEvents", []) if isinstance(root, dict) else root
    host = [e for e in events if e.get("cat") == "user_annotation"
            and str(e.get("name", "")).startswith("ProfilerStep#")]
    device = [e for e in events if e.get("cat") == "gpu_user_annotation"
              and str(e.get("name", "")).startswith("ProfilerStep#")]
    if not host:  # the legacy profiler (LibTorch 1.13): host ranges only
        host = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    if not host:
        return {"steps": 0}
    work = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    spans, busy, counts, by_name, by_kind = [], [], [], {}, {}
    for step in device:
        start, end = step["ts"], step["ts"] + step.get("dur", 0)
        inside = [e for e in work if start <= e["ts"] < end]
        spans.append(end - start)
        busy.append(busy_time([(e["ts"], min(end, e["ts"] + e.get("dur", 0))) for e in inside]))
        counts.append(sum(1 for e in inside if e.get("cat") == "kernel"))
        for e in inside:
            entry = by_name.setdefault(e["name"], [0, 0.0])
            entry[0] += 1
            entry[1] += e.get("dur", 0)
            kind = kind_of(e["name"])
            by_kind[kind] = by_kind.get(kind, 0.0) + e.get("dur", 0)
    n = max(1, len(device))
    total = sum(d for _, d in by_name.values()) or 1e-9
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:8]
    median = statistics.median
    result = {"steps": len(host), "host_us_per_step": median(e.get("dur", 0) for e in host)}
    if device:
        result.update(
            device_span_us=median(spans), device_busy_us=median(busy),
            device_gap_us=median(s - b for s, b in zip(spans, busy)),
            kernels_per_step=median(counts),
            kinds=[{"kind": k, "us_per_step": d / n, "share": d / total}
                   for k, d in sorted(by_kind.items(), key=lambda kv: -kv[1])],
            top_kernels=[{"name": k, "calls_per_step": c / n, "us_per_step": d / n,
                          "share": d / total} for k, (c, d) in top])
    return result


def trace_section(name, t):
    out = [f"**{name}**: "]
    if not t or not t.get("steps"):
        out[0] += "no trace."
        return out
    if "device_span_us" not in t:
        out[0] += (f"{t['steps']} steps, host ranges only (median {t['host_us_per_step']:.0f} µs).")
        return out
    out[0] += (f"{t['steps']} steps; per step (median) the device works from the step's first "
               f"to its last kernel for {t['device_span_us']:.0f} µs, busy {t['device_busy_us']:.0f}"
               f" µs of it ({100 * t['device_busy_us'] / max(1e-9, t['device_span_us']):.0f}%: "
               f"{t['kernels_per_step']:.0f} kernels and the copies), idle between them "
               f"{t['device_gap_us']:.0f} µs; the host queues a step in "
               f"{t['host_us_per_step']:.0f} µs.")
    out += ["", "| kind of kernel | µs/step | share |", "|---|---:|---:|"]
    out += [f"| {k['kind']} | {k['us_per_step']:.1f} | {100 * k['share']:.1f}% |"
            for k in t.get("kinds", [])]
    out += ["", "| kernel (or copy) | calls/step | µs/step | share of the step's device time |",
            "|---|---:|---:|---:|"]
    for k in t["top_kernels"]:
        label = k["name"] if len(k["name"]) <= 90 else k["name"][:87] + "..."
        out.append(f"| `{label}` | {k['calls_per_step']:.1f} | {k['us_per_step']:.1f} | "
                   f"{100 * k['share']:.1f}% |")
    return out


# ---- sections ---------------------------------------------------------------------------------

def graph_check_section(check):
    out = ["### Graphed vs eager, 50 steps from the same seed (mpsd_graph_check)", "",
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
    return out


SETTINGS = (("fp32", "fp32", "fp32"), ("bf16", "bf16", "bf16"),
            ("bf16_channels_last", "bf16_cl", "bf16 + channels_last"))


def convnet_section(jobs, torch):
    out = ["### ConvNet, Fashion-MNIST, bs 128, Adam 1e-3, 3 epochs (s/epoch = median of epochs "
           "2..3)", "",
           "PyTorch variants (tests/perf/torch_resident.py): graph = the whole step in one CUDA "
           "graph, Adam(fused, capturable), last partial batch dropped; eager = Adam(fused=True); "
           "compile = torch.compile(mode=\"reduce-overhead\") + Adam(fused=True).", "",
           "| setting | mpsd s/epoch | test acc | PyTorch graph | eager | compile | best PyTorch "
           "| mpsd / best | mpsd / graph | mpsd peak MiB | PyTorch peak MiB (graph, eager) |",
           "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"]
    for job_name, torch_suffix, label in SETTINGS:
        j = jobs.get(job_name, {})
        variants = {k: torch.get(f"{k}_{torch_suffix}", {}) for k in ("graph", "eager", "compile")}
        timed = {k: v.get("s_per_epoch") for k, v in variants.items()
                 if isinstance(v.get("s_per_epoch"), (int, float))}
        best = min(timed, key=timed.get) if timed else None
        out.append(
            f"| {label} | {fmt(j.get('s_per_epoch'), '.3f')} | {fmt(j.get('test_accuracy'), '.4f')}"
            f" | {fmt(timed.get('graph'), '.3f')} | {fmt(timed.get('eager'), '.3f')} | "
            f"{fmt(timed.get('compile'), '.3f')} | {best or '—'} | "
            f"{fmt(ratio(j.get('s_per_epoch'), timed.get(best)), '.3f')} | "
            f"{fmt(ratio(j.get('s_per_epoch'), timed.get('graph')), '.3f')} | "
            f"{mib(j.get('peak_allocated_bytes'))} | "
            f"{mib(variants['graph'].get('peak_allocated_bytes'))}, "
            f"{mib(variants['eager'].get('peak_allocated_bytes'))} |")
    out += ["", "| mpsd job | s/epoch | test acc | peak MiB | mpsd's log |", "|---|---:|---:|---:|---|"]
    for name, j in jobs.items():
        out.append(f"| {name} | {fmt(j.get('s_per_epoch'), '.3f')} | "
                   f"{fmt(j.get('test_accuracy'), '.4f')} | {mib(j.get('peak_allocated_bytes'))} | "
                   f"{j.get('graph', '')} |")
    out += ["", "| PyTorch variant | s/epoch | test acc | peak MiB | what |", "|---|---:|---:|---:|---|"]
    for name, t in torch.items():
        out.append(f"| {name} | {fmt(t['s_per_epoch'], '.3f')} | {fmt(t['test_accuracy'], '.4f')} "
                   f"| {mib(t.get('peak_allocated_bytes'))} | {t['description']} |")
    return out


def targets_section(jobs, torch, bare, cifar, resnet):
    def s(row):
        return (row or {}).get("s_per_epoch")

    def best_of(suffix):
        values = [s(torch.get(f"{k}_{suffix}")) for k in ("graph", "eager", "compile")]
        values = [v for v in values if isinstance(v, (int, float))]
        return min(values) if values else None

    fp32, bf16, bf16_cl = (s(jobs.get(n)) for n in ("fp32", "bf16", "bf16_channels_last"))
    best_mpsd = min([v for v in (fp32, bf16, bf16_cl) if isinstance(v, (int, float))], default=None)
    rows = [
        ("1", "best mpsd ConvNet s/epoch ≤ 0.20", best_mpsd, 0.20, ".3f"),
        ("1", "fp32: mpsd / PyTorch best fp32 ≤ 0.9", ratio(fp32, best_of("fp32")), 0.9, ".3f"),
        ("1", "bf16 + channels_last: mpsd / PyTorch best of the same ≤ 0.9",
         ratio(bf16_cl, best_of("bf16_cl")), 0.9, ".3f"),
        ("1", "fp32: mpsd / PyTorch's fp32 whole-step graph ≤ 0.75",
         ratio(fp32, s(torch.get("graph_fp32"))), 0.75, ".3f"),
        ("3", "bf16: mpsd / mpsd fp32 graphed ≤ 1", ratio(bf16, fp32), 1.0, ".3f"),
        ("3", "bf16: mpsd / PyTorch best bf16 ≤ 0.7", ratio(bf16, best_of("bf16")), 0.7, ".3f"),
        ("4", "ResNet-50 bf16 + cl: mpsd TrainJob / PyTorch eager ≤ 0.9",
         ratio(resnet.get("trainjob_bf16_cl"), resnet.get("torch_bf16_cl")), 0.9, ".3f"),
        ("4", "ResNet-50 bf16 + cl: mpsd TrainJob / torch.compile ≤ 1",
         ratio(resnet.get("trainjob_bf16_cl"), resnet.get("compile_bf16_cl")), 1.0, ".3f"),
        ("4", "ResNet-50 bf16 + cl: mpsd BenchJob / PyTorch eager ≤ 0.9",
         ratio(resnet.get("bench_bf16_cl"), resnet.get("torch_bf16_cl")), 0.9, ".3f"),
        ("4", "ResNet-50 fp32: mpsd TrainJob / PyTorch eager ≤ 1",
         ratio(resnet.get("trainjob_fp32"), resnet.get("torch_fp32")), 1.0, ".3f"),
        ("4", "ResNet-50 fp32: mpsd BenchJob / PyTorch eager ≤ 1",
         ratio(resnet.get("bench_fp32"), resnet.get("torch_fp32")), 1.0, ".3f"),
        ("5", "cifar_cnn: augmented / not augmented (mpsd) ≤ 1.2",
         ratio(s(cifar.get("cifar_aug")), s(cifar.get("cifar_noaug"))), 1.2, ".3f"),
        ("5", "cifar_cnn augmented: mpsd / PyTorch eager with GPU transforms ≤ 0.5",
         ratio(s(cifar.get("cifar_aug")), s(cifar.get("torch_cifar_aug"))), 0.5, ".3f"),
        ("6", "fp32: mpsd job / bare loop with mpsd's graph ≤ 1.03",
         ratio(fp32, s(bare.get("fp32_contiguous"))), 1.03, ".3f"),
        ("6", "bf16 + cl: mpsd job / bare loop with mpsd's graph ≤ 1.03",
         ratio(bf16_cl, s(bare.get("bf16_channels_last"))), 1.03, ".3f"),
    ]
    for job_name, torch_suffix, label in SETTINGS:
        j = jobs.get(job_name, {})
        peaks = [torch.get(f"{k}_{torch_suffix}", {}).get("peak_allocated_bytes")
                 for k in ("graph", "eager", "compile")]
        peaks = [p for p in peaks if isinstance(p, (int, float))]
        rows.append(("8", f"ConvNet {label}: mpsd peak / PyTorch's smallest peak ≤ 1",
                     ratio(j.get("peak_allocated_bytes"), min(peaks) if peaks else None), 1.0,
                     ".3f"))
    for key, label in (("fp32", "fp32"), ("bf16_cl", "bf16 + cl")):
        rows.append(("8", f"ResNet-50 {label}: mpsd TrainJob peak / PyTorch eager's ≤ 1",
                     ratio(resnet.get(f"trainjob_{key}_peak"), resnet.get(f"torch_{key}_peak")),
                     1.0, ".3f"))
    rows.append(("8", "cifar_cnn augmented: mpsd peak / PyTorch eager's ≤ 1",
                 ratio((cifar.get("cifar_aug") or {}).get("peak_allocated_bytes"),
                       (cifar.get("torch_cifar_aug") or {}).get("peak_allocated_bytes")), 1.0,
                 ".3f"))
    out = ["### Against issue 15's targets (this run)", "",
           "| target | what | value | verdict |", "|---|---|---:|---|"]
    for target, what, value, limit, spec in rows:
        out.append(f"| {target} | {what} | {fmt(value, spec)} | {verdict(value, limit)} |")
    return out


def bare_section(jobs, bare):
    out = ["### mpsd against a bare C++ loop with the same CUDA graph (target 6)", "",
           "mpsd_bare_loop graphed: mpsd's zoo convnet and mpsd's GraphedStep in a plain loop "
           "(randperm per epoch, one Step per batch, the partial last batch eager, no per-step "
           "read-back, no events, no executor, no daemon), against the mpsd TrainJob of the same "
           "settings through mpsctl.", "",
           "| setting | bare loop s/epoch | its test acc | mpsd s/epoch | mpsd / bare |",
           "|---|---:|---:|---:|---:|"]
    for key, job_name, label in (("fp32_contiguous", "fp32", "fp32"),
                                 ("bf16_channels_last", "bf16_channels_last",
                                  "bf16 + channels_last")):
        b = bare.get(key) or {}
        j = jobs.get(job_name, {})
        out.append(f"| {label} | {fmt(b.get('s_per_epoch'), '.3f')} | "
                   f"{fmt(b.get('test_accuracy'), '.4f')} | {fmt(j.get('s_per_epoch'), '.3f')} | "
                   f"{fmt(ratio(j.get('s_per_epoch'), b.get('s_per_epoch')), '.3f')} |")
    return out


def cifar_section(cifar):
    out = ["### cifar_cnn, SGD nesterov (momentum 0.9, wd 5e-4) + onecycle (max_lr 0.05), bs 128, "
           "3 epochs, CIFAR-shaped random files (50,000 + 10,000)", "",
           "Accuracies are of random labels (meaningless); the times are CIFAR-10's.", "",
           "| row | s/epoch | epoch times (s) | peak MiB | mpsd's log / what |", "|---|---:|---|---:|---|"]
    for name, r in cifar.items():
        times = ", ".join(fmt(t, ".3f") for t in (r.get("epoch_times_s") or []))
        out.append(f"| {name} | {fmt(r.get('s_per_epoch'), '.3f')} | {times} | "
                   f"{mib(r.get('peak_allocated_bytes'))} | {r.get('graph') or r.get('description', '')} |")
    return out


def resnet_section(resnet_torch, resnet_compile, resnet_mpsd, trainjobs):
    out = ["### ResNet-50 train step, batch 64, [64, 3, 224, 224], SGD lr 0.01", "",
           "Median ms per step. PyTorch (torch_bench.py --mode train, cudnn.benchmark on): eager, "
           "and torch.compile (mode default) for bf16 + channels_last, synchronised around each "
           "step. mpsd BenchJob train_step: the TrainJob's own step on one resident batch (its "
           "`step` column: cuda_graph where the TrainJob graphs it, else eager). mpsd "
           "TrainJob: resnet50 on the synthetic set (3,200 random images drawn on the device, "
           "50 steps an epoch, 3 epochs): median epoch time of epochs 2..3 / 50 steps, the "
           "graphed step, asynchronous.", "",
           "| precision | layout | PyTorch eager ms | torch.compile ms | mpsd BenchJob ms | "
           "mpsd TrainJob ms | TrainJob / eager | TrainJob / compile | BenchJob / eager | "
           "peak MiB: PyTorch eager, BenchJob, TrainJob |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    keyed = {}
    for side, rows in (("torch", resnet_torch), ("compile", resnet_compile), ("mpsd", resnet_mpsd)):
        for r in rows:
            key = (get(r, "precision") or "fp32", get(r, "memory_format") or "contiguous")
            keyed.setdefault(key, {})[side] = get(r, "median_ms")
            keyed[key][side + "_peak"] = num(get(r, "peak_memory_bytes"))
    for key, name in ((("fp32", "contiguous"), "resnet_fp32"),
                      (("bf16", "channels_last"), "resnet_bf16_channels_last")):
        t = trainjobs.get(name, {})
        keyed.setdefault(key, {})["trainjob"] = (t.get("s_per_epoch") * 1000.0 / 50
                                                 if isinstance(t.get("s_per_epoch"), (int, float))
                                                 else None)
        keyed[key]["trainjob_peak"] = t.get("peak_allocated_bytes")
        keyed[key]["trainjob_log"] = t.get("graph")
    flat = {}
    for (precision, layout), v in sorted(keyed.items()):
        out.append(f"| {precision} | {layout} | {fmt(v.get('torch'), '.2f')} | "
                   f"{fmt(v.get('compile'), '.2f')} | {fmt(v.get('mpsd'), '.2f')} | "
                   f"{fmt(v.get('trainjob'), '.2f')} | "
                   f"{fmt(ratio(v.get('trainjob'), v.get('torch')), '.3f')} | "
                   f"{fmt(ratio(v.get('trainjob'), v.get('compile')), '.3f')} | "
                   f"{fmt(ratio(v.get('mpsd'), v.get('torch')), '.3f')} | "
                   f"{mib(v.get('torch_peak'))}, {mib(v.get('mpsd_peak'))}, "
                   f"{mib(v.get('trainjob_peak'))} |")
        short = {("fp32", "contiguous"): "fp32", ("bf16", "channels_last"): "bf16_cl"}.get(
            (precision, layout))
        if short:
            flat.update({f"torch_{short}": v.get("torch"), f"compile_{short}": v.get("compile"),
                         f"bench_{short}": v.get("mpsd"), f"trainjob_{short}": v.get("trainjob"),
                         f"torch_{short}_peak": v.get("torch_peak"),
                         f"trainjob_{short}_peak": v.get("trainjob_peak")})
    logs = {name: t.get("graph") for name, t in trainjobs.items() if t.get("graph")}
    if logs:
        out += [""] + [f"- {name}: {text}" for name, text in logs.items()]
    return out, flat


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--raw", required=True)
    parser.add_argument("--graph-check", required=True)
    parser.add_argument("--env")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    raw = args.raw

    check = (load_json(args.graph_check) or {}).get("cases", [])
    jobs = {n: mpsd_job(raw, n) for n in
            ("fp32", "bf16", "channels_last", "bf16_channels_last", "bf16_channels_last_drop_last",
             "fp32_search", "bf16_channels_last_search", "fp32_no_test",
             "bf16_channels_last_no_test", "sgd_nesterov_onecycle", "profile_fp32",
             "profile_bf16_channels_last")}
    torch = {f"{k}_{s}": result_row(raw, f"torch_{k}_{s}.json", f"{k}_{s}")
             for s in ("fp32", "bf16", "bf16_cl") for k in ("graph", "eager", "compile")}
    bare = {k: load_json(os.path.join(raw, f"bare_{k}.json"))
            for k in ("fp32_contiguous", "bf16_channels_last", "fp32_contiguous_search",
                      "bf16_channels_last_search")}
    cifar = {"cifar_aug": mpsd_job(raw, "cifar_aug"), "cifar_noaug": mpsd_job(raw, "cifar_noaug"),
             "torch_cifar_aug": result_row(raw, "torch_cifar_aug.json", "torch_cifar_aug"),
             "torch_cifar_noaug": result_row(raw, "torch_cifar_noaug.json", "torch_cifar_noaug")}
    resnet_torch = (load_json(os.path.join(raw, "torch_resnet_train.json")) or {}).get("rows", [])
    resnet_compile = (load_json(os.path.join(raw, "torch_resnet_train_compile.json")) or {}).get(
        "rows", [])
    resnet_mpsd = [e["bench_row"] for e in load_lines(os.path.join(raw, "mpsd_resnet_train.jsonl"))
                   if "bench_row" in e]
    trainjobs = {n: mpsd_job(raw, n) for n in ("resnet_fp32", "resnet_bf16_channels_last",
                                               "resnet_fp32_heuristics",
                                               "resnet_bf16_channels_last_heuristics")}
    traces = {n: analyse_trace(os.path.join(raw, f"trace_{n}.json"))
              for n in ("profile_fp32", "profile_bf16_channels_last", "cifar_aug")}

    resnet_lines, resnet = resnet_section(resnet_torch, resnet_compile, resnet_mpsd, trainjobs)
    out = ["## Issue 15: every target in one run (tests/perf/gpu_fast_path.sh)", ""]
    if args.env:
        try:
            with open(args.env) as f:
                out += ["```", f.read().strip(), "```", ""]
        except OSError:
            pass
    out += targets_section(jobs, torch, bare, cifar, resnet) + [""]
    out += graph_check_section(check) + [""]
    out += convnet_section(jobs, torch) + [""]
    out += bare_section(jobs, bare) + [""]
    out += cifar_section(cifar) + [""]
    out += resnet_lines + [""]
    out += ["### Where a step's time goes: LibTorch's profiler on mpsd jobs (`profile:`)", "",
            "From the Chrome traces the profiled jobs wrote (raw.tar.gz: trace_*.json; open in "
            "ui.perfetto.dev): Kineto's device range of each ProfilerStep (first to last kernel "
            "of the step), the union of the kernels and copies in it (busy), and the rest "
            "(idle: launch gaps between kernels, waits).", ""]
    for name, t in traces.items():
        out += trace_section(name, t) + [""]
    text = "\n".join(out)
    with open(os.path.join(args.out, "FAST_PATH.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "fast_path.json"), "w") as f:
        json.dump({"graph_check": check, "mpsd": jobs, "torch": torch, "bare": bare,
                   "cifar": cifar, "resnet_train": {"torch": resnet_torch,
                                                    "compile": resnet_compile,
                                                    "mpsd_bench": resnet_mpsd,
                                                    "mpsd_trainjob": trainjobs, "flat": resnet},
                   "traces": traces}, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
