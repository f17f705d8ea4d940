#!/usr/bin/env python3
"""Reads an `mpsctl export --format tensorboard` (or a daemon's tensorboard_dir) with
TensorBoard's own reader and prints what it sees, for a host where TensorBoard is installed
(pip install tensorboard):

  python3 tests/perf/tensorboard_check.py DIR [--expect-steps N]

For each run (a folder holding events.out.tfevents.*): every scalar tag with its count of values,
first and last step and last value; whether a step repeats within a tag; the HParams plugin's
session start (hyperparameters) and end (status). --expect-steps N: exit 1 unless every train/*
tag has exactly N values at N distinct steps in every run. Then `tensorboard --logdir DIR`.
"""
import argparse
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2


def runs_under(root):
    for folder, _, files in sorted(os.walk(root)):
        if any(name.startswith("events.out.tfevents.") for name in files):
            yield folder


def check_run(folder, expect_steps):
    accumulator = EventAccumulator(folder, size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    problems = []
    print(f"run {os.path.relpath(folder)}")
    for tag in sorted(accumulator.Tags()["scalars"]):
        values = accumulator.Scalars(tag)
        steps = [v.step for v in values]
        repeated = len(steps) - len(set(steps))
        print(f"  {tag:32s} n={len(values):7d} steps {steps[0]}..{steps[-1]} "
              f"last={values[-1].value:.6g}" + (f"  REPEATED {repeated}" if repeated else ""))
        if repeated:
            problems.append(f"{folder}: {tag}: {repeated} repeated steps")
        if expect_steps is not None and tag.startswith("train/") and (
                len(values) != expect_steps or len(set(steps)) != expect_steps):
            problems.append(f"{folder}: {tag}: {len(values)} values, want {expect_steps}")
    for tag in accumulator.Tags().get("tensors", []):
        if not tag.startswith("_hparams_/"):
            continue
        content = accumulator.SummaryMetadata(tag).plugin_data.content
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.HasField("session_start_info"):
            hparams = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
                       for k, v in data.session_start_info.hparams.items()}
            print(f"  {tag}: {len(hparams)} hparams: " +
                  ", ".join(f"{k}={hparams[k]}" for k in sorted(hparams)))
        elif data.HasField("session_end_info"):
            print(f"  {tag}: status {data.session_end_info.status}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--expect-steps", type=int)
    args = parser.parse_args()
    problems = []
    runs = list(runs_under(args.dir))
    if not runs:
        problems.append(f"{args.dir}: no events.out.tfevents.* files")
    for folder in runs:
        problems += check_run(folder, args.expect_steps)
    for problem in problems:
        print("FAIL:", problem)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
