#!/usr/bin/env python3
"""Writes a small "your own data" data set in both formats mpsd reads, for the examples and tests.

An easy synthetic task: each class is a colour (red, green, blue, ...); each image is that colour
plus noise and a random darker rectangle, of a random size (mixed sizes before resizing), saved
as PNG or JPEG. Written as
  ROOT/train/<class>/*.png|*.jpg and ROOT/val/<class>/*     (the image_folder dataset)
  TENSORS (optional)                                          (the tensors dataset): the same
      images resized with PIL to --size x --size (Image.BILINEAR, as mpsd's image_folder does),
      uint8 [N, 3, H, W], labels int64 [N], in ImageFolder's order, and the class names.

Needs Pillow (Debian: python3-pil) and, for --tensors, PyTorch (python3-torch).
  python3 examples/make_own_data.py /tmp/colours --tensors /tmp/colours.pt
"""
import argparse
import os
import random

from PIL import Image

COLOURS = {
    "blue": (40, 60, 200),
    "green": (40, 180, 60),
    "red": (200, 40, 40),
    "yellow": (210, 200, 40),
}


def make_image(rng, colour, width, height):
    image = Image.new("RGB", (width, height))
    pixels = image.load()
    for y in range(height):
        for x in range(width):
            pixels[x, y] = tuple(max(0, min(255, c + rng.randint(-40, 40))) for c in colour)
    x0, y0 = rng.randrange(width // 2), rng.randrange(height // 2)
    for y in range(y0, min(height, y0 + height // 3)):
        for x in range(x0, min(width, x0 + width // 3)):
            pixels[x, y] = tuple(c // 2 for c in pixels[x, y])
    return image


def write_split(rng, root, split, classes, per_class):
    paths = []
    for label, name in enumerate(classes):
        directory = os.path.join(root, split, name)
        os.makedirs(directory, exist_ok=True)
        for i in range(per_class):
            image = make_image(rng, COLOURS[name], rng.randint(12, 40), rng.randint(12, 40))
            extension = "png" if i % 2 == 0 else "jpg"
            path = os.path.join(directory, f"img_{i:03d}.{extension}")
            image.save(path, quality=90) if extension == "jpg" else image.save(path)
            paths.append((path, label))
    return sorted(paths, key=lambda p: (p[1], p[0]))  # ImageFolder's order


def to_tensors(paths, size):
    import torch

    x = torch.empty((len(paths), 3, size, size), dtype=torch.uint8)
    for i, (path, _) in enumerate(paths):
        image = Image.open(path).convert("RGB").resize((size, size), Image.BILINEAR)
        data = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
        x[i] = data.view(size, size, 3).permute(2, 0, 1)
    y = torch.tensor([label for _, label in paths], dtype=torch.int64)
    return x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="directory to write train/ and val/ into")
    parser.add_argument("--tensors", help="also write this torch.save file")
    parser.add_argument("--classes", type=int, default=3, help="2 to 4 (default 3)")
    parser.add_argument("--train-per-class", type=int, default=16)
    parser.add_argument("--val-per-class", type=int, default=6)
    parser.add_argument("--size", type=int, default=16, help="image_size of the tensors file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    classes = sorted(COLOURS)[: args.classes]
    train = write_split(rng, args.root, "train", classes, args.train_per_class)
    val = write_split(rng, args.root, "val", classes, args.val_per_class)
    if args.tensors:
        import torch

        train_x, train_y = to_tensors(train, args.size)
        test_x, test_y = to_tensors(val, args.size)
        torch.save({"train": {"x": train_x, "y": train_y},
                    "test": {"x": test_x, "y": test_y},
                    "classes": classes}, args.tensors)


if __name__ == "__main__":
    main()
