#!/usr/bin/env python3
"""Checks a finished mpsd job's model as a Python user would load it (model_e2e_test).

  trained_model.py load JOB_DIR
      model.json's Python constructor + torch.load(model.state_dict.pt) + load_state_dict
      (strict), or for a TorchScript job torch.jit.load(model.pt) (which must be in eval mode);
      the logits on model.check.pt's inputs against mpsd's own. Prints one JSON line.
  trained_model.py compare JOB_DIR PRETRAINED.pt
      model.state_dict.pt against the state dict the job started from: which tensors are
      bitwise equal and which moved. Prints one JSON line.
  trained_model.py write-resnet18 OUT.pt CLASSES [CHANNELS]
      a torchvision resnet18 state dict (seeded), with non-trivial BatchNorm statistics.
  trained_model.py write-tinynet OUT.pt CLASSES
      a scripted CNN with dropout and BatchNorm (its eval mode differs from its training mode).
  trained_model.py write-evil OUT.pt
      a pickle that would call print() if it were unpickled by Python: mpsd must refuse it.
  trained_model.py lie IN.pt OUT.pt biggest|cut0|short-storage
      IN.pt rewritten with zipfile to lie about its tensors: the largest tensor's storage record
      holds 8 bytes (biggest), data/0 is cut to 100 bytes (cut0), or fc.bias's storage claims
      one element and holds 4 bytes, so the tensor reaches past it (short-storage). Prints the
      tensor's name and storage key as JSON.

Needs Debian's python3-torch and python3-torchvision.
"""
import json
import os
import sys

import torch


def load(job_dir):
    with open(os.path.join(job_dir, "model.json")) as f:
        card = json.load(f)
    check = torch.load(os.path.join(job_dir, card["files"]["check"]))
    result = {"format": card["format"], "class_names": card["class_names"],
              "mean": card["input"]["mean"], "std": card["input"]["std"],
              "libtorch": card["versions"]["libtorch"], "task": card["training"]["task"]}
    if card["model"]["name"] is None:
        model = torch.jit.load(os.path.join(job_dir, card["files"]["model"]))
        result["training_mode"] = model.training
        result["sha256"] = card["model"]["torchscript_sha256"]
    else:
        import torchvision  # noqa: F401  (the constructor names it)

        # The three lines of docs/job-files.md, "Using a trained model".
        model = eval(card["model"]["python"])
        model.load_state_dict(torch.load(os.path.join(job_dir, card["files"]["state_dict"])))
        model.eval()
        result["python"] = card["model"]["python"]
    with torch.no_grad():
        logits = model(check["inputs"])
    result["examples"] = check["inputs"].shape[0]
    result["max_abs_diff"] = (logits - check["logits"]).abs().max().item()
    print(json.dumps(result))


def compare(job_dir, pretrained_path):
    trained = torch.load(os.path.join(job_dir, "model.state_dict.pt"))
    pretrained = torch.load(pretrained_path)
    equal, moved = [], []
    for name, tensor in pretrained.items():
        (equal if torch.equal(trained[name], tensor) else moved).append(name)
    print(json.dumps({"equal": equal, "moved": moved}))


def write_resnet18(path, classes, channels=3):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=classes)
    if channels != 3:
        model.conv1 = torch.nn.Conv2d(channels, 64, 7, 2, 3, bias=False)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.9, 1.1)
    torch.save(model.state_dict(), path)


class TinyNet(torch.nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.drop = torch.nn.Dropout(0.5)
        self.fc = torch.nn.Linear(8, classes)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = x.mean(dim=(2, 3))
        return self.fc(self.drop(x))


def lie(in_path, out_path, mode):
    import pickletools
    import zipfile

    state = torch.load(in_path)
    with zipfile.ZipFile(in_path) as zin:
        entries = [(info, zin.read(info.filename)) for info in zin.infolist()]
    prefix = entries[0][0].filename.split("/")[0] + "/"
    pkl = next(data for info, data in entries if info.filename == prefix + "data.pkl")
    # Each tensor's storage key, in order, and where its claimed size is: the persistent id
    # (MARK 'storage' GLOBAL key 'cpu' numel TUPLE BINPERSID; repeated strings memoised).
    ops = list(pickletools.genops(pkl))
    keys, numel_at = [], {}
    for i, (op, _, _) in enumerate(ops):
        if op.name != "BINPERSID":
            continue
        start = max(j for j in range(i) if ops[j][0].name == "MARK")
        window = ops[start:i]
        key = next(a for o, a, _ in window
                   if o.name.endswith("UNICODE") and a not in ("storage", "cpu"))
        keys.append(key)
        numel_at[key] = [(o, p) for o, a, p in window if isinstance(a, int) and "INT" in o.name][-1]
    names = list(state.keys())
    if mode == "biggest":
        name = max(names, key=lambda n: state[n].numel())
        key = keys[names.index(name)]
        records = {prefix + "data/" + key: b"\0" * 8}
    elif mode == "cut0":
        key = "0"
        name = names[keys.index(key)]
        data = next(d for info, d in entries if info.filename == prefix + "data/0")
        records = {prefix + "data/0": data[:100]}
    elif mode == "short-storage":
        name = "fc.bias"
        key = keys[names.index(name)]
        op, at = numel_at[key]  # BININT1 3: claim 1 element, and hold 4 bytes
        assert op.name == "BININT1", op.name
        pkl = pkl[: at + 1] + bytes([1]) + pkl[at + 2 :]
        records = {prefix + "data/" + key: b"\0" * 4, prefix + "data.pkl": pkl}
    else:
        sys.exit(f"unknown mode {mode}")
    with zipfile.ZipFile(out_path, "w") as zout:
        for info, data in entries:
            zout.writestr(info, records.get(info.filename, data))
    print(json.dumps({"name": name, "key": key, "numel": state[name].numel()}))


class Evil:
    def __reduce__(self):
        return (print, ("executed",))


def main():
    command = sys.argv[1]
    if command == "load":
        load(sys.argv[2])
    elif command == "compare":
        compare(sys.argv[2], sys.argv[3])
    elif command == "write-resnet18":
        write_resnet18(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 3)
    elif command == "write-tinynet":
        torch.jit.script(TinyNet(int(sys.argv[3]))).save(sys.argv[2])
    elif command == "lie":
        lie(sys.argv[2], sys.argv[3], sys.argv[4])
    elif command == "write-evil":
        torch.save({"conv1.weight": torch.zeros(1), "x": Evil()}, sys.argv[2])
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
