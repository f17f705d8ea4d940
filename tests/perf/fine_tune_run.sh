#!/usr/bin/env bash
# Fine-tuning from pretrained weights, end to end through a real mpsd on the CPU (issue 28's
# measurement): Fashion-MNIST split into two tasks written as PNG image folders,
#   task A: classes 0-4 (T-shirt, Trouser, Pullover, Dress, Coat), the pretraining task;
#   task B: classes 5-9 (Sandal, Shirt, Sneaker, Bag, Ankle boot), few examples per class;
# both with class directories c0..c4, so that a model of one runs on the other unchanged.
#   1. pretrain `convnet` on A; its model.state_dict.pt is the "pretrained weights";
#   2. EvalJob: the pretrained model on B's test split before any fine-tuning (its head maps
#      A's classes, so B's accuracy is near chance);
#   3. fine-tune on B from those weights with conv1/conv2 frozen (model.weights, freeze);
#   4. the same job from random weights (frozen random convolutions: the features' worth);
#   5. all of the model trained from the pretrained weights (no freeze);
# then checks with Python (Debian's torch) that the frozen parameters of job 3 are bitwise the
# pretrained ones and the head moved, and prints one table.
# Usage: tests/perf/fine_tune_run.sh BUILD_DIR [OUT_DIR]. Env: TRAIN_B (examples per class of
# task B's training split, default 100), EPOCHS_B (default 5). The executor uses every CPU.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(realpath "${1:?usage: fine_tune_run.sh BUILD_DIR [OUT_DIR]}")
OUT=$(realpath -m "${2:-/tmp/mpsd-fine-tune}")
TRAIN_B=${TRAIN_B:-100}
EPOCHS_B=${EPOCHS_B:-5}
mkdir -p "$OUT"
RUN=$(mktemp -d)
trap 'kill -TERM "${mpsd_pid:-0}" 2>/dev/null; wait 2>/dev/null; rm -rf "$RUN"' EXIT

/usr/bin/python3 - "$RUN/data" "$TRAIN_B" <<'PY'
import gzip, os, struct, sys
from PIL import Image
root, train_b = sys.argv[1], int(sys.argv[2])
src = "/usr/share/datasets/fashion-mnist"
def idx(name):
    path = os.path.join(src, name)
    opener = gzip.open if not os.path.exists(path) else open
    with opener(path if os.path.exists(path) else path + ".gz", "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return data[4 + 4 * dims:], shape
def write(task, split, images, labels, classes, per_class):
    count = {c: 0 for c in classes}
    for i, label in enumerate(labels):
        if label not in count or count[label] >= per_class:
            continue
        d = os.path.join(root, task, split, "c%d" % classes.index(label))
        os.makedirs(d, exist_ok=True)
        Image.frombytes("L", (28, 28), images[i * 784:(i + 1) * 784]).save(
            os.path.join(d, "%05d.png" % i))
        count[label] += 1
train_x, _ = idx("train-images-idx3-ubyte")
train_y, _ = idx("train-labels-idx1-ubyte")
test_x, _ = idx("t10k-images-idx3-ubyte")
test_y, _ = idx("t10k-labels-idx1-ubyte")
write("a", "train", train_x, train_y, [0, 1, 2, 3, 4], 1000)
write("a", "test", test_x, test_y, [0, 1, 2, 3, 4], 200)
write("b", "train", train_x, train_y, [5, 6, 7, 8, 9], train_b)
write("b", "test", test_x, test_y, [5, 6, 7, 8, 9], 1000)
PY

"$BUILD/server/mpsd" --listen "unix://$RUN/mpsd.sock" --state-dir "$RUN/state" \
  > "$OUT/mpsd.log" 2>&1 &
mpsd_pid=$!
for _ in $(seq 300); do [[ -S $RUN/mpsd.sock ]] && break; sleep 0.1; done
MPSCTL=("$BUILD/client/mpsctl" --server "unix://$RUN/mpsd.sock")

# Fashion-MNIST's mean and std for every job, so the features see the pixels they were trained on.
dataset() {
  echo "dataset: {name: image_folder, root: $RUN/data/$1, mean: [0.2860], std: [0.3530],"
  echo "          image_folder: {image_size: [28, 28], channels: 1}}"
}
submit() {  # NAME, then the job file on stdin; prints the job's id
  cat > "$RUN/$1.yaml"
  "${MPSCTL[@]}" submit "$RUN/$1.yaml" --follow > "$OUT/$1.log" 2>&1 ||
    { echo "fine_tune_run: $1 failed:" >&2; tail -n 20 "$OUT/$1.log" >&2; exit 1; }
  "${MPSCTL[@]}" --json list --limit 1 |
    /usr/bin/python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["jobs"][0]["id"])'
}
train_job() {  # NAME DATA EPOCHS, then extra lines on stdin
  { echo "kind: TrainJob"; echo "model: {name: convnet$4}"; dataset "$2"
    echo "batch_size: 50"; echo "epochs: $3"; echo "optimizer: {name: adam, learning_rate: 0.001}"
    echo "seed: 1"; echo "device: cpu"; cat; } | submit "$1"
}

start=$SECONDS
pretrain=$(train_job pretrain a 3 "" < /dev/null)
"${MPSCTL[@]}" download "$pretrain" model.state_dict.pt -o "$RUN/pretrained.pt" > /dev/null
pretrain_s=$((SECONDS - start))
{ echo "kind: EvalJob"; echo "model: \"$pretrain\""; dataset b; echo "split: test"
  echo "batch_size: 500"; echo "device: cpu"; } | submit before_b > /dev/null
weights=", weights: $RUN/pretrained.pt"
frozen=$(echo "freeze: [conv1., conv2.]" | train_job frozen b "$EPOCHS_B" "$weights")
"${MPSCTL[@]}" download "$frozen" model.state_dict.pt -o "$RUN/frozen.pt" > /dev/null
echo "freeze: [conv1., conv2.]" | train_job scratch_frozen b "$EPOCHS_B" "" > /dev/null
train_job full b "$EPOCHS_B" "$weights" < /dev/null > /dev/null
train_job scratch_full b "$EPOCHS_B" "" < /dev/null > /dev/null

/usr/bin/python3 - "$RUN/pretrained.pt" "$RUN/frozen.pt" <<'PY' | tee "$OUT/weights.txt"
import sys, torch
before, after = torch.load(sys.argv[1]), torch.load(sys.argv[2])
for name in before:
    same = torch.equal(before[name], after[name])
    print("%-12s %s" % (name, "bitwise unchanged" if same else
                         "moved (max |diff| %.3g)" % (before[name] - after[name]).abs().max()))
PY
accuracy() {  # the last "test" accuracy an mpsctl log printed, in percent
  /usr/bin/python3 - "$OUT/$1.log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
found = re.findall(r"(?:test_)?accuracy[ =:]+([0-9.]+)(%?)", text)
value, percent = found[-1]
print("%.1f" % (float(value) if percent else 100 * float(value)))
PY
}
echo
echo "| job | task B test accuracy (%) |"
echo "|---|---:|"
echo "| pretrained on A, before fine-tuning (EvalJob) | $(accuracy before_b) |"
echo "| fine-tuned, conv1/conv2 frozen (from A's weights) | $(accuracy frozen) |"
echo "| same, from random weights (frozen random convs) | $(accuracy scratch_frozen) |"
echo "| fine-tuned, all parameters (from A's weights) | $(accuracy full) |"
echo "| trained from random weights, all parameters | $(accuracy scratch_full) |"
echo
echo "task A: 5,000 train / 1,000 test; task B: $((5 * TRAIN_B)) train / 5,000 test;" \
  "$EPOCHS_B epochs on B; pretraining took ${pretrain_s} s; all in $((SECONDS - start)) s"
