#!/usr/bin/env python3
"""Writes files that lie about themselves, for lying_files_e2e_test (issue 26, item 7).

  lying_files.py DIR

writes into DIR:
  tinynet.pt            a scripted CNN (3 input channels, 4 classes), honest
  script-cut.pt         tinynet.pt with its largest data/ record cut to 8 bytes
  script-constant.pt    a traced model whose constants/0 record (a 16-element constant) is cut
                        to 4 bytes
  script-bomb.pt        tinynet.pt plus an entry of 2 MiB of zeros, deflated to a few KiB
  tensors-cut.pt        a tensors file (train/test x [N, 3, 8, 8], y) whose train x record is cut
                        to 8 bytes
  tensors-deflated.pt   the same file with its data/ records deflated (torch never compresses)
  tensors-big.pt        an honest tensors file of about 1.6 MB
  tensors.pt            an honest tensors file of a few KiB
  reads-file.pt         a scripted model whose forward reads /etc/hostname with torch.from_file
  printer.pt            a scripted model that prints a line with a newline and an escape code
  long-classes.pt       an honest tensors file whose class names are 300 bytes each
  idx/                  Fashion-MNIST-named IDX files whose image header claims [100000, 28, 28]
                        (78 MB) in front of 10 images
  pixels/               an image folder (train/ and test/, 2 classes) with one 100x100 PNG
                        among 8x8 ones

Needs Debian's python3-torch (and python3-pil for the PNGs).
"""
import gzip
import os
import struct
import sys
import zipfile

import torch


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


class ReadsFile(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3 * 8 * 8, 4)

    def forward(self, x):
        secret = torch.from_file("/etc/hostname", False, 4, dtype=torch.uint8)
        return self.fc(x.flatten(1)) + secret.float().sum()


class Printer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3 * 8 * 8, 4)

    def forward(self, x):
        print("hello\n[2026-01-01 00:00:00.000] [mpsd] [error] FORGED \x1b[31mred")
        return self.fc(x.flatten(1))


class WithConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3 * 8 * 8, 4)

    def forward(self, x):
        return self.fc(x.flatten(1)) + torch.tensor([float(i) for i in range(16)])[:4]


def rewrite(in_path, out_path, change):
    """Copies the zip at in_path to out_path; change(name, data) → (data, compress_type) or None."""
    with zipfile.ZipFile(in_path) as zin, zipfile.ZipFile(out_path, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            changed = change(info.filename, data)
            if changed is None:
                zout.writestr(info, data)
            else:
                new_data, compress_type = changed
                new_info = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                new_info.compress_type = compress_type
                zout.writestr(new_info, new_data)
        return zout


def largest_record(path, folder):
    with zipfile.ZipFile(path) as z:
        records = [i for i in z.infolist() if i.filename.split("/", 1)[1].startswith(folder)]
        return max(records, key=lambda i: i.file_size).filename


def tensors(n_train, n_test):
    torch.manual_seed(0)
    return {"train": {"x": torch.rand(n_train, 3, 8, 8), "y": torch.arange(n_train) % 4},
            "test": {"x": torch.rand(n_test, 3, 8, 8), "y": torch.arange(n_test) % 4}}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    p = lambda name: os.path.join(out, name)  # noqa: E731

    torch.manual_seed(0)
    torch.jit.script(TinyNet()).save(p("tinynet.pt"))
    cut = largest_record(p("tinynet.pt"), "data/")
    rewrite(p("tinynet.pt"), p("script-cut.pt"),
            lambda name, data: (data[:8], zipfile.ZIP_STORED) if name == cut else None)

    traced = torch.jit.trace(WithConstant(), torch.zeros(1, 3, 8, 8))
    traced.save(p("with-constant.pt"))
    constant = largest_record(p("with-constant.pt"), "constants/")
    rewrite(p("with-constant.pt"), p("script-constant.pt"),
            lambda name, data: (data[:4], zipfile.ZIP_STORED) if name == constant else None)

    prefix = "tinynet/"
    with zipfile.ZipFile(p("tinynet.pt")) as z:
        prefix = z.infolist()[0].filename.split("/")[0] + "/"
    rewrite(p("tinynet.pt"), p("script-bomb.pt"), lambda name, data: None)
    with zipfile.ZipFile(p("script-bomb.pt"), "a") as z:
        info = zipfile.ZipInfo(prefix + "extra/zeros")
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, b"\0" * (2 << 20))

    torch.save(tensors(32, 8), p("tensors.pt"))
    x_record = largest_record(p("tensors.pt"), "data/")
    rewrite(p("tensors.pt"), p("tensors-cut.pt"),
            lambda name, data: (data[:8], zipfile.ZIP_STORED) if name == x_record else None)
    rewrite(p("tensors.pt"), p("tensors-deflated.pt"),
            lambda name, data: (data, zipfile.ZIP_DEFLATED) if "/data/" in name else None)
    torch.save(tensors(2000, 8), p("tensors-big.pt"))
    long_classes = tensors(32, 8)
    long_classes["classes"] = [c * 300 for c in "abcd"]
    torch.save(long_classes, p("long-classes.pt"))
    torch.jit.script(ReadsFile()).save(p("reads-file.pt"))
    torch.jit.script(Printer()).save(p("printer.pt"))

    os.makedirs(p("idx"), exist_ok=True)
    images = struct.pack(">IIII", 0x803, 100000, 28, 28) + bytes(10 * 28 * 28)
    labels = struct.pack(">II", 0x801, 10) + bytes(10)
    for split, n in (("train", 10), ("t10k", 10)):
        with gzip.open(p(f"idx/{split}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(images)
        with gzip.open(p(f"idx/{split}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + bytes(n))
    del labels

    from PIL import Image
    for split in ("train", "test"):
        for cls in ("a", "b"):
            os.makedirs(p(f"pixels/{split}/{cls}"), exist_ok=True)
            for i in range(4):
                Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(p(f"pixels/{split}/{cls}/{i}.png"))
    Image.new("RGB", (100, 100), (0, 0, 255)).save(p("pixels/train/a/big.png"))


if __name__ == "__main__":
    main()
