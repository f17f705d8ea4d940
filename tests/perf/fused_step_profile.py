#!/usr/bin/env python3
"""Issue 31: where the fused ConvNet step's time goes on one CUDA GPU, in PyTorch.

The same program as mpsd's batched fused step (trainer/fused_step.h, trainer/fused_models.cc) for
K seed ConvNets (conv1 1->32, conv2 32->64 as grouped convolutions over [N, K*C, H, W], max pool,
dropout2d 0.25, fc1 9216->128 and fc2 128->10 as baddbmm over [K, N, F], dropout 0.5), one
cross-entropy over [K*N, 10], AdamW with per-trial [K, 1] hyperparameters as
trainer/fused_optimizer.cc computes it. Random data (the kernels do not depend on the values).
Each variant is timed as the whole step captured in one CUDA graph (median of 5 runs of 50
replays, CUDA events), and the default variant is profiled eagerly (torch.profiler: the top
kernels by CUDA time). Variants: NCHW (mpsd's layout), conv1 as im2col + bmm, the 2x2 max pool
as reshape + amax, conv2's weight gradient as unfold + one batched GEMM (GroupedConvWgradGemm;
fp32, and with TF32 matmuls), bf16 autocast (NCHW and channels_last), channels_last for the
convolutions, TF32 matmuls allowed, TF32 off for cuDNN, cuDNN benchmark off, the step without its
optimizer update, and K = 1 and 4. Before timing, GroupedConvWgradGemm's gradients are compared
with autograd's through F.conv2d (largest difference relative to the largest magnitude).

Two more modes for the scaling curve (gpu_fast_path.sh phase k):
  --scaling 1,2,4,8,16,32   per K: the graphed step's ms (and per trial), peak memory, the step's
                            FLOPs (the ConvNet's count by hand; flop_counter's beside it)
                            and the compute floor at the H200's dense TF32 rate (494.7 TFLOP/s,
                            NVIDIA's H200 datasheet: 989 with sparsity)
  --ncu-step K              one eager step of K trials between cudaProfilerStart/Stop, for
                            `ncu --profile-from-start off` (SM use per kernel)

Usage: fused_step_profile.py [--trials 16] [--batch 128] [--json OUT]
       fused_step_profile.py --scaling 1,2,4,8,16,32 [--json OUT]
       ncu --profile-from-start off ... fused_step_profile.py --ncu-step 16
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F


def make_params(k, device):
    g = torch.Generator(device="cpu").manual_seed(0)

    def p(*shape, fan_in):
        bound = 1.0 / fan_in ** 0.5
        return ((torch.rand(*shape, generator=g) * 2 - 1) * bound).to(device).requires_grad_()

    return {
        "conv1.w": p(k * 32, 1, 3, 3, fan_in=9), "conv1.b": p(k * 32, fan_in=9),
        "conv2.w": p(k * 64, 32, 3, 3, fan_in=288), "conv2.b": p(k * 64, fan_in=288),
        "fc1.w": p(k, 128, 9216, fan_in=9216), "fc1.b": p(k, 128, fan_in=9216),
        "fc2.w": p(k, 10, 128, fan_in=128), "fc2.b": p(k, 10, fan_in=128),
    }


def conv1_unfold(x, w, b, k):
    """The 1-channel grouped conv1 as im2col + bmm (tried in mpsd: slower, see SWEEP_RESULTS.md)."""
    n = x.shape[0]
    cols = F.unfold(x, 3).view(n, k, 9, 676).permute(1, 2, 0, 3).reshape(k, 9, n * 676)
    y = torch.baddbmm(b.view(k, 32, 1), w.view(k, 32, 9), cols)
    return y.view(k, 32, n, 26, 26).permute(2, 0, 1, 3, 4).reshape(n, k * 32, 26, 26)


class GroupedConvWgradGemm(torch.autograd.Function):
    """A grouped 3x3 convolution whose weight gradient is one batched GEMM over [N, K] instead of
    cuDNN's per-group kernels: gy [N, K, Cout, L] @ unfold(x) [N, K, L, Cin*9], summed over N
    (split-K by example); the input gradient and the forward stay cuDNN's."""

    @staticmethod
    def forward(ctx, x, w, b, k):
        ctx.save_for_backward(x, w)
        ctx.k = k
        return F.conv2d(x, w, b, groups=k)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        k = ctx.k
        n, cout, length = x.shape[0], w.shape[0] // k, gy.shape[2] * gy.shape[3]
        gx = torch.nn.grad.conv2d_input(x.shape, w, gy, groups=k)
        cols = F.unfold(x, 3).view(n, k, -1, length)
        g = gy.contiguous().view(n, k, cout, length)
        gw = torch.matmul(g, cols.transpose(2, 3)).sum(0)
        return gx, gw.view_as(w), gy.sum((0, 2, 3)), None


def forward(params, x, k, channels_last, keep2d, keep, unfold=False, amax_pool=False,
            wgrad_gemm=False):
    n = x.shape[1]
    x = x.transpose(0, 1).reshape(n, k, 28, 28)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    if unfold:
        x = F.relu(conv1_unfold(x, params["conv1.w"], params["conv1.b"], k))
    else:
        x = F.relu(F.conv2d(x, params["conv1.w"], params["conv1.b"], groups=k))
    if wgrad_gemm:
        x = F.relu(GroupedConvWgradGemm.apply(x, params["conv2.w"], params["conv2.b"], k))
    else:
        x = F.relu(F.conv2d(x, params["conv2.w"], params["conv2.b"], groups=k))
    if amax_pool:  # 2x2 max pool as a reshape + amax (ties share the gradient)
        x = x.reshape(n, k * 64, 12, 2, 12, 2).amax(dim=(3, 5))
    else:
        x = F.max_pool2d(x, 2)
    noise = torch.empty(n, k, 64, device=x.device).bernoulli_(keep2d.view(1, k, 1)).div_(keep2d.view(1, k, 1))
    x = x * noise.view(n, k * 64, 1, 1)
    x = x.reshape(n, k, -1).transpose(0, 1)  # [K, N, 9216]
    x = F.relu(torch.baddbmm(params["fc1.b"].unsqueeze(1), x, params["fc1.w"].transpose(1, 2)))
    noise = torch.empty_like(x).bernoulli_(keep.view(k, 1, 1)).div_(keep.view(k, 1, 1))
    x = x * noise
    return torch.baddbmm(params["fc2.b"].unsqueeze(1), x, params["fc2.w"].transpose(1, 2))


class AdamW:
    """trainer/fused_optimizer.cc's update, rows [K, 1] per hyperparameter."""

    def __init__(self, params, k, device):
        self.params = list(params.values())
        self.k = k
        self.m = [torch.zeros(k, p.numel() // k, device=device) for p in self.params]
        self.v = [torch.zeros(k, p.numel() // k, device=device) for p in self.params]
        lr = torch.linspace(3e-4, 1e-2, k, device=device).view(k, 1)
        self.rows = {"lr": -lr, "wd": 1 - lr * 0.01, "b1": torch.full((k, 1), 0.9, device=device),
                     "omb1": torch.full((k, 1), 0.1, device=device),
                     "b2": torch.full((k, 1), 0.999, device=device),
                     "omb2": torch.full((k, 1), 0.001, device=device),
                     "c2": torch.full((k, 1), 0.5, device=device),
                     "eps": torch.full((k, 1), 1e-8, device=device),
                     "active": torch.ones(k, 1, device=device)}

    @torch.no_grad()
    def step(self):
        r = self.rows
        running = r["active"].gt(0)
        zero = torch.zeros((), device=r["lr"].device)
        for p, m, v in zip(self.params, self.m, self.v):
            pv = p.view(self.k, -1)
            g = torch.where(running, p.grad.view(self.k, -1), zero)
            pv.mul_(r["wd"])
            m.mul_(r["b1"]).addcmul_(g, r["omb1"])
            v.mul_(r["b2"]).addcmul_(g * r["omb2"], g)
            denom = (v.sqrt() / r["c2"]).add_(r["eps"])
            pv.addcdiv_(m * r["lr"], denom)


def make_step(k, n, device, channels_last, optimizer=True, unfold=False, amax_pool=False,
              wgrad_gemm=False, bf16=False):
    params = make_params(k, device)
    opt = AdamW(params, k, device)
    images = torch.rand(60000, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (60000,), device=device)
    index = torch.randint(0, 60000, (k, n), device=device)
    keep2d = torch.full((k,), 0.75, device=device)
    keep = torch.full((k,), 0.5, device=device)

    def step():
        for p in params.values():
            p.grad = None
        flat = index.reshape(-1)
        x = images.index_select(0, flat).view(k, n, 1, 28, 28)
        y = labels.index_select(0, flat).view(k, n)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            logits = forward(params, x, k, channels_last, keep2d, keep, unfold, amax_pool,
                             wgrad_gemm)
        losses = F.cross_entropy(logits.float().reshape(k * n, 10), y.reshape(-1),
                                 reduction="none").view(k, n).mean(1)
        losses.sum().backward()
        if optimizer:
            opt.step()
        return losses.detach()

    return step


def time_graphed(step, replays=50, runs=5):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            g.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / replays)
    return statistics.median(times)


H200_DENSE_TF32 = 494.7e12  # FLOP/s, NVIDIA H200 SXM datasheet (989.4 with sparsity)
# The seed ConvNet's multiply-adds per example, forward: conv1 26*26*32*9, conv2 24*24*64*288,
# fc1 9216*128, fc2 128*10; a FLOP is 2 per multiply-add, and forward + backward ~3x forward.
CONVNET_FLOP_PER_EXAMPLE = 3 * 2 * (26 * 26 * 32 * 9 + 24 * 24 * 64 * 288 + 9216 * 128 + 128 * 10)


def step_flops(step, k, n):
    """The step's FLOPs by hand (K x N x CONVNET_FLOP_PER_EXAMPLE), and torch.utils.flop_counter's
    count beside it: on PyTorch 2.11 that grows as K^2 (9.2 GFLOP at K = 1, 3,039 at K = 32; the
    hand count at K = 1 is 9.2), i.e. it counts a grouped convolution's backward as if
    ungrouped, so the hand count is the one used for the floor."""
    counted = None
    try:
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as counter:
            step()
        counted = counter.get_total_flops()
    except Exception:  # noqa: BLE001  (older PyTorch)
        pass
    return k * n * CONVNET_FLOP_PER_EXAMPLE, counted


def scaling(ks, n, device, json_path):
    torch.backends.cudnn.benchmark = True
    rows = []
    for k in ks:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        step = make_step(k, n, device, False)
        ms = time_graphed(step)
        peak = torch.cuda.max_memory_allocated()
        flops, counted = step_flops(step, k, n)
        floor_ms = flops / H200_DENSE_TF32 * 1e3
        rows.append({"trials": k, "ms_per_step": ms, "ms_per_trial_step": ms / k,
                     "peak_allocated_bytes": peak, "flops_per_step": flops,
                     "flop_counter_flops": counted, "floor_ms": floor_ms,
                     "achieved_tflops": flops / ms / 1e9})
        print(f"K={k:3d}: {ms:8.3f} ms/step, {ms / k:.3f} per trial, peak {peak / 2**20:8.1f} MiB, "
              f"{flops / 1e9:.1f} GFLOP (flop_counter: {counted}), floor {floor_ms:.3f} ms, "
              f"{flops / ms / 1e9:.1f} TFLOP/s", flush=True)
        del step
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"batch": n, "rows": rows}, f, indent=1)


def ncu_step(k, n, device):
    torch.backends.cudnn.benchmark = True
    step = make_step(k, n, device, False)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--json")
    ap.add_argument("--scaling", help="K values, e.g. 1,2,4,8,16,32")
    ap.add_argument("--ncu-step", type=int, help="K: one eager step for ncu")
    a = ap.parse_args()
    device = torch.device("cuda")
    if a.scaling:
        return scaling([int(v) for v in a.scaling.split(",")], a.batch, device, a.json)
    if a.ncu_step:
        return ncu_step(a.ncu_step, a.batch, device)
    k, n = a.trials, a.batch
    torch.backends.cudnn.benchmark = True
    results = {}

    def row(name, ms):
        results[name] = ms
        print(f"{name:58s} {ms:8.3f} ms/step  ({ms / k:.3f} ms per trial-step)", flush=True)

    # GroupedConvWgradGemm against autograd through the grouped convolution (fp32, no TF32).
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(8, k * 32, 26, 26, generator=gen).to(device).requires_grad_()
    w = (torch.randn(k * 64, 32, 3, 3, generator=gen) * 0.05).to(device).requires_grad_()
    b = torch.randn(k * 64, generator=gen).to(device).requires_grad_()
    gy = torch.randn(8, k * 64, 24, 24, generator=gen).to(device)
    ref = torch.autograd.grad(F.conv2d(x, w, b, groups=k), (x, w, b), gy)
    got = torch.autograd.grad(GroupedConvWgradGemm.apply(x, w, b, k), (x, w, b), gy)
    rel = {name: ((r - g).abs().max() / r.abs().max()).item()
           for name, r, g in zip(("input", "weight", "bias"), ref, got)}
    print(f"GroupedConvWgradGemm vs autograd, largest relative difference: {rel}", flush=True)
    results["wgrad_gemm_check"] = rel
    torch.backends.cudnn.allow_tf32 = True

    row("nchw (mpsd's layout), cudnn.benchmark", time_graphed(make_step(k, n, device, False)))
    row("nchw, conv1 as unfold + bmm",
        time_graphed(make_step(k, n, device, False, unfold=True)))
    row("nchw, conv1 unfold + max pool as reshape/amax",
        time_graphed(make_step(k, n, device, False, unfold=True, amax_pool=True)))
    row("nchw, conv2 weight grad as unfold + batched GEMM",
        time_graphed(make_step(k, n, device, False, wgrad_gemm=True)))
    row("nchw, bf16 autocast", time_graphed(make_step(k, n, device, False, bf16=True)))
    row("channels_last, bf16 autocast", time_graphed(make_step(k, n, device, True, bf16=True)))
    row("nchw, no optimizer update", time_graphed(make_step(k, n, device, False, optimizer=False)))
    row("channels_last convolutions", time_graphed(make_step(k, n, device, True)))
    torch.backends.cuda.matmul.allow_tf32 = True
    row("nchw + TF32 matmuls", time_graphed(make_step(k, n, device, False)))
    row("channels_last + TF32 matmuls", time_graphed(make_step(k, n, device, True)))
    row("nchw + TF32 matmuls, conv2 weight grad as GEMM",
        time_graphed(make_step(k, n, device, False, wgrad_gemm=True)))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    row("nchw, TF32 off for cuDNN too (pure fp32)", time_graphed(make_step(k, n, device, False)))
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    row("nchw, cudnn.benchmark off", time_graphed(make_step(k, n, device, False)))
    torch.backends.cudnn.benchmark = True
    for kk in (1, 4):
        row(f"K={kk} nchw", time_graphed(make_step(kk, n, device, False)))

    # Where an eager step's CUDA time goes (default settings, NCHW: mpsd's form).
    step = make_step(k, n, device, False)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    try:
        table = prof.key_averages().table(sort_by="device_time_total", row_limit=14,
                                          max_name_column_width=70)
    except Exception:  # noqa: BLE001  (older PyTorch: cuda_time_total)
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=14,
                                          max_name_column_width=70)
    print(table)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"trials": k, "batch": n, "ms_per_step": results, "profile": table}, f, indent=1)


if __name__ == "__main__":
    main()
