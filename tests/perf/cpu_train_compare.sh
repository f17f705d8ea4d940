#!/usr/bin/env bash
# Issue 15, item 7: the seed ConvNet's training step on the CPU, batch 128, Adam 1e-3, at the same
# intra-op thread count, in one run on this machine:
#   mpsd      a TrainJob end to end through a real daemon (mpsd on a unix socket, cpu_threads in
#             its config, mpsctl submit --follow --json), device cpu
#   pytorch   Debian's PyTorch (python3-torch, 1.13 on Debian 12) running tests/perf/
#             torch_resident.py --device cpu --threads N: the same model (tests/perf/common.py),
#             the same data resident in memory, randperm + index_select per batch, Adam (foreach)
# Both train on the first LIMIT_TRAIN Fashion-MNIST examples (default 5120 = 40 batches of 128)
# for EPOCHS epochs (default 3); ms per step = the median of epochs 2..N's training seconds / the
# epoch's steps (epoch 1 pays for start-up; the test pass is not timed by either). The machine's
# load average and the BLAS that libblas.so.3 resolves to are printed first: other work on the
# machine distorts both sides alike, but a loaded machine distorts the ratio too, so run it idle.
#
# Usage: tests/perf/cpu_train_compare.sh [BUILD_DIR]   (default ./build; needs server/mpsd,
# client/mpsctl and mpsd-executor built). Knobs: THREADS (default: nproc), EPOCHS, LIMIT_TRAIN,
# MEMORY_FORMAT (contiguous, the default, or channels_last: the job's memory_format and
# torch_resident.py --channels-last, both sides alike),
# DATA (default /usr/share/datasets/fashion-mnist, from the dataset-fashion-mnist package),
# PYTHON (default /usr/bin/python3, Debian's, which has python3-torch), OUT (default
# /tmp/mpsd-cpu-compare: mpsd.log, events.jsonl, torch.json).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(realpath "${1:-$REPO/build}")
THREADS=${THREADS:-$(nproc)}
EPOCHS=${EPOCHS:-3}
LIMIT_TRAIN=${LIMIT_TRAIN:-5120}
BATCH=128
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
MEMORY_FORMAT=${MEMORY_FORMAT:-contiguous}
PY=${PYTHON:-/usr/bin/python3}
OUT=$(realpath -m "${OUT:-/tmp/mpsd-cpu-compare}")
for f in "$BUILD/server/mpsd" "$BUILD/client/mpsctl"; do
  [[ -x $f ]] || { echo "cpu_train_compare: $f is not built" >&2; exit 2; }
done
[[ -d $DATA ]] || { echo "cpu_train_compare: no Fashion-MNIST at $DATA" >&2; exit 2; }
"$PY" -c 'import torch' 2>/dev/null || { echo "cpu_train_compare: $PY has no torch (apt-get install python3-torch)" >&2; exit 2; }

rm -rf "$OUT" && mkdir -p "$OUT/state"
steps=$(( (LIMIT_TRAIN + BATCH - 1) / BATCH ))
echo "cpu_train_compare: $(date -u +%FT%TZ), $(nproc) CPUs, threads $THREADS, $EPOCHS epochs of" \
  "$LIMIT_TRAIN examples ($steps steps of $BATCH), memory format $MEMORY_FORMAT"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "libblas.so.3 -> $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"

# ---- mpsd ---------------------------------------------------------------------------------------
printf 'cpu_threads: %d\n' "$THREADS" > "$OUT/mpsd.yaml"
cat > "$OUT/job.yaml" <<EOF
kind: TrainJob
model: {name: convnet}
dataset: {name: fashion-mnist, root: $DATA, limit_train: $LIMIT_TRAIN, limit_test: 1000}
batch_size: $BATCH
epochs: $EPOCHS
optimizer: {name: adam, learning_rate: 0.001}
seed: 1
device: cpu
memory_format: $MEMORY_FORMAT
EOF
sock="unix://$OUT/mpsd.sock"
"$BUILD/server/mpsd" --config "$OUT/mpsd.yaml" --listen "$sock" --state-dir "$OUT/state" \
  > "$OUT/mpsd.log" 2>&1 &
mpsd_pid=$!
trap 'kill -TERM $mpsd_pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do [[ -S $OUT/mpsd.sock ]] && break; sleep 0.1; done
mpsctl=("$BUILD/client/mpsctl" --server "$sock" --json)
timeout 120 "${mpsctl[@]}" device > "$OUT/device.json"
timeout 600 "${mpsctl[@]}" submit "$OUT/job.yaml" --follow > "$OUT/events.jsonl"
kill -TERM "$mpsd_pid"
wait "$mpsd_pid" || true
trap - EXIT

# ---- Debian's PyTorch -----------------------------------------------------------------------------
(cd "$REPO/tests/perf" && "$PY" torch_resident.py --device cpu --threads "$THREADS" \
  --epochs "$EPOCHS" --batch-size "$BATCH" --lr 0.001 --seed 1 --limit-train "$LIMIT_TRAIN" \
  --idx-dir "$DATA" --json "$OUT/torch.json" --variant cpu \
  $([[ $MEMORY_FORMAT == channels_last ]] && echo --channels-last)) > "$OUT/torch.log" 2>&1 ||
  { cat "$OUT/torch.log"; exit 1; }
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- summary ------------------------------------------------------------------------------------
"$PY" - "$OUT" "$steps" "$THREADS" <<'EOF'
import json, statistics, sys
out, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
device = json.loads(open(f"{out}/device.json").read().splitlines()[0])
epochs = []
summary = {}
for line in open(f"{out}/events.jsonl"):
    event = json.loads(line)
    if "epoch" in event:
        epochs.append(event["epoch"])
    if "summary" in event:
        summary = event["summary"]
if not epochs:
    sys.exit(f"mpsd ran no epoch: see {out}/events.jsonl and {out}/mpsd.log")
mpsd_threads = device.get("cpuThreads", device.get("cpu_threads"))
times = [e.get("epochTimeS", e.get("epoch_time_s")) for e in epochs]
mpsd_s = statistics.median(times[1:] if len(times) > 1 else times)
torch = json.load(open(f"{out}/torch.json"))
torch_s = torch["s_per_epoch"]
mpsd_acc = epochs[-1].get("testAccuracy", epochs[-1].get("test_accuracy", 0))
print(f"{'':8} {'threads':>7} {'ms/step':>8} {'s/epoch':>8} {'test acc':>8}")
print(f"{'mpsd':8} {mpsd_threads:>7} {mpsd_s * 1000 / steps:>8.1f} {mpsd_s:>8.3f} {mpsd_acc:>8.4f}")
print(f"{'pytorch':8} {torch.get('threads', threads):>7} {torch_s * 1000 / steps:>8.1f} "
      f"{torch_s:>8.3f} {torch['test_accuracy']:>8.4f}   (torch {torch['torch']})")
print(f"mpsd / pytorch: {mpsd_s / torch_s:.2f}x (target <= 0.8x)")
EOF
