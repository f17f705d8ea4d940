"""Variant (1): the seeds' PyTorch script as written (pytorch/examples mnist, with Adam 1e-3):
torchvision's FashionMNIST dataset read from the IDX files, ToTensor + Normalize, a DataLoader
with num_workers=2 and pin_memory=True, a host sync every 10 batches for the loss log line, and a
test pass after every epoch. If torchvision is missing, a plain Dataset over the same uint8
tensors with the same per-sample transform and the same DataLoader settings stands in (the
result says which).

Seconds per epoch is the training pass alone (DataLoader worker start-up included, as the script
pays it every epoch), synchronised at its end; the test pass is not timed."""

import argparse
import sys

import torch
import torch.nn.functional as F
import torch.optim as optim

import common


class TensorFashionMNIST(torch.utils.data.Dataset):
    """Stand-in for torchvision.datasets.FashionMNIST: same samples, same per-sample transform."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        image = self.images[index].to(torch.float32).div(255.0).unsqueeze(0)
        return (image - common.MEAN) / common.STD, int(self.labels[index])


def datasets(args):
    try:
        from torchvision import datasets as tv_datasets, transforms
    except ImportError as e:
        print(f"torchvision missing ({e}): plain Dataset over the IDX tensors", flush=True)
        return (
            TensorFashionMNIST(*common.load_split(args.idx_dir, train=True)),
            TensorFashionMNIST(*common.load_split(args.idx_dir, train=False)),
            "plain Dataset (torchvision missing)",
        )
    import torchvision

    transform = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((common.MEAN,), (common.STD,))]
    )
    root = args.torchvision_root
    return (
        tv_datasets.FashionMNIST(root, train=True, download=False, transform=transform),
        tv_datasets.FashionMNIST(root, train=False, download=False, transform=transform),
        f"torchvision {torchvision.__version__} FashionMNIST",
    )


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            line = "Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100.0 * batch_idx / len(train_loader), loss.item())
            if batch_idx % (args.log_interval * 10) == 0:  # keep the log short; .item() every 10
                print(line, flush=True)


def test(model, device, test_loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    n = len(test_loader.dataset)
    print(f"Test set: Average loss: {test_loss / n:.4f}, Accuracy: {correct}/{n} "
          f"({100.0 * correct / n:.2f}%)", flush=True)
    return correct / n


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    common.add_common_args(parser)
    parser.add_argument("--torchvision-root", required=True,
                        help="root with FashionMNIST/raw/<uncompressed IDX files>")
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    train_set, test_set, dataset_kind = datasets(args)
    if args.limit_train:
        train_set = torch.utils.data.Subset(train_set, range(args.limit_train))
    loader_kwargs = {"num_workers": 2, "pin_memory": True}
    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=args.batch_size, shuffle=True, **loader_kwargs)
    test_loader = torch.utils.data.DataLoader(
        test_set, batch_size=args.test_batch_size, shuffle=False, **loader_kwargs)

    model = common.Net().to(device)
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    epoch_times, accuracies = [], []
    for epoch in range(1, args.epochs + 1):
        common.sync(device)
        start = common.now()
        train(args, model, device, train_loader, optimizer, epoch)
        common.sync(device)
        epoch_times.append(common.now() - start)
        accuracies.append(test(model, device, test_loader))
        print(f"epoch {epoch}: {epoch_times[-1]:.3f} s, test accuracy {accuracies[-1]:.4f}",
              flush=True)
    common.write_result(
        args.json, "1", "seeds' script: " + dataset_kind + ", DataLoader(num_workers=2, "
        "pin_memory=True), Adam", epoch_times, accuracies, dataset=dataset_kind)


if __name__ == "__main__":
    sys.exit(main())
