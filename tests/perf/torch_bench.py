"""PyTorch eager side of the ResNet-50 inference comparison (issue 7): torchvision's resnet50
(random weights, 1000 classes) in eval mode under torch.inference_mode(), random inputs
[N, 3, 224, 224] resident on the GPU, at each batch size: `--warmup` untimed iterations, then
`--iters` timed ones with the device synchronised before every clock read (as mpsd's BenchJob
does). Rows: fp32 (contiguous) and bf16 autocast + channels_last.

--mode train (issue 15): the training step instead, as an mpsd BenchJob's train_step rows run it:
model.train(), cross-entropy on random labels, backward, torch.optim.SGD(lr=0.01) (foreach),
gradients set to None each step; bf16 autocasts forward and loss. --cudnn-benchmark sets
torch.backends.cudnn.benchmark (mpsd's executor turns it on for CUDA). --compile: the model
under torch.compile (mode "default"); its compilation happens in the warm-up iterations, which
are not timed. --rows picks the rows (default fp32_contiguous,bf16_channels_last).

Writes one JSON object: {"rows": [{batch_size, precision, memory_format, median_ms, p10_ms,
p90_ms, mean_ms, samples_per_second, peak_memory_bytes}, ...]}."""

import argparse
import json
import statistics
import sys
import time

import torch


def percentile(sorted_values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def train_step_fn(model, x, precision):
    labels = torch.randint(0, 1000, (x.shape[0],), device=x.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = torch.nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        optimizer.step()
    return step


def measure(model, batch_size, precision, memory_format, warmup, iters, device, mode="inference",
            compile_model=False):
    x = torch.randn(batch_size, 3, 224, 224, device=device)
    # Module.to converts the weights in place: every row sets the layout it measures.
    layout = torch.channels_last if memory_format == "channels_last" else torch.contiguous_format
    x = x.contiguous(memory_format=layout)
    m = model.to(memory_format=layout)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16")
    times = []
    if mode == "train":
        m.train()
        step = train_step_fn(torch.compile(m) if compile_model else m, x, precision)
        for i in range(warmup + iters):
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            step()
            torch.cuda.synchronize(device)
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1000.0)
        m.eval()
    with torch.inference_mode(), autocast:
        for i in range(0 if mode == "train" else warmup + iters):
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            m(x)
            torch.cuda.synchronize(device)
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1000.0)
    times.sort()
    median = statistics.median(times)
    return {
        "model": "resnet50", "batch_size": batch_size, "precision": precision,
        "memory_format": memory_format, "median_ms": median,
        "p10_ms": percentile(times, 0.1), "p90_ms": percentile(times, 0.9),
        "mode": mode, "compiled": compile_model, "mean_ms": statistics.fmean(times), "samples_per_second": batch_size * 1000.0 / median,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device), "iters": iters,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-sizes", default="32,64,128")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--json", required=True)
    parser.add_argument("--mode", default="inference", choices=["inference", "train"])
    parser.add_argument("--cudnn-benchmark", action="store_true")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--rows", default="fp32_contiguous,bf16_channels_last")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    import torchvision  # here, so that --help works without it

    device = torch.device("cuda")
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=1000).to(device).eval()
    rows = []
    for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
        for row_name in args.rows.split(","):
            precision, memory_format = row_name.split("_", 1)
            row = measure(model, batch_size, precision, memory_format, args.warmup, args.iters,
                          device, args.mode, args.compile)
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(args.json, "w") as f:
        json.dump({"rows": rows, "torch": torch.__version__}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
