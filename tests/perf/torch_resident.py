"""Variants (2) and (2b): PyTorch eager with the whole Fashion-MNIST dataset resident on the GPU,
decoded and normalised once; each epoch draws a randperm on the GPU and gathers every batch by
index (the last, partial batch included, as mpsd does); no host sync inside an epoch. --fused:
Adam(fused=True) instead of the default (foreach) Adam.

Seconds per epoch is the training pass alone, synchronised at its end; the test pass (batches of
1000, one sync) is not timed."""

import argparse
import sys

import torch
import torch.nn.functional as F

import common


def to_device(images, labels, device):
    x = images.to(device).to(torch.float32).div_(255.0).sub_(common.MEAN).div_(common.STD)
    return x.unsqueeze(1).contiguous(), labels.to(device)


@torch.no_grad()
def evaluate(model, images, labels, batch_size=1000):
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=images.device)
    for start in range(0, len(labels), batch_size):
        logits = model(images[start:start + batch_size])
        correct += logits.argmax(dim=1).eq(labels[start:start + batch_size]).sum()
    model.train()
    return correct.item() / len(labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    common.add_common_args(parser)
    parser.add_argument("--fused", action="store_true", help="Adam(fused=True)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    load_start = common.now()
    train_x, train_y = to_device(*common.load_split(args.idx_dir, train=True), device)
    if args.limit_train:
        train_x, train_y = train_x[:args.limit_train], train_y[:args.limit_train]
    test_x, test_y = to_device(*common.load_split(args.idx_dir, train=False), device)
    common.sync(device)
    load_s = common.now() - load_start

    model = common.Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr,
                                 **({"fused": True} if args.fused else {}))
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)
    n, bs = len(train_y), args.batch_size
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    epoch_times, accuracies = [], []
    for epoch in range(1, args.epochs + 1):
        common.sync(device)
        start = common.now()
        order = torch.randperm(n, device=device, generator=generator)
        for i in range(0, n, bs):
            index = order[i:i + bs]
            optimizer.zero_grad(set_to_none=True)
            loss = F.nll_loss(model(train_x.index_select(0, index)), train_y.index_select(0, index))
            loss.backward()
            optimizer.step()
        common.sync(device)
        epoch_times.append(common.now() - start)
        accuracies.append(evaluate(model, test_x, test_y))
        print(f"epoch {epoch}: {epoch_times[-1]:.3f} s, last loss {loss.item():.4f}, "
              f"test accuracy {accuracies[-1]:.4f}", flush=True)
    variant = "2b" if args.fused else "2"
    description = ("PyTorch eager, data resident on the GPU, randperm + index_select per batch, "
                   + ("Adam(fused=True)" if args.fused else "Adam (default: foreach)"))
    common.write_result(args.json, variant, description, epoch_times, accuracies,
                        data_load_s=load_s,
                        peak_allocated_bytes=(torch.cuda.max_memory_allocated(device)
                                              if device.type == "cuda" else 0),
                        reserved_bytes=(torch.cuda.memory_reserved(device)
                                        if device.type == "cuda" else 0))


if __name__ == "__main__":
    sys.exit(main())
