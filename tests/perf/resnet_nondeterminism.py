#!/usr/bin/env python3
"""Issue 31: how far two identical eager PyTorch runs of ResNet-18 drift apart on one CUDA GPU.

mpsd's fused ResNet-18 trials agree between the CUDA graph and the same step run eagerly for the
first steps exactly (TF32 off) and then drift (tests/perf/fused_graph_check.cc, resnet18 cases).
This asks whether plain PyTorch drifts alike: torchvision's resnet18 (1 input channel, 10
classes), SGD (lr as given, no momentum) or AdamW, batch 128 of fixed random images and labels
(the same batches every run), trained twice from the same seed, for each of
cudnn.benchmark on / deterministic algorithms on, TF32 off (as NVIDIA_TF32_OVERRIDE=0) and on.
Prints per setting the largest difference of the two runs' step losses relative to
max(1, |loss|), over steps 1-5 and over all steps, and the losses of steps 1-8 of each run.

Usage: resnet_nondeterminism.py [--steps 30] [--lr 0.01] [--optimizer sgd|adamw] [--json OUT]
"""
import argparse
import json

import torch
import torch.nn.functional as F
import torchvision


def run(steps, lr, optimizer, seed=1):
    torch.manual_seed(seed)
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, 7, 2, 3, bias=False)
    model = model.cuda()
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    g = torch.Generator(device="cpu").manual_seed(7)
    images = torch.rand(steps, 128, 1, 28, 28, generator=g).cuda()
    labels = torch.randint(0, 10, (steps, 128), generator=g).cuda()
    losses = []
    for t in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images[t]), labels[t])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        for deterministic in (False, True):
            torch.backends.cudnn.benchmark = not deterministic
            torch.backends.cudnn.deterministic = deterministic
            first = run(a.steps, a.lr, a.optimizer)
            second = run(a.steps, a.lr, a.optimizer)
            diffs = [abs(x - y) / max(1.0, abs(y)) for x, y in zip(first, second)]
            row = {"tf32": tf32, "deterministic": deterministic, "optimizer": a.optimizer,
                   "lr": a.lr, "max_diff_steps_1_5": max(diffs[:5]), "max_diff": max(diffs),
                   "first": first[:8], "second": second[:8]}
            rows.append(row)
            print(f"tf32 {tf32!s:5} deterministic {deterministic!s:5}: max diff steps 1-5 "
                  f"{row['max_diff_steps_1_5']:.3g}, all {a.steps} steps {row['max_diff']:.3g}\n"
                  f"  run 1 {[round(x, 5) for x in first[:8]]}\n"
                  f"  run 2 {[round(x, 5) for x in second[:8]]}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
