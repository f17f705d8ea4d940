#!/usr/bin/env bash
# Issue 15 on one CUDA machine with PyTorch 2.x, in one run: builds mpsd against that PyTorch's
# LibTorch (tests/perf/gpu_train_compare.sh MODE=build, whose DEPS recipe this shares), then
#   (a) the CUDA fast path against the eager loop, option by option (build/tests/perf/
#       mpsd_graph_check: 50 steps each way from the same seed; PASS when the graphed job was
#       captured and the step losses agree; graph_check.txt / graph_check.json)
#   (b) the seed ConvNet, Fashion-MNIST, batch 128, 3 epochs, through a real mpsd (mpsctl submit
#       --follow): adam fp32, bf16, channels_last, bf16 + channels_last, and sgd nesterov +
#       onecycle; s/epoch = median of epochs 2..3, with the job's line on the CUDA graph
#   (c) PyTorch on the same data (tests/perf/torch_resident.py): the whole step in one CUDA graph
#       (fused capturable Adam) in fp32, bf16 and bf16 + channels_last, and eager fused Adam in
#       fp32 and bf16
#   (d) ResNet-50 train step, batch 64 (3×224×224, 1000 classes, SGD): an mpsd BenchJob
#       (train_step, fp32 contiguous and bf16 channels_last) against PyTorch eager
#       (tests/perf/torch_bench.py --mode train), 10 warm-up + 30 timed steps each
# and writes $OUT/FAST_PATH.md (tests/perf/summarize_fast_path.py) with every row and ratio.
#
# Usage: tests/perf/gpu_fast_path.sh [DEPS]  (DEPS as gpu_train_compare.sh: *.deb, mpsd-src.tar.gz,
# fashion-mnist/). Knobs: OUT, WORK, JOBS, SKIP_BUILD=1, PHASES (default "a b c d").
# At most 8 files land in $OUT: run.log build.log graph_check.txt graph_check.json mpsd.log
# fast_path.json FAST_PATH.md.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PERF="$REPO/tests/perf"
DEPS=$(realpath "${1:-${DEPS:-$REPO/.deps}}")
OUT=${OUT:-$REPO/perf-out}
WORK=${WORK:-/tmp/mpsd-perf}
PREFIX=${PREFIX:-/opt/deps}
PHASES=${PHASES:-a b c d}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK/fast"
exec > >(tee -a "$OUT/run.log") 2>&1
say() { printf '\n==== [%s] %s\n' "$(date +%T)" "$*"; }
has() { [[ " $PHASES " == *" $1 "* ]]; }

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  say "build (gpu_train_compare.sh MODE=build)"
  OUT="$OUT" WORK="$WORK" MODE=build MPS_COMPILE_CHECK=0 BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-420} \
    TOTAL_BUDGET_S=480 bash "$PERF/gpu_train_compare.sh" "$DEPS" > /dev/null 2>&1
  echo "build exit $?"
  tail -n 15 "$OUT/build.log"
fi
BUILD="$WORK/build"
[[ -x $BUILD/server/mpsd ]] || { echo "no mpsd in $BUILD"; exit 1; }
if compgen -G "$DEPS/*.deb" > /dev/null; then
  export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
IDX_DIR="$WORK/data/fashion-mnist"
mkdir -p "$IDX_DIR" && cp "$DEPS"/fashion-mnist/*-ubyte.gz "$IDX_DIR"/
RAW="$WORK/fast"
rm -f "$RAW"/*.json "$RAW"/*.jsonl

if has a; then
  say "(a) graphed vs eager, option by option"
  timeout 240 "$BUILD/tests/perf/mpsd_graph_check" "$IDX_DIR" "$OUT/graph_check.json" cuda \
    | tee "$OUT/graph_check.txt"
  echo "graph_check exit ${PIPESTATUS[0]}"
fi

if has b; then
  say "(b) ConvNet TrainJobs through mpsd"
  RUN="$WORK/fast-run"
  rm -rf "$RUN" && mkdir -p "$RUN/state"
  "$BUILD/server/mpsd" --listen "unix://$RUN/mpsd.sock" --state-dir "$RUN/state" \
    > "$OUT/mpsd.log" 2>&1 &
  mpsd_pid=$!
  for _ in $(seq 600); do [[ -S $RUN/mpsd.sock ]] && break; sleep 0.1; done
  job() {  # name, extra yaml lines
    local name=$1
    shift
    {
      echo "kind: TrainJob"
      echo "model: {name: convnet}"
      echo "dataset: {name: fashion-mnist, root: $IDX_DIR}"
      echo "batch_size: 128"
      echo "epochs: 3"
      echo "seed: 1"
      echo "device: cuda"
      printf '%s\n' "$@"
    } > "$RUN/$name.yaml"
    grep -q '^optimizer:' "$RUN/$name.yaml" || echo "optimizer: {name: adam, learning_rate: 0.001}" >> "$RUN/$name.yaml"
    timeout 120 "$BUILD/client/mpsctl" --server "unix://$RUN/mpsd.sock" --json submit \
      "$RUN/$name.yaml" --follow | grep -v '"step"' > "$RAW/mpsd_$name.jsonl"
    echo "$name: exit $?; $(grep -c '"epoch"' "$RAW/mpsd_$name.jsonl") epochs"
  }
  job fp32
  job bf16 "precision: bf16"
  job channels_last "memory_format: channels_last"
  job bf16_channels_last "precision: bf16" "memory_format: channels_last"
  job sgd_nesterov_onecycle "optimizer: {name: sgd, learning_rate: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4}" \
    "schedule: {name: onecycle, max_lr: 0.05}"
  kill -TERM "$mpsd_pid"; wait "$mpsd_pid"
fi

if has c; then
  say "(c) PyTorch on the same data"
  common=(--epochs 3 --batch-size 128 --lr 0.001 --seed 1 --idx-dir "$IDX_DIR")
  for v in "graph_fp32 --cuda-graph" "graph_bf16 --cuda-graph --bf16" \
           "graph_bf16_cl --cuda-graph --bf16 --channels-last" "eager_fp32 --fused" \
           "eager_bf16 --fused --bf16"; do
    set -- $v
    timeout 120 "$PY" "$PERF/torch_resident.py" "${common[@]}" "${@:2}" --variant "$1" \
      --json "$RAW/torch_$1.json" | tail -n 1 | cut -c1-200
  done
fi

if has d; then
  say "(d) ResNet-50 train step, batch 64"
  timeout 150 "$PY" "$PERF/torch_bench.py" --mode train --cudnn-benchmark --batch-sizes 64 --warmup 10 --iters 30 \
    --json "$RAW/torch_resnet_train.json" | cut -c1-200
  RUN="$WORK/fast-bench"
  rm -rf "$RUN" && mkdir -p "$RUN/state"
  "$BUILD/server/mpsd" --listen "unix://$RUN/mpsd.sock" --state-dir "$RUN/state" \
    >> "$OUT/mpsd.log" 2>&1 &
  mpsd_pid=$!
  for _ in $(seq 600); do [[ -S $RUN/mpsd.sock ]] && break; sleep 0.1; done
  printf '%s\n' "kind: BenchJob" "models: [resnet50]" "batch_sizes: [64]" "devices: [cuda]" \
    "mode: train_step" "precisions: [fp32, bf16]" "memory_formats: [contiguous, channels_last]" \
    "warmup_iters: 10" "iters: 30" > "$RUN/bench.yaml"
  timeout 150 "$BUILD/client/mpsctl" --server "unix://$RUN/mpsd.sock" --json submit \
    "$RUN/bench.yaml" --follow > "$RAW/mpsd_resnet_train.jsonl"
  echo "bench exit $?, rows: $(grep -c bench_row "$RAW/mpsd_resnet_train.jsonl")"
  kill -TERM "$mpsd_pid"; wait "$mpsd_pid"
fi

say "summary"
"$PY" "$PERF/summarize_fast_path.py" --raw "$RAW" --graph-check "$OUT/graph_check.json" \
  --out "$OUT"
