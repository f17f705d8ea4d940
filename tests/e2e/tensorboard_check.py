#!/usr/bin/python3
"""An independent reader (and writer) of the TensorBoard event files mpsd writes.

Reads every TFRecord of EVENTS with its own framing code and crcmod's CRC-32C (Debian
python3-crcmod), parses the records with Python classes that protoc generates here from
proto/mpsd/tensorboard/*.proto, and checks them against the job's stored events (STORED: one
JobEvent per line in protobuf's JSON mapping, as the daemon streamed them):
  - the first record is file_version "brain.Event:2";
  - every train/* tag holds each step of the job exactly once (a resumed job's latest attempt),
    with the stored value as float32; every epoch/* tag each epoch exactly once;
  - the HParams session start holds the spec's hyperparameters, the session end the outcome.
With --write, also writes a file of its own (file_version, then step 7 with "py/value" = 0.5 and
"py/other" = -3) for mpsd's reader to read back.

Usage: tensorboard_check.py --proto-root DIR --events FILE --stored FILE [--write FILE]
Exit 0 when every check passed; prints each failure and exits 1 otherwise.
"""
import argparse
import importlib
import json
import os
import struct
import subprocess
import sys
import tempfile

import crcmod.predefined

CRC32C = crcmod.predefined.mkCrcFun("crc-32c")
MASK_DELTA = 0xA282EAD8


def masked_crc(data):
    crc = CRC32C(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def read_records(path):
    with open(path, "rb") as f:
        data = f.read()
    records, offset = [], 0
    while offset < len(data):
        header = data[offset:offset + 12]
        if len(header) < 12:
            raise ValueError(f"{path}: record at byte {offset} is cut short")
        (length,) = struct.unpack("<Q", header[:8])
        (length_crc,) = struct.unpack("<I", header[8:12])
        if length_crc != masked_crc(header[:8]):
            raise ValueError(f"{path}: record at byte {offset}: bad length CRC")
        body = data[offset + 12:offset + 12 + length]
        footer = data[offset + 12 + length:offset + 16 + length]
        if len(body) < length or len(footer) < 4:
            raise ValueError(f"{path}: record at byte {offset} is cut short")
        if struct.unpack("<I", footer)[0] != masked_crc(body):
            raise ValueError(f"{path}: record at byte {offset}: bad data CRC")
        records.append(body)
        offset += 16 + length
    return records


def frame(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack(
        "<I", masked_crc(data))


def generated_modules(proto_root):
    out = tempfile.mkdtemp(prefix="mpsd-tb-py-")
    protos = [os.path.join(proto_root, "mpsd/tensorboard", name)
              for name in ("event.proto", "hparams.proto")]
    subprocess.run(["protoc", f"--proto_path={proto_root}", f"--python_out={out}", *protos],
                   check=True)
    sys.path.insert(0, out)
    return (importlib.import_module("mpsd.tensorboard.event_pb2"),
            importlib.import_module("mpsd.tensorboard.hparams_pb2"))


def f32(value):
    return struct.unpack("<f", struct.pack("<f", float(value)))[0]


def stored_history(path):
    """Steps and epochs as the job's latest attempt left them (a step at or below the newest
    starts a new attempt: the steps from it on and the epochs from its epoch on are dropped)."""
    steps, epochs, state, spec_hint = {}, {}, None, None
    with open(path) as f:
        for line in f:
            event = json.loads(line)
            if "step" in event:
                step = event["step"]
                number = int(step["step"])
                if steps and number <= max(steps):
                    steps = {k: v for k, v in steps.items() if k < number}
                    epochs = {k: v for k, v in epochs.items() if k < int(step.get("epoch", 0))}
                steps[number] = step
            elif "epoch" in event:
                epochs[int(event["epoch"]["epoch"])] = event["epoch"]
            elif "state" in event:
                state = event["state"].get("state")
    return steps, epochs, state


def check(args):
    event_pb2, hparams_pb2 = generated_modules(args.proto_root)
    failures = []
    records = read_records(args.events)
    events = [event_pb2.Event.FromString(r) for r in records]
    if not events or events[0].file_version != "brain.Event:2":
        failures.append("the first record is not file_version brain.Event:2")
    by_tag, plugin = {}, {}
    for event in events:
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name == "hparams":
                data = hparams_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                plugin.setdefault(value.tag, []).append(data)
            elif value.WhichOneof("value") == "simple_value":
                by_tag.setdefault(value.tag, []).append((event.step, value.simple_value))
    steps, epochs, state = stored_history(args.stored)
    for tag, field in (("train/loss", "loss"), ("train/accuracy", "accuracy"),
                       ("train/learning_rate", "learning_rate"),
                       ("train/samples_per_second", "samples_per_second")):
        got = by_tag.get(tag, [])
        if sorted(s for s, _ in got) != sorted(steps):
            failures.append(f"{tag}: steps {sorted(s for s, _ in got)[:5]}... (n={len(got)}), "
                            f"stored {sorted(steps)[:5]}... (n={len(steps)})")
            continue
        for step, value in got:
            if value != f32(steps[step].get(field, 0)):
                failures.append(f"{tag} at step {step}: {value} != stored {steps[step].get(field)}")
    epoch_values = by_tag.get("epoch/epoch", [])
    if sorted(int(v) for _, v in epoch_values) != sorted(epochs):
        failures.append(f"epoch/epoch: {epoch_values} != stored epochs {sorted(epochs)}")
    epoch_at_step = {step: int(value) for step, value in epoch_values}
    test_acc = {epoch_at_step.get(step): value
                for step, value in by_tag.get("epoch/test_accuracy", [])}
    for number, epoch in epochs.items():
        if epoch.get("evaluated") and test_acc.get(number) != f32(epoch.get("test_accuracy", 0)):
            failures.append(f"epoch/test_accuracy of epoch {number}: {test_acc.get(number)} != "
                            f"stored {epoch.get('test_accuracy')}")
    starts = plugin.get("_hparams_/session_start_info", [])
    if len(starts) != 1:
        failures.append(f"{len(starts)} HParams session starts, want 1")
    else:
        hparams = starts[0].session_start_info.hparams
        for name in args.hparam or []:
            key, _, want = name.partition("=")
            got = hparams.get(key)
            text = None if got is None else (got.string_value or str(got.number_value)
                                            if got.WhichOneof("kind") != "bool_value"
                                            else str(got.bool_value).lower())
            if text != want:
                failures.append(f"hparam {key}: {text!r}, want {want!r}")
    ends = plugin.get("_hparams_/session_end_info", [])
    want_status = {"SUCCEEDED": 1, "FAILED": 2, "CANCELLED": 2, "INTERRUPTED": 2}.get(state)
    if want_status and [e.session_end_info.status for e in ends] != [want_status]:
        failures.append(f"session end {[e.session_end_info.status for e in ends]}, "
                        f"want [{want_status}] for {state}")
    print(f"{args.events}: {len(records)} records, {len(by_tag)} scalar tags, "
          f"{len(steps)} steps, {len(epochs)} epochs")
    if args.write:
        first = event_pb2.Event(wall_time=1.5, file_version="brain.Event:2")
        second = event_pb2.Event(wall_time=2.5, step=7)
        second.summary.value.add(tag="py/value", simple_value=0.5)
        second.summary.value.add(tag="py/other", simple_value=-3)
        with open(args.write, "wb") as f:
            f.write(frame(first.SerializeToString()) + frame(second.SerializeToString()))
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--proto-root", required=True)
    parser.add_argument("--events", required=True)
    parser.add_argument("--stored", required=True)
    parser.add_argument("--hparam", action="append", help="NAME=VALUE the session start holds")
    parser.add_argument("--write")
    sys.exit(check(parser.parse_args()))


if __name__ == "__main__":
    main()
