#!/usr/bin/env bash
# Issue 20's GPU figures: on one CUDA machine, build mpsd with the recipe of gpu_train_compare.sh
# (MODE=build, same DEPS argument and knobs), generate an image folder of JPEGs larger than a set
# device budget, and run through a real mpsd:
#   (a) resnet50 at 224×224 on that folder with device_budget_bytes below its size, so "auto"
#       streams it from the host (the results say ERROR if the summary says otherwise); the
#       first job decodes the folder into the cache (its log gives the decode rate);
#   (b) the same job on synthetic data of the same shape and size, resident on the device;
#   (c) the folder job again: the cache is reused (data load time of both printed).
# Prints samples/s of (a)/(c) and (b) (per epoch and the median of the epochs after the first),
# their ratio, and the first pass's decode rate in images/s and images/s per decoding thread
# (one per core).
#
#   tests/perf/image_folder_gpu.sh DEPS     (DEPS as gpu_train_compare.sh: *.deb files, with
#                                             libturbojpeg0(-dev) and libpng16-16/libpng-dev
#                                             among them, and mpsd-src.tar.gz)
# Knobs: OUT (default perf-out-image-folder), WORK (/tmp/mpsd-perf), PYTHON (a python3 with PIL),
# N_TRAIN (12800), N_VAL (1280), CLASSES (10), BATCH (128), EPOCHS (3), BUDGET_BYTES (2 GiB),
# PRECISION (fp32), MODEL (resnet50), IMAGE_SIZE (224), DEVICE (cuda), SKIP_BUILD=1 (reuse
# WORK/build), BUILD_TIMEOUT_S (360), TOTAL_BUDGET_S (530: every step's timeout is cut so that
# the script ends by then, results included), MPS_COMPILE_CHECK (0 here: gpu_train_compare.sh's).
# A job that runs out of time is cancelled, and the results show what it got done.
# Files in $OUT (at most 8): image_folder_gpu.log, build.log, mpsd.log, folder_events.jsonl,
# synthetic_events.jsonl, folder_again_events.jsonl, results.txt.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=$(realpath -m "${OUT:-$REPO/perf-out-image-folder}")
WORK=${WORK:-/tmp/mpsd-perf}
PY=${PYTHON:-python3}
N_TRAIN=${N_TRAIN:-12800}
N_VAL=${N_VAL:-1280}
CLASSES=${CLASSES:-10}
BATCH=${BATCH:-128}
EPOCHS=${EPOCHS:-3}
BUDGET_BYTES=${BUDGET_BYTES:-2147483648}
PRECISION=${PRECISION:-fp32}
MODEL=${MODEL:-resnet50}
IMAGE_SIZE=${IMAGE_SIZE:-224}
DEVICE=${DEVICE:-cuda}
BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-360}
TOTAL_BUDGET_S=${TOTAL_BUDGET_S:-530}
DEADLINE=$((SECONDS + TOTAL_BUDGET_S))
# tmo LIMIT: LIMIT, or less so that 20 s are left for the results before the deadline.
tmo() { local t=$1 left=$((DEADLINE - SECONDS - 20)); ((left < t)) && t=$left; ((t < 5)) && t=5; echo "$t"; }
mkdir -p "$OUT"
exec > >(tee "$OUT/image_folder_gpu.log") 2>&1
say() { printf '\n==== [%s] %s\n' "$(date +%T)" "$*"; }

# ---- build (gpu_train_compare.sh's recipe) ----------------------------------------------------
BUILD="$WORK/build"
if [[ ${SKIP_BUILD:-0} == 1 && -x $BUILD/server/mpsd ]]; then
  say "SKIP_BUILD=1: using $BUILD"
else
  say "build mpsd (MODE=build of gpu_train_compare.sh)"
  MODE=build OUT="$WORK/build-out" WORK="$WORK" PYTHON="$PY" \
    MPS_COMPILE_CHECK=${MPS_COMPILE_CHECK:-0} BUILD_TIMEOUT_S="$(tmo "$BUILD_TIMEOUT_S")" \
    "$REPO/tests/perf/gpu_train_compare.sh" "$@"
  rc=$?
  cp "$WORK/build-out/build.log" "$OUT/build.log" 2>/dev/null
  [[ $rc -eq 0 && -x $BUILD/server/mpsd ]] || { echo "build failed ($rc): see build.log"; exit 1; }
  say "built"
fi
DEPS=$(realpath "${1:-${DEPS:-$REPO/.deps}}")
if compgen -G "$DEPS/*.deb" > /dev/null; then
  PREFIX=${PREFIX:-/opt/deps}
  export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# What the executor links, and whether the loader finds all of it (libturbojpeg, libpng).
ldd "$BUILD/trainer/mpsd-executor" | grep -E 'not found|turbojpeg|png|libssl|libcrypto|libtorch_cuda'

# ---- the image folder ---------------------------------------------------------------------------
DATA="$WORK/data/image-folder-$N_TRAIN-$N_VAL-$CLASSES"
if [[ ! -e $DATA/.complete ]]; then
  say "writing $N_TRAIN + $N_VAL JPEGs of 200-320 pixels a side, $CLASSES classes, into $DATA"
  rm -rf "$DATA"
  timeout "$(tmo 150)" "$PY" - "$DATA" "$N_TRAIN" "$N_VAL" "$CLASSES" <<'EOF' || exit 1
import multiprocessing, os, random, sys
from PIL import Image, ImageDraw
root, n_train, n_val, classes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def make(job):
    path, label, seed = job
    rng = random.Random(seed)
    w, h = rng.randint(200, 320), rng.randint(200, 320)
    image = Image.new("RGB", (w, h), tuple((label * 53 + k * 97) % 256 for k in range(3)))
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x, y = rng.randrange(w), rng.randrange(h)
        draw.ellipse([x, y, x + rng.randint(8, 90), y + rng.randint(8, 90)],
                     fill=tuple(rng.randrange(256) for _ in range(3)))
    image.save(path, quality=90)

jobs = []
for split, n, offset in (("train", n_train, 0), ("val", n_val, 10**8)):
    for i in range(n):
        label = i % classes
        directory = os.path.join(root, split, f"class{label:03d}")
        os.makedirs(directory, exist_ok=True)
        jobs.append((os.path.join(directory, f"{i:07d}.jpg"), label, offset + i))
with multiprocessing.Pool() as pool:
    pool.map(make, jobs, chunksize=64)
EOF
  touch "$DATA/.complete"
fi
du -sh "$DATA"
echo "resident as float32 at ${IMAGE_SIZE}x$IMAGE_SIZE: $(( (N_TRAIN + N_VAL) * 3 * IMAGE_SIZE * IMAGE_SIZE * 4 / 1048576 )) MiB; budget $((BUDGET_BYTES / 1048576)) MiB"

# ---- the jobs -----------------------------------------------------------------------------------
RUN="$WORK/image-folder-run"
rm -rf "$RUN" && mkdir -p "$RUN/state"
SOCK="unix://$RUN/mpsd.sock"
COMMON="batch_size: $BATCH
epochs: $EPOCHS
optimizer: {name: sgd, learning_rate: 0.1, momentum: 0.9, weight_decay: 0.0001}
precision: $PRECISION
seed: 1
device: $DEVICE"
cat > "$RUN/folder.yaml" <<EOF
kind: TrainJob
model: {name: $MODEL}
dataset:
  name: image_folder
  root: $DATA
  image_folder: {image_size: [$IMAGE_SIZE, $IMAGE_SIZE]}
  device_budget_bytes: $BUDGET_BYTES
$COMMON
EOF
cat > "$RUN/synthetic.yaml" <<EOF
kind: TrainJob
model: {name: $MODEL}
dataset:
  name: synthetic
  synthetic: {input_shape: [3, $IMAGE_SIZE, $IMAGE_SIZE], num_classes: $CLASSES, train_examples: $N_TRAIN, test_examples: $N_VAL}
$COMMON
EOF
"$BUILD/server/mpsd" --listen "$SOCK" --state-dir "$RUN/state" > "$OUT/mpsd.log" 2>&1 &
mpsd_pid=$!
for _ in $(seq 600); do [[ -S $RUN/mpsd.sock ]] && break; sleep 0.1; done
MPSCTL=("$BUILD/client/mpsctl" --server "$SOCK" --json)
# The synthetic job second, so that a run short of time still has one job of each kind.
for job in folder:folder synthetic:synthetic folder_again:folder; do
  name=${job%%:*} file=${job##*:}
  say "job $name ($file.yaml)"
  timeout "$(tmo 600)" "${MPSCTL[@]}" submit "$RUN/$file.yaml" --follow > "$OUT/${name}_events.jsonl"
  rc=$?
  echo "exit $rc"
  if [[ $rc -eq 124 ]]; then
    # Out of time: cancel it, so that the next job does not queue behind it.
    id=$("$PY" -c 'import json,sys; print(json.loads(sys.stdin.readline())["job_id"])' \
           < "$OUT/${name}_events.jsonl" 2>/dev/null)
    [[ -n $id ]] && timeout 20 "${MPSCTL[@]}" cancel "$id"
  fi
  grep -v '"step"' "$OUT/${name}_events.jsonl" | cut -c1-400
done
kill -TERM "$mpsd_pid"
wait "$mpsd_pid"

# ---- results --------------------------------------------------------------------------------------
say "results"
"$PY" - "$OUT" "$(nproc)" <<'EOF' | tee "$OUT/results.txt"
import json, re, statistics, sys
out, cores = sys.argv[1], int(sys.argv[2])

def load(name):
    events = []
    for line in open(f"{out}/{name}_events.jsonl"):
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    epochs = [e["epoch"] for e in events if "epoch" in e]
    summary = next((e["summary"] for e in events if "summary" in e), {})
    logs = [e["log"].get("text", "") for e in events if "log" in e]
    return epochs, summary, logs

rows = {}
for name in ("folder", "synthetic", "folder_again"):
    epochs, summary, logs = load(name)
    rates = [e.get("samples_per_second", 0.0) for e in epochs]
    steady = statistics.median(rates[1:]) if len(rates) > 1 else (rates[0] if rates else 0.0)
    rows[name] = steady
    print(f"{name:13s} placement {summary.get('data_placement', '-'):9s} data load "
          f"{summary.get('data_load_time_s', 0.0):7.2f} s  samples/s per epoch "
          f"{', '.join(f'{r:,.0f}' for r in rates)}  (steady: {steady:,.0f})  test accuracy "
          f"{summary.get('test_accuracy', 0.0):.3f}")
    for text in logs:
        if "decoded" in text or "placement" in text or "decode cache" in text:
            print(f"    {text}")
    if name == "folder":
        if summary.get("data_placement") != "streamed":
            print("    ERROR: the folder job did not stream (placement "
                  f"{summary.get('data_placement')!r}); lower BUDGET_BYTES")
        for text in logs:
            m = re.search(r"train: decoded (\d+) images in ([\d.]+) s on (\d+) threads", text)
            if m:
                n, s, t = int(m.group(1)), float(m.group(2)), int(m.group(3))
                print(f"    first-pass decode: {n / s:,.0f} images/s on {t} threads = "
                      f"{n / s / t:,.0f} images/s per thread ({cores} cores)")
if rows.get("synthetic"):
    for name in ("folder", "folder_again"):
        if rows.get(name):
            print(f"{name} / synthetic samples/s (steady epochs): "
                  f"{rows[name] / rows['synthetic']:.3f}")
EOF
