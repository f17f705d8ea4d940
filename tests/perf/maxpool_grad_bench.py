#!/usr/bin/env python3
"""Issue 32: what the seed ConvNet's max-pool backward costs on the GPU, and a cheaper way.

The ConvNet pools conv2's output [128, 64, 24, 24] with a 2×2 window, stride 2 (non-overlapping
windows). PyTorch's backward (max_pool_backward_nchw / _nhwc) runs one thread per *input*
element, each looking for the windows that chose it: 4.7M threads for 1.2M gradients. With
non-overlapping windows every input element is in at most one window, so the same gradient is a
scatter of the 1.2M output gradients to the indices the forward chose, into zeros: bit-exact.
Times, per dtype and layout, each graph-replayed (CUDA events; microseconds per call):
  autograd   aten::max_pool2d_with_indices_backward (what autograd runs today)
  scatter    zeros in the input's layout, then scatter_ of the gradient to the saved indices
             (NCHW: [N, C, H*W] along dim 2; NHWC: [N, H*W, C] along dim 1)
and whether the two are bitwise equal.

Usage: python3 maxpool_grad_bench.py [--iters 200]   (needs CUDA)
"""
import argparse
import json

import torch

from bias_grad_bench import timed


def scatter_backward(grad, x, indices):
    """The max-pool's input gradient for non-overlapping windows: zeros, then each output
    gradient written to the input element its window chose (indices: the plane's flat h * W + w,
    as max_pool2d_with_indices returns them)."""
    n, c, h, w = x.shape
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        out = torch.zeros_like(x, memory_format=torch.channels_last)
        flat = out.permute(0, 2, 3, 1).view(n, h * w, c)
        flat.scatter_(1, indices.permute(0, 2, 3, 1).reshape(n, -1, c),
                      grad.permute(0, 2, 3, 1).reshape(n, -1, c))
        return out
    out = torch.zeros_like(x, memory_format=torch.contiguous_format)
    out.view(n, c, h * w).scatter_(2, indices.reshape(n, c, -1), grad.reshape(n, c, -1))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    for dtype, layout in [(torch.float32, "nchw"), (torch.bfloat16, "nhwc"),
                          (torch.bfloat16, "nchw"), (torch.float32, "nhwc")]:
        fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
        x = torch.randn(128, 64, 24, 24, device="cuda", dtype=dtype).to(memory_format=fmt)
        out, indices = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
        grad = torch.randn_like(out)

        def autograd():
            return torch.ops.aten.max_pool2d_with_indices_backward(
                grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)

        def scatter():
            return scatter_backward(grad, x, indices)

        row = {"shape": list(x.shape), "dtype": str(dtype).replace("torch.", ""), "layout": layout,
               "indices_layout": "nhwc" if indices.is_contiguous(
                   memory_format=torch.channels_last) and not indices.is_contiguous() else "nchw",
               "autograd_us": timed(autograd, args.iters), "scatter_us": timed(scatter, args.iters),
               "bitwise_equal": bool(torch.equal(autograd(), scatter()))}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
