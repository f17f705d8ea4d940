"""Inputs for tests/e2e/eval_e2e_test.cc's predict tests, from Fashion-MNIST's test split.

  predict_inputs.py DIR N            DIR/images/img_<i>.png (the first N test images, 8-bit
                                     grayscale PNG written by Pillow), DIR/inputs.pt
                                     (torch.save(uint8 [N, 1, 28, 28]) of the same pixels)
  predict_inputs.py DIR N --labels L DIR/labelled.pt: a `tensors` dataset of the same N images
                                     with y = L (comma-separated class indices) in both splits
"""
import argparse
import gzip
import os

import torch
from PIL import Image

IMAGES = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"


def read_images(count):
    with gzip.open(IMAGES, "rb") as f:
        data = f.read()
    # IDX: magic, count, rows, cols (big-endian int32 each), then the pixels.
    return torch.frombuffer(bytearray(data[16:16 + count * 784]), dtype=torch.uint8).reshape(
        count, 1, 28, 28)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("count", type=int)
    parser.add_argument("--labels", default="")
    args = parser.parse_args()
    x = read_images(args.count)
    if args.labels:
        y = torch.tensor([int(v) for v in args.labels.split(",")], dtype=torch.int64)
        split = {"x": x, "y": y}
        torch.save({"train": split, "test": split}, os.path.join(args.dir, "labelled.pt"))
        return
    os.makedirs(os.path.join(args.dir, "images"), exist_ok=True)
    for i in range(args.count):
        Image.frombytes("L", (28, 28), bytes(x[i, 0].flatten().tolist())).save(
            os.path.join(args.dir, "images", "img_%d.png" % i))
    torch.save(x, os.path.join(args.dir, "inputs.pt"))


if __name__ == "__main__":
    main()
