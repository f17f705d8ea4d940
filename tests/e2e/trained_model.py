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
    elif command == "write-evil":
        torch.save({"conv1.weight": torch.zeros(1), "x": Evil()}, sys.argv[2])
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
