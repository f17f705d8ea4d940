#!/usr/bin/env python3
"""Writes the tensors files of examples/regression.yaml and examples/multilabel.yaml.

Two easy synthetic tasks on x float32 [N, 16] (standard normal), as torch.save dicts
{"train": {"x", "y"}, "val": {"x", "y"}, "test": {"x", "y"}} (docs/job-files.md, "Tasks and
losses"):
  DIR/regression.pt  y float32 [N, 2] = x W + 0.5 + noise (standard deviation 0.05), one W for
                     every split: a linear function a small MLP learns to R² ≈ 0.99.
  DIR/multilabel.pt  y float32 [N, 4] of 0 and 1: label k is x[:, k] > 0 (label 3 only where
                     x[:, 3] > 1, a rare label, about 16%: see pos_weight in multilabel.yaml).

Needs PyTorch (Debian: python3-torch).
  python3 examples/make_task_data.py /usr/share/datasets
"""
import argparse
import os

import torch


def regression(generator, n, w):
    x = torch.randn(n, 16, generator=generator)
    y = x @ w + 0.5 + 0.05 * torch.randn(n, 2, generator=generator)
    return {"x": x, "y": y}


def multilabel(generator, n):
    x = torch.randn(n, 16, generator=generator)
    y = torch.stack([x[:, 0] > 0, x[:, 1] > 0, x[:, 2] > 0, x[:, 3] > 1], dim=1)
    return {"x": x, "y": y.float()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="directory to write regression.pt and multilabel.pt into")
    parser.add_argument("--train", type=int, default=2000, help="training examples")
    parser.add_argument("--test", type=int, default=500, help="validation and test examples each")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    generator = torch.Generator().manual_seed(args.seed)
    w = torch.randn(16, 2, generator=generator)
    torch.save({split: regression(generator, n, w)
                for split, n in (("train", args.train), ("val", args.test), ("test", args.test))},
               os.path.join(args.dir, "regression.pt"))
    torch.save({split: multilabel(generator, n)
                for split, n in (("train", args.train), ("val", args.test), ("test", args.test))},
               os.path.join(args.dir, "multilabel.pt"))


if __name__ == "__main__":
    main()
