"""Issue 15, target 5: the PyTorch side of the cifar_cnn row, and the CIFAR-shaped files both
sides read.

--make-files DIR writes CIFAR-10's binary layout (data_batch_1.bin ... data_batch_5.bin,
test_batch.bin; records of 1 label byte + 3,072 image bytes) with random pixels and labels from
a fixed seed: the real set's shapes and sizes (50,000 + 10,000 images), so every step costs what
it costs on CIFAR-10; the accuracies mean nothing.

Otherwise it trains mpsd's cifar_cnn (trainer/models/simple.cc: three blocks of two 3x3 convs
without bias + BatchNorm + ReLU, each block ending in a 2x2 max-pool; linear 2048 -> 384, ReLU,
dropout 0.5, linear 10) as the seeds' CIFAR-10 recipe does: SGD(momentum 0.9, nesterov, weight
decay 5e-4), OneCycleLR(max_lr) over all steps (cycling momentum), batch 128, the dataset
resident on the GPU, each epoch a randperm on the GPU and one gather per batch (the last partial
batch kept, as mpsd does), and with --augment the usual augmentation done on the GPU on whole
batches (RandomCrop(32, padding=4) with the normalised black as fill, RandomHorizontalFlip),
eager. s/epoch = median of epochs 2..N, the training pass alone."""

import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import common

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def make_files(root, seed=1):
    os.makedirs(root, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    for name in names:
        records = torch.randint(0, 256, (10000, 3073), generator=g, dtype=torch.uint8)
        records[:, 0] = torch.randint(0, 10, (10000,), generator=g, dtype=torch.uint8)
        with open(os.path.join(root, name), "wb") as f:
            f.write(records.numpy().tobytes())


def load(root, names, device):
    data = b"".join(open(os.path.join(root, n), "rb").read() for n in names)
    records = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(-1, 3073).to(device)
    labels = records[:, 0].long()
    images = records[:, 1:].view(-1, 3, 32, 32).float().div_(255)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    return images.sub_(mean).div_(std), labels


class CifarCnn(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        layers, c = [], 3
        for width in (32, 64, 128):
            for _ in range(2):
                layers += [nn.Conv2d(c, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                           nn.ReLU(inplace=True)]
                c = width
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(128 * 4 * 4, 384),
                                        nn.ReLU(inplace=True), nn.Dropout(0.5),
                                        nn.Linear(384, classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def augment(x, fill, generator):
    """RandomCrop(32, padding=4) + RandomHorizontalFlip on a whole batch, on the GPU."""
    n, c, h, w = x.shape
    p = 4
    padded = fill.view(1, c, 1, 1).expand(n, c, h + 2 * p, w + 2 * p).clone()
    padded[:, :, p:p + h, p:p + w] = x
    dy = torch.randint(0, 2 * p + 1, (n,), device=x.device, generator=generator)
    dx = torch.randint(0, 2 * p + 1, (n,), device=x.device, generator=generator)
    rows = (dy.view(n, 1) + torch.arange(h, device=x.device)).view(n, 1, h, 1)
    cols = (dx.view(n, 1) + torch.arange(w, device=x.device)).view(n, 1, 1, w)
    band = padded.gather(2, rows.expand(n, c, h, w + 2 * p))
    out = band.gather(3, cols.expand(n, c, h, w))
    flip = torch.rand(n, device=x.device, generator=generator).lt(0.5).view(n, 1, 1, 1)
    return torch.where(flip, out.flip(3), out)


@torch.no_grad()
def evaluate(model, images, labels, batch_size=1000):
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=images.device)
    for start in range(0, len(labels), batch_size):
        correct += model(images[start:start + batch_size]).argmax(1).eq(
            labels[start:start + batch_size]).sum()
    model.train()
    return correct.item() / len(labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--make-files", metavar="DIR")
    parser.add_argument("--root")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--augment", action="store_true")
    parser.add_argument("--variant", default="")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.make_files:
        make_files(args.make_files)
        return 0
    torch.backends.cudnn.benchmark = True   # as mpsd's executor
    torch.manual_seed(args.seed)
    device = torch.device("cuda")
    load_start = common.now()
    train_x, train_y = load(args.root, [f"data_batch_{i}.bin" for i in range(1, 6)], device)
    test_x, test_y = load(args.root, ["test_batch.bin"], device)
    common.sync(device)
    load_s = common.now() - load_start
    model = CifarCnn().to(device)
    n, bs = len(train_y), args.batch_size
    steps = (n + bs - 1) // bs
    optimizer = torch.optim.SGD(model.parameters(), lr=args.max_lr, momentum=0.9, nesterov=True,
                                weight_decay=5e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.max_lr,
                                                   total_steps=steps * args.epochs)
    fill = (-torch.tensor(MEAN) / torch.tensor(STD)).to(device)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)
    torch.cuda.reset_peak_memory_stats(device)
    epoch_times, accuracies = [], []
    for epoch in range(1, args.epochs + 1):
        common.sync(device)
        start = common.now()
        order = torch.randperm(n, device=device, generator=generator)
        for i in range(0, n, bs):
            index = order[i:i + bs]
            x = train_x.index_select(0, index)
            if args.augment:
                x = augment(x, fill, generator)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), train_y.index_select(0, index))
            loss.backward()
            optimizer.step()
            schedule.step()
        common.sync(device)
        epoch_times.append(common.now() - start)
        accuracies.append(evaluate(model, test_x, test_y))
        print(f"epoch {epoch}: {epoch_times[-1]:.3f} s, test accuracy {accuracies[-1]:.4f}",
              flush=True)
    what = ("PyTorch eager, cifar_cnn, CIFAR-shaped random files resident on the GPU, SGD "
            "nesterov + OneCycleLR (foreach)")
    if args.augment:
        what += ", random crop 4 + flip on the GPU per batch"
    common.write_result(args.json, args.variant or "cifar", what, epoch_times, accuracies,
                        data_load_s=load_s, steps_per_epoch=steps,
                        peak_allocated_bytes=torch.cuda.max_memory_allocated(device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
