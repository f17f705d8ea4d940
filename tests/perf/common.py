"""Shared by the PyTorch variants of tests/perf/gpu_train_compare.sh: the seed ConvNet, the
Fashion-MNIST IDX reader, timing helpers and the result file."""

import gzip
import json
import os
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Mean and standard deviation of the Fashion-MNIST training pixels scaled to [0, 1]; the same
# numbers mpsd uses (trainer/datasets.cc).
MEAN, STD = 0.2860, 0.3530


class Net(nn.Module):
    """The seeds' MNIST ConvNet (pytorch/examples mnist): conv 1→32 3×3, ReLU, conv 32→64 3×3,
    ReLU, max-pool 2, Dropout2d 0.25, flatten 9216, linear 128, ReLU, Dropout 0.5, linear 10,
    log-softmax. Same layers as mpsd's `convnet` (trainer/models.cc)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def read_idx(path):
    """An IDX file (.gz or raw) as a numpy array: uint8 images [N, 28, 28] or labels [N]."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find_idx(idx_dir, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(idx_dir, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(os.path.join(idx_dir, stem + "[.gz]"))


def load_split(idx_dir, train):
    prefix = "train" if train else "t10k"
    images = read_idx(find_idx(idx_dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find_idx(idx_dir, f"{prefix}-labels-idx1-ubyte"))
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


def load_resident(idx_dir, device, limit_train=0):
    """Both splits decoded and normalised once, resident on `device`: images [N, 1, 28, 28]
    float32, labels [N] int64; the first `limit_train` training examples only when > 0. Returns
    (train_x, train_y, test_x, test_y, seconds the load took, synchronised)."""
    start = now()

    def to_device(images, labels):
        x = images.to(device).to(torch.float32).div_(255.0).sub_(MEAN).div_(STD)
        return x.unsqueeze(1).contiguous(), labels.to(device)

    train_x, train_y = to_device(*load_split(idx_dir, train=True))
    if limit_train:
        train_x, train_y = train_x[:limit_train], train_y[:limit_train]
    test_x, test_y = to_device(*load_split(idx_dir, train=False))
    sync(device)
    return train_x, train_y, test_x, test_y, now() - start


def add_common_args(parser):
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--idx-dir", required=True, help="directory of the four IDX files")
    parser.add_argument("--json", required=True, help="write the result here")
    parser.add_argument("--device", default="cuda", help="cuda (default); cpu for a smoke test")
    parser.add_argument("--limit-train", type=int, default=0,
                        help="first N training examples only (smoke tests); 0 = all")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def now():
    return time.perf_counter()


def write_result(path, variant, description, epoch_times, test_accuracies, **extra):
    """Seconds per epoch is the median of epochs 2..N (epoch 1 pays for start-up)."""
    steady = epoch_times[1:] if len(epoch_times) > 1 else epoch_times
    result = {
        "variant": variant,
        "description": description,
        "epoch_times_s": epoch_times,
        "s_per_epoch": statistics.median(steady),
        "test_accuracies": test_accuracies,
        "test_accuracy": test_accuracies[-1],
        "torch": torch.__version__,
        **extra,
    }
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))
