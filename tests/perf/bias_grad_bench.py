#!/usr/bin/env python3
"""Issue 32: what a convolution's bias gradient costs on the GPU, and cheaper ways to compute it.

The seed ConvNet's profile (tests/perf/RESULTS.md) puts 16% of a bf16 + channels_last step in
reductions, most of it PyTorch's reduce_kernel summing the two convolutions' output gradients
over N, H and W (the bias gradients: [128, 32, 26, 26] and [128, 64, 24, 24]). This times, per
shape and layout, each graph-replayed 200 times (CUDA events; microseconds per call):
  autograd   conv2d's backward (aten::convolution_backward, weight and bias gradients) minus the
             same for the weight's only (what the bias costs today)
  sum        grad.sum((0, 2, 3)) in float32 accumulation (the one-pass reduction)
  two_stage  the contiguous inner reduction first, then the short outer one (NHWC: [N, HWC] over
             N, then [HW, C] over HW; NCHW: [N, C, HW] over HW, then [N, C] over N), float32
             accumulation throughout
  matmul     cuBLAS: NHWC ones[1, NHW] @ grad[NHW, C]; NCHW grad[NC, HW] @ ones[HW], then over N
and the largest difference of each from `sum` (relative to its largest magnitude).

Usage: python3 bias_grad_bench.py [--iters 200]   (needs CUDA)
"""
import argparse
import json

import torch


def timed(fn, iters):
    """Microseconds per call of fn, captured in a CUDA graph and replayed `iters` times."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    rows = []
    # (input channels, output channels, input spatial size): the seed ConvNet's two convolutions.
    for cin, cout, size in [(1, 32, 28), (32, 64, 26)]:
        for dtype, layout in [(torch.float32, "nchw"), (torch.bfloat16, "nhwc"),
                              (torch.bfloat16, "nchw"), (torch.float32, "nhwc")]:
            fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
            x = torch.randn(128, cin, size, size, device="cuda", dtype=dtype).to(memory_format=fmt)
            w = torch.randn(cout, cin, 3, 3, device="cuda", dtype=dtype).to(memory_format=fmt)
            b = torch.randn(cout, device="cuda", dtype=dtype)
            out = torch.nn.functional.conv2d(x, w, b)
            g = torch.randn_like(out)
            n, c, h, wd = g.shape

            # The backward autograd runs for conv2d, called directly (the autograd engine's
            # streams do not capture in a graph): weight and bias gradients, and the weight's only.
            def backward(bias):
                return torch.ops.aten.convolution_backward(
                    g, x, w, [cout] if bias else None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                    [False, True, bias])

            def with_bias():
                return backward(True)

            def without_bias():
                return backward(False)

            def one_pass():
                return g.sum((0, 2, 3), dtype=torch.float32)

            if layout == "nhwc":
                flat = g.permute(0, 2, 3, 1)  # contiguous [N, H, W, C]
                ones = torch.ones(1, n * h * wd, device="cuda", dtype=dtype)

                def two_stage():
                    inner = flat.reshape(n, h * wd * c).sum(0, dtype=torch.float32)
                    return inner.view(h * wd, c).sum(0)

                def matmul():
                    return (ones @ flat.reshape(n * h * wd, c)).view(c)
            else:
                ones = torch.ones(h * wd, 1, device="cuda", dtype=dtype)

                def two_stage():
                    return g.view(n, c, h * wd).sum(2, dtype=torch.float32).sum(0)

                def matmul():
                    return (g.view(n * c, h * wd) @ ones).view(n, c).float().sum(0)

            reference = one_pass()
            scale = reference.abs().max().item()
            row = {"shape": list(g.shape), "dtype": str(dtype).replace("torch.", ""),
                   "layout": layout,
                   "autograd_bias_us": timed(with_bias, args.iters) - timed(without_bias, args.iters)}
            for name, fn in [("sum", one_pass), ("two_stage", two_stage), ("matmul", matmul)]:
                row[name + "_us"] = timed(fn, args.iters)
                row[name + "_rel_diff"] = (fn().float() - reference).abs().max().item() / scale
            rows.append(row)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
