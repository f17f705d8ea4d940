#!/usr/bin/env bash
# Issue 15 on one CUDA machine with PyTorch 2.x, in one run: builds mpsd against that PyTorch's
# LibTorch (tests/perf/gpu_train_compare.sh MODE=build, whose DEPS recipe this shares), then
#   (a) the CUDA fast path against the eager loop, option by option (build/tests/perf/
#       mpsd_graph_check: 50 steps each way from the same seed; PASS when the graphed job was
#       captured and the step losses agree; graph_check.txt / graph_check.json)
#   (b) the seed ConvNet, Fashion-MNIST, batch 128, 3 epochs, through a real mpsd (mpsctl submit
#       --follow): adam fp32, bf16, channels_last, bf16 + channels_last (also with drop_last),
#       and sgd nesterov + onecycle; s/epoch = median of epochs 2..3, with the job's line on the
#       CUDA graph; and fp32 and bf16 + channels_last again with `profile:` on steps 200-204
#       (their Chrome traces: where a step's time goes)
#   (c) PyTorch on the same data (tests/perf/torch_resident.py): the whole step in one CUDA graph
#       (fused capturable Adam), eager fused Adam, and torch.compile(mode="reduce-overhead"),
#       each in fp32, bf16 and bf16 + channels_last
#   (g) the bare C++ loop with mpsd's own CUDA graph (mpsd_bare_loop graphed: mpsd's
#       GraphedStep without the daemon, the executor, events or read-back), fp32 and bf16 +
#       channels_last: target 6, mpsd's overhead
#   (e) cifar_cnn with SGD nesterov + onecycle on CIFAR-shaped files the script writes
#       (tests/perf/torch_cifar.py --make-files), with augmentation (random crop 4 + flip; the
#       job profiled on steps 600-602) and without, against PyTorch eager with the same
#       transforms on the GPU, and without them
#   (d) ResNet-50 train step, batch 64 (3×224×224, 1000 classes, SGD lr 0.01): an mpsd BenchJob
#       (train_step: the TrainJob's own step, graphed where the TrainJob graphs it; the row's
#       `step` says which) and an mpsd TrainJob on the synthetic set (the graphed step), fp32
#       contiguous and bf16 channels_last, against PyTorch eager and torch.compile (bf16
#       channels_last) (tests/perf/torch_bench.py --mode train), 10 warm-up + 30 timed steps each
# and writes $OUT/FAST_PATH.md (tests/perf/summarize_fast_path.py) with every row and ratio of
# issue 15's targets 1-6 and 8.
#
# Usage: tests/perf/gpu_fast_path.sh [DEPS]  (DEPS as gpu_train_compare.sh: *.deb, mpsd-src.tar.gz,
# fashion-mnist/). Knobs: OUT, WORK, JOBS, SKIP_BUILD=1 (reuse WORK/build), B_JOBS, C_VARIANTS and
# G_VARIANTS (a subset of phase b's jobs, c's and g's variants by name), PHASES (default
# "a b c g e d"; v: issue 27/28 jobs on the fast path; t: issue 29's TensorBoard run; s: issue
# 31's 16-trial sweep, fused and not, against PyTorch's ways of running it, below; k: issue 31's
# scaling curve, K = 1..32 fused trials of the ConvNet and of resnet18 on CIFAR-shaped data, with
# the PyTorch replica's step, FLOPs and SM use under ncu: SCALING.md; q: lstm and transformer
# sweeps fused and not).
# At most 8 files land in $OUT: run.log build.log graph_check.json mpsd.log fast_path.json
# FAST_PATH.md raw.tar.gz (every raw result, env.txt, graph_check.txt and the profiler's traces).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PERF="$REPO/tests/perf"
DEPS=$(realpath "${1:-${DEPS:-$REPO/.deps}}")
OUT=${OUT:-$REPO/perf-out}
WORK=${WORK:-/tmp/mpsd-perf}
PREFIX=${PREFIX:-/opt/deps}
PHASES=${PHASES:-a b c g e d}
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
rm -f "$RAW"/*.json "$RAW"/*.jsonl "$RAW"/*.txt

say "environment"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "mpsd source: commit ${MPSD_COMMIT:-(not given: set MPSD_COMMIT)} (git archive)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit \
    --format=csv 2>&1
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
  echo "nsys: $(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || echo none)"
  echo "ncu: $(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo none)"
  echo "cpus: $(nproc)"
} | tee "$RAW/env.txt"

if has a; then
  say "(a) graphed vs eager, option by option"
  timeout 240 "$BUILD/tests/perf/mpsd_graph_check" "$IDX_DIR" "$OUT/graph_check.json" cuda \
    | tee "$RAW/graph_check.txt"
  echo "graph_check exit ${PIPESTATUS[0]}"
fi

# One mpsd for every job of phases b, d and e (the executor empties the CUDA cache between jobs).
RUN="$WORK/fast-run"
mpsd_pid=
start_mpsd() {
  rm -rf "$RUN" && mkdir -p "$RUN/state"
  "$BUILD/server/mpsd" --listen "unix://$RUN/mpsd.sock" --state-dir "$RUN/state" \
    > "$OUT/mpsd.log" 2>&1 &
  mpsd_pid=$!
  for _ in $(seq 600); do [[ -S $RUN/mpsd.sock ]] && break; sleep 0.1; done
}
MPSCTL=("$BUILD/client/mpsctl" --server "unix://$RUN/mpsd.sock" --json)
# submit NAME FILE: runs the job file to its end; its events but the steps into RAW/mpsd_NAME.jsonl,
# its step events' step times into RAW/steps_NAME.txt, and a profiled job's trace into
# RAW/trace_NAME.json.
submit() {
  local name=$1 file=$2
  timeout 150 "${MPSCTL[@]}" submit "$file" --follow > "$RAW/all_$name.jsonl"
  echo "$name: exit $?; $(grep -c '"epoch_time_s"' "$RAW/all_$name.jsonl") epochs"
  grep -v '"step"' "$RAW/all_$name.jsonl" > "$RAW/mpsd_$name.jsonl"
  rm -f "$RAW/all_$name.jsonl"
  local id trace
  id=$(grep -m1 -o '"job_\?[iI]d": *"[^"]*"' "$RAW/mpsd_$name.jsonl" | sed 's/.*"\([^"]*\)"$/\1/')
  LAST_ID=$id
  trace="$RUN/state/artifacts/$id/profile.json"
  if [[ -n $id && -f $trace ]]; then cp "$trace" "$RAW/trace_$name.json"; fi
}
# job NAME [yaml lines]: the seed ConvNet on Fashion-MNIST, bs 128, 3 epochs, Adam 1e-3 unless
# the lines set the optimizer.
job() {
  local name=$1
  shift
  {
    echo "kind: TrainJob"
    [[ " $* " == *" model: "* || $* == model:* ]] || echo "model: {name: convnet}"
    echo "dataset: {name: fashion-mnist, root: $IDX_DIR}"
    echo "batch_size: 128"
    echo "epochs: 3"
    echo "seed: 1"
    echo "device: cuda"
    printf '%s\n' "$@"
  } > "$RUN/$name.yaml"
  grep -q '^optimizer:' "$RUN/$name.yaml" || echo "optimizer: {name: adam, learning_rate: 0.001}" >> "$RUN/$name.yaml"
  submit "$name" "$RUN/$name.yaml"
}
if has b || has d || has e || has v || has t || has s || has k || has q; then start_mpsd; fi

if has t; then
  # Issue 29: a 4-trial learning-rate sweep of the seed ConvNet with a validation split, each
  # trial with `tensorboard: true` (its event file written live into its artifacts), read back
  # by TensorBoard's own reader (tensorboard_check.py --expect-steps: every step once), and
  # $OUT/tb.tar.gz with the four runs and TensorBoard's Python package, so that the screenshot
  # of `tensorboard --logdir` can be taken on a machine with a browser (docs/tensorboard.png).
  say "(t) TensorBoard: a sweep written live, read by TensorBoard's EventAccumulator"
  {
    echo "kind: TrainJob"
    echo "name: fmnist-lr"
    echo "model: {name: convnet}"
    echo "dataset: {name: fashion-mnist, root: $IDX_DIR, validation: {fraction: 0.1}}"
    echo "batch_size: 128"
    echo "epochs: 5"
    echo "seed: 1"
    echo "device: cuda"
    echo "tensorboard: true"
    echo "optimizer: {name: adam, learning_rate: 0.001}"
    echo "sweep: {grid: {optimizer.learning_rate: [0.01, 0.003, 0.001, 0.0003]}}"
  } > "$RUN/t_sweep.yaml"
  timeout 300 "${MPSCTL[@]}" submit "$RUN/t_sweep.yaml" > "$RAW/t_submit.json"
  # Each trial that succeeds writes its model.pt: wait for four, at most 240 s.
  for _ in $(seq 240); do
    [[ $(ls "$RUN"/state/artifacts/*/model.pt 2>/dev/null | wc -l) -ge 4 ]] && break
    sleep 1
  done
  "${MPSCTL[@]}" list > "$RAW/t_list.json" 2>&1
  mkdir -p "$WORK/tb"
  for dir in "$RUN"/state/artifacts/*/tensorboard; do
    id=$(basename "$(dirname "$dir")")
    cp -r "$dir" "$WORK/tb/fmnist-lr-$id"
  done
  steps=$(( (54000 + 127) / 128 * 5 ))
  "$PY" "$PERF/tensorboard_check.py" "$WORK/tb" --expect-steps "$steps" 2>&1 | tee "$RAW/t_check.txt"
  # Files this PyTorch writes pass the checks every torch file goes through (trainer/pickle_scan.h):
  # a scripted model (with a constant) and a tensors file, each trained for an epoch.
  # (From a file: TorchScript needs the classes' source, which a script read from stdin lacks.)
  cat > "$RUN/t_files.py" <<'PYEOF'
import sys, torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 10)
    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3))) + torch.tensor([0.5])
torch.jit.script(Net()).save(sys.argv[1] + "/t_script.pt")
torch.jit.trace(Net(), torch.zeros(1, 1, 28, 28)).save(sys.argv[1] + "/t_traced.pt")
split = lambda n: {"x": torch.rand(n, 1, 28, 28), "y": torch.randint(0, 10, (n,))}
torch.save({"train": split(512), "test": split(128)}, sys.argv[1] + "/t_tensors.pt")
PYEOF
  "$PY" "$RUN/t_files.py" "$RUN"
  for model in t_script t_traced; do
    printf 'kind: TrainJob\nmodel: {torchscript: %s}\ndataset: {name: tensors, root: %s}\nbatch_size: 64\nepochs: 1\ndevice: cuda\n' \
      "$RUN/$model.pt" "$RUN/t_tensors.pt" > "$RUN/$model.yaml"
    timeout 120 "${MPSCTL[@]}" submit "$RUN/$model.yaml" --follow > "$RAW/$model.jsonl" 2>&1
    rc=$?
    echo "$model (PyTorch $("$PY" -c 'import torch; print(torch.__version__)')): exit $rc, $(grep -o '"state": *"[A-Z]*"' "$RAW/$model.jsonl" | tail -1)"
    grep -i 'refused\|damaged\|not a TorchScript' "$RAW/$model.jsonl" | head -3
  done
  tb=$("$PY" -c 'import os, tensorboard; print(os.path.dirname(tensorboard.__file__))')
  "$PY" -m pip show tensorboard 2>/dev/null | head -2 > "$WORK/tb/TENSORBOARD_VERSION"
  tar -czf "$OUT/tb.tar.gz" -C "$WORK" tb -C "$(dirname "$tb")" tensorboard
  ls -l "$OUT/tb.tar.gz"
fi

if has v; then
  # Issues 27 and 28 on the CUDA fast path, the seed ConvNet as in (b): the same job with the
  # divergence threshold set (the check itself always runs: a non-finite loss always ends the
  # job), nan_policy skip_step (eager, with its on-device undo), checkpoints every 200 steps
  # (keep_last 2), a validation split with early stopping, and a fine-tune of v_base's weights
  # with conv1 and conv2 frozen (frozen jobs run eagerly). s/epoch of each, against v_base.
  say "(v) validation, early stopping, checkpoints, skip_step, frozen fine-tune on the fast path"
  job v_base
  base_id=$LAST_ID
  job v_threshold "divergence_threshold: 1000000"
  job v_skip_step "nan_policy: skip_step"
  job v_ckpt_steps "checkpoint: {every_steps: 200, keep_last: 2}"
  ls -l "$RUN/state/artifacts/$LAST_ID/" | head -8
  {
    echo "kind: TrainJob"
    echo "model: {name: convnet}"
    echo "dataset: {name: fashion-mnist, root: $IDX_DIR, validation: {fraction: 0.1}}"
    echo "batch_size: 128"
    echo "epochs: 6"
    echo "seed: 1"
    echo "device: cuda"
    echo "optimizer: {name: adam, learning_rate: 0.001}"
    echo "early_stopping: {monitor: val_loss, patience: 2}"
  } > "$RUN/v_early_stop.yaml"
  submit v_early_stop "$RUN/v_early_stop.yaml"
  job v_frozen "freeze: [conv1., conv2.]" \
    "model: {name: convnet, weights: $RUN/state/artifacts/$base_id/model.state_dict.pt}"
  # One line per job: its state, epoch times (s), median of epochs 2.., and what the summary says.
  "$PY" - "$RAW" <<'PYEOF' | tee "$RAW/v_summary.txt"
import glob, json, os, statistics, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "mpsd_v_*.jsonl"))):
    epochs, summary, state, log = [], {}, "?", []
    for line in open(path):
        event = json.loads(line)
        if "epoch" in event and isinstance(event["epoch"], dict):
            epochs.append(float(event["epoch"].get("epoch_time_s", 0)))
        if "summary" in event:
            summary = event["summary"]
        if "state" in event:
            state = event["state"].get("state", "?") + " " + event["state"].get("message", "")[:120]
        if "log" in event and ("graph" in event["log"].get("text", "") or "eager" in event["log"].get("text", "")):
            log.append(event["log"]["text"][:100])
    later = epochs[1:] or epochs
    print(os.path.basename(path)[5:-6], "|", state.strip(), "| epochs", [round(e, 3) for e in epochs],
          "| median 2..", round(statistics.median(later), 3) if later else None,
          "| stop", summary.get("stop_reason"), "| best_epoch", summary.get("best_epoch"),
          "| skipped", summary.get("skipped_steps"), "|", "; ".join(log[:2]))
PYEOF
fi

if has b; then
  say "(b) ConvNet TrainJobs through mpsd"
  # B_JOBS: only these jobs (names as below, space-separated); unset: all.
  b_job() { [[ -z ${B_JOBS:-} || " $B_JOBS " == *" $1 "* ]] && job "$@"; }
  b_job fp32
  b_job bf16 "precision: bf16"
  b_job channels_last "memory_format: channels_last"
  b_job bf16_channels_last "precision: bf16" "memory_format: channels_last"
  b_job bf16_channels_last_drop_last "precision: bf16" "memory_format: channels_last" "drop_last: true"
  # cuDNN's algorithm search instead of its heuristics (the default): what it buys in speed and
  # costs in peak memory.
  b_job fp32_search "cudnn_benchmark: true"
  b_job bf16_channels_last_search "precision: bf16" "memory_format: channels_last" "cudnn_benchmark: true"
  # No test evaluation: the training pass's own peak memory.
  b_job fp32_no_test "evaluate_test: never"
  b_job bf16_channels_last_no_test "precision: bf16" "memory_format: channels_last" "evaluate_test: never"
  b_job sgd_nesterov_onecycle "optimizer: {name: sgd, learning_rate: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4}" \
    "schedule: {name: onecycle, max_lr: 0.05}"
  # The same as fp32 and bf16_channels_last, 1 epoch, LibTorch's profiler on steps 200-204
  # (steady state: the graph's capture is long done).
  b_job profile_fp32 "profile: {start_step: 200, steps: 5}"
  b_job profile_bf16_channels_last "precision: bf16" "memory_format: channels_last" \
    "profile: {start_step: 200, steps: 5}"
fi

if has c; then
  say "(c) PyTorch on the same data"
  common=(--epochs 3 --batch-size 128 --lr 0.001 --seed 1 --idx-dir "$IDX_DIR")
  for v in "graph_fp32 --cuda-graph" "graph_bf16 --cuda-graph --bf16" \
           "graph_bf16_cl --cuda-graph --bf16 --channels-last" "eager_fp32 --fused" \
           "eager_bf16 --fused --bf16" "eager_bf16_cl --fused --bf16 --channels-last" \
           "compile_fp32 --compile reduce-overhead" "compile_bf16 --compile reduce-overhead --bf16" \
           "compile_bf16_cl --compile reduce-overhead --bf16 --channels-last"; do
    set -- $v
    # C_VARIANTS: only these variants (graph_fp32 ...); unset: all.
    [[ -z ${C_VARIANTS:-} || " $C_VARIANTS " == *" $1 "* ]] || continue
    timeout 120 "$PY" "$PERF/torch_resident.py" "${common[@]}" "${@:2}" --variant "$1" \
      --json "$RAW/torch_$1.json" | tail -n 1 | cut -c1-200
  done
fi

if has g; then
  say "(g) bare C++ loop with mpsd's CUDA graph (mpsd_bare_loop graphed)"
  # On cuDNN's heuristics (mpsd's default) and with its search (cudnn_benchmark: true).
  for v in "fp32 contiguous heuristics" "bf16 channels_last heuristics" "fp32 contiguous search" \
           "bf16 channels_last search"; do
    set -- $v
    # G_VARIANTS: only these (fp32_contiguous_search ...); unset: all.
    [[ -z ${G_VARIANTS:-} || " $G_VARIANTS " == *" $1_$2_$3 "* ]] || continue
    name="bare_$1_$2.json"
    [[ $3 == search ]] && name="bare_$1_$2_search.json"
    timeout 120 "$BUILD/tests/perf/mpsd_bare_loop" "$IDX_DIR" "$RAW/$name" 3 128 0.001 1 \
      cuda graphed "$1" "$2" "$3"
    echo "bare graphed $1 $2 cudnn $3: exit $?"
  done
fi

if has e; then
  say "(e) cifar_cnn, SGD nesterov + onecycle, on CIFAR-shaped files"
  CIFAR="$WORK/data/cifar10"
  [[ -f $CIFAR/test_batch.bin ]] || "$PY" "$PERF/torch_cifar.py" --make-files "$CIFAR"
  ls -l "$CIFAR"
  cifar_job() {  # name, augmentation yes/no, extra lines
    local name=$1 aug=$2
    shift 2
    {
      echo "kind: TrainJob"
      echo "model: {name: cifar_cnn}"
      if [[ $aug == yes ]]; then
        echo "dataset: {name: cifar10, root: $CIFAR, augmentation: {random_crop_padding: 4, horizontal_flip: true}}"
      else
        echo "dataset: {name: cifar10, root: $CIFAR}"
      fi
      echo "batch_size: 128"
      echo "epochs: 3"
      echo "optimizer: {name: sgd, learning_rate: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4}"
      echo "schedule: {name: onecycle, max_lr: 0.05}"
      echo "seed: 1"
      echo "device: cuda"
      printf '%s\n' "$@"
    } > "$RUN/$name.yaml"
    submit "$name" "$RUN/$name.yaml"
  }
  cifar_job cifar_aug yes "profile: {start_step: 600, steps: 3}"
  cifar_job cifar_noaug no
  for v in "torch_cifar_aug --augment" "torch_cifar_noaug"; do
    set -- $v
    timeout 120 "$PY" "$PERF/torch_cifar.py" --root "$CIFAR" --epochs 3 --variant "$1" "${@:2}" \
      --json "$RAW/$1.json" | tail -n 1 | cut -c1-200
  done
fi

if has d; then
  say "(d) ResNet-50 train step, batch 64"
  # D_JOBS: only these TrainJobs (names below), without PyTorch's rows and the BenchJob; unset:
  # everything. cuDNN keeps the algorithm it chose for a shape for the executor's life, so a
  # job on heuristics after one that searched the same shapes reuses the search's choice: give
  # each setting its own mpsd to compare them.
  d_job() { [[ -z ${D_JOBS:-} || " $D_JOBS " == *" $1 "* ]] && resnet_job "$@"; }
fi
if has d && [[ -z ${D_JOBS:-} ]]; then
  timeout 150 "$PY" "$PERF/torch_bench.py" --mode train --cudnn-benchmark --batch-sizes 64 --warmup 10 --iters 30 \
    --json "$RAW/torch_resnet_train.json" | cut -c1-200
  printf '%s\n' "kind: BenchJob" "models: [resnet50]" "batch_sizes: [64]" "devices: [cuda]" \
    "mode: train_step" "precisions: [fp32, bf16]" "memory_formats: [contiguous, channels_last]" \
    "optimizer: {name: sgd, learning_rate: 0.01}" "warmup_iters: 10" "iters: 30" \
    "cudnn_benchmark: true" > "$RUN/bench.yaml"
  timeout 150 "${MPSCTL[@]}" submit "$RUN/bench.yaml" --follow > "$RAW/mpsd_resnet_train.jsonl"
  echo "bench exit $?, rows: $(grep -c bench_row "$RAW/mpsd_resnet_train.jsonl")"
fi
if has d; then
  # The TrainJob's graphed step: 50 steps of 64 random [3, 224, 224] images an epoch, drawn on the
  # device (the synthetic set), SGD lr 0.01 as the BenchJob's, 3 epochs.
  resnet_job() {  # name, extra lines
    local name=$1
    shift
    {
      echo "kind: TrainJob"
      echo "model: {name: resnet50}"
      echo "dataset: {name: synthetic, synthetic: {input_shape: [3, 224, 224], num_classes: 1000, train_examples: 3200, test_examples: 64}}"
      echo "batch_size: 64"
      echo "epochs: 3"
      echo "optimizer: {name: sgd, learning_rate: 0.01}"
      echo "seed: 1"
      echo "device: cuda"
      printf '%s\n' "$@"
    } > "$RUN/$name.yaml"
    submit "$name" "$RUN/$name.yaml"
  }
  # With cuDNN's search, as PyTorch's rows (--cudnn-benchmark); and on the heuristics (the
  # default; in an mpsd of their own for a clean comparison, D_JOBS).
  d_job resnet_fp32 "cudnn_benchmark: true"
  d_job resnet_bf16_channels_last "precision: bf16" "memory_format: channels_last" \
    "cudnn_benchmark: true"
  d_job resnet_fp32_heuristics
  d_job resnet_bf16_channels_last_heuristics "precision: bf16" "memory_format: channels_last"
  # torch.compile of ResNet-50's training step takes minutes: what is left of BUDGET_S, at most
  # 200 s, so that the summary still runs inside the device tool's 600 s.
  left=$((${BUDGET_S:-560} - SECONDS))
  ((left > 200)) && left=200
  if [[ -n ${D_JOBS:-} ]]; then
    echo "torch.compile resnet50: skipped (D_JOBS)"
  elif ((left > 30)); then
    timeout "$left" "$PY" "$PERF/torch_bench.py" --mode train --cudnn-benchmark --compile \
      --batch-sizes 64 --warmup 10 --iters 30 --rows bf16_channels_last \
      --json "$RAW/torch_resnet_train_compile.json" | cut -c1-200
    echo "torch.compile resnet50: exit ${PIPESTATUS[0]} (limit ${left} s)"
  else
    echo "torch.compile resnet50: skipped, ${left} s left of BUDGET_S"
  fi
fi
if has s; then
  # Issue 31: the 16-trial sweep (4 learning rates × 4 weight decays, AdamW, the seed ConvNet,
  # batch 128, 3 epochs), wall time from `mpsctl submit` to the sweep's end (`mpsctl wait`):
  # mpsd with SWEEP_FUSE (default "auto and off": both, in that order; a value may name the
  # data order too, "auto:shared"; a value may repeat, e.g. "off off" for the GPU's run-to-run
  # spread), then PyTorch's ensemble
  # recipe and 16 PyTorch processes together and one after another (sweep_torch.sh; SWEEP_TORCH
  # picks its rows; "none" skips them); SWEEP_PRECISION (default fp32) sets the trials' precision.
  # Every wall time lands in RAW/s_wall.txt; each sweep's files are named by its fuse value, its
  # data order and its place in SWEEP_FUSE (s_sweep_auto_per_trial_1.json, ...).
  lrs=(0.0003 0.001 0.003 0.01)
  wds=(0 0.0001 0.001 0.01)
  n=0
  for spec in ${SWEEP_FUSE:-auto off}; do
    fuse=${spec%%:*}
    order=per_trial
    [[ $spec == *:* ]] && order=${spec#*:}
    n=$((n + 1))
    tag="${fuse}_${order}_$n"
    {
      echo "kind: TrainJob"
      echo "name: sweep-$tag"
      echo "model: {name: convnet}"
      echo "dataset: {name: fashion-mnist, root: $IDX_DIR}"
      echo "batch_size: 128"
      echo "epochs: 3"
      echo "seed: 1"
      echo "device: cuda"
      echo "precision: ${SWEEP_PRECISION:-fp32}"
      echo "optimizer: {name: adamw, learning_rate: 0.001, weight_decay: 0.01}"
      echo "sweep:"
      echo "  fuse: $fuse"
      [[ $fuse != off ]] && echo "  data_order: $order"
      echo "  grid: {optimizer.learning_rate: [$(IFS=,; echo "${lrs[*]}")], optimizer.weight_decay: [$(IFS=,; echo "${wds[*]}")]}"
    } > "$RUN/s_$tag.yaml"
    start=$(date +%s.%N)
    sweep=$(timeout 60 "${MPSCTL[@]}" submit "$RUN/s_$tag.yaml" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
    timeout 400 "${MPSCTL[@]}" wait "$sweep" > /dev/null 2>&1
    wall=$("$PY" -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 2))' "$start")
    echo "mpsd fuse=$fuse data_order=$order sweep $sweep: wall $wall s" | tee -a "$RAW/s_wall.txt"
    "${MPSCTL[@]}" sweep "$sweep" > "$RAW/s_sweep_$tag.json" 2>&1
    "${MPSCTL[@]}" list > "$RAW/s_list_$tag.json" 2>&1
    for id in $("$PY" -c 'import json,sys; print(" ".join((lambda j: j.get("trial_job_ids") or j.get("trialJobIds") or [])(json.load(open(sys.argv[1])))))' <("${MPSCTL[@]}" get "$sweep") 2>/dev/null); do
      "${MPSCTL[@]}" logs "$id" > "$RAW/s_events_${tag}_$id.jsonl" 2>&1 || true
    done
  done
  bash "$PERF/sweep_torch.sh" "$IDX_DIR" "$RAW" ${SWEEP_TORCH:-ensemble concurrent sequential}
fi

if has q; then
  # The fused forms of lstm and transformer on the GPU: a 4-trial learning-rate sweep of each
  # on 12,800 Fashion-MNIST images read row by row (T = 28 steps of 28 features), 2 epochs,
  # fused (`fuse: auto`) and one trial after another (`fuse: off`) in the same mpsd; per trial
  # its losses and accuracy (mpsctl sweep), the wall time, and the first trial's log (fused or
  # not, graphed or eager, and why).
  say "(q) lstm and transformer sweeps, fused and not"
  for model in lstm transformer; do
    for fuse in auto off; do
      name="q_${model}_$fuse"
      {
        echo "kind: TrainJob"
        echo "name: $name"
        echo "model: {name: $model}"
        echo "dataset: {name: fashion-mnist, root: $IDX_DIR, limit_train: 12800, limit_test: 2000}"
        echo "batch_size: 128"
        echo "epochs: 2"
        echo "seed: 1"
        echo "device: cuda"
        echo "optimizer: {name: adamw, learning_rate: 0.001}"
        echo "sweep: {fuse: $fuse, grid: {optimizer.learning_rate: [0.0003, 0.001, 0.003, 0.01]}}"
      } > "$RUN/$name.yaml"
      start=$(date +%s.%N)
      sweep=$(timeout 60 "${MPSCTL[@]}" submit "$RUN/$name.yaml" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
      timeout 200 "${MPSCTL[@]}" wait "$sweep" > /dev/null 2>&1
      wall=$("$PY" -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 2))' "$start")
      echo "mpsd $model fuse=$fuse sweep $sweep: wall $wall s" | tee -a "$RAW/q_wall.txt"
      "${MPSCTL[@]}" sweep "$sweep" > "$RAW/q_sweep_${model}_$fuse.json" 2>&1
      first=$("${MPSCTL[@]}" get "$sweep" | "$PY" -c 'import json,sys; j=json.load(sys.stdin); print((j.get("trial_job_ids") or j.get("trialJobIds") or [""])[0])')
      [[ -n $first ]] && "${MPSCTL[@]}" logs "$first" > "$RAW/q_events_${model}_$fuse.jsonl" 2>&1
    done
  done
fi

if has k; then
  # Issue 31's scaling curve: for K in K_VALUES (default 1 2 4 8 16 32), a K-trial sweep
  # (`fuse: auto`, learning rates spread log-evenly over 3e-4..1e-2; K = 1 is one unfused job) of
  # the seed ConvNet on Fashion-MNIST (batch 128, AdamW, 3 epochs) and of resnet18 on CIFAR-shaped
  # synthetic data (12,800 images [3, 32, 32], 10 classes, batch 128, AdamW, 2 epochs): wall from
  # submit to the sweep's end, each trial's events, nvidia-smi's utilization every 100 ms. Then
  # the ConvNet's fused step in PyTorch per K (fused_step_profile.py --scaling) and one eager step
  # per K under ncu (SM-active cycles per kernel). SCALING_MODELS picks the models.
  for model in ${SCALING_MODELS:-convnet resnet18}; do
    for k in ${K_VALUES:-1 2 4 8 16 32}; do
      lrs=$("$PY" -c 'import sys; k = int(sys.argv[1]); print(",".join("%.6g" % (3e-4 * (1e-2 / 3e-4) ** (i / max(k - 1, 1))) for i in range(k)))' "$k")
      {
        echo "kind: TrainJob"
        echo "name: k-$model-$k"
        if [[ $model == convnet ]]; then
          echo "model: {name: convnet}"
          echo "dataset: {name: fashion-mnist, root: $IDX_DIR}"
          echo "epochs: 3"
        else
          echo "model: {name: $model}"
          echo "dataset: {name: synthetic, synthetic: {input_shape: [3, 32, 32], num_classes: 10, train_examples: 12800, test_examples: 1280}}"
          echo "epochs: 2"
        fi
        echo "batch_size: 128"
        echo "seed: 1"
        echo "device: cuda"
        echo "optimizer: {name: adamw, learning_rate: 0.001, weight_decay: 0.01}"
        echo "sweep:"
        echo "  fuse: auto"
        echo "  grid: {optimizer.learning_rate: [$lrs]}"
      } > "$RUN/k_${model}_$k.yaml"
      nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits \
        -lms 100 > "$RAW/k_smi_${model}_$k.csv" 2>/dev/null &
      smi=$!
      start=$(date +%s.%N)
      sweep=$(timeout 60 "${MPSCTL[@]}" submit "$RUN/k_${model}_$k.yaml" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
      timeout 300 "${MPSCTL[@]}" wait "$sweep" > /dev/null 2>&1
      wall=$("$PY" -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 2))' "$start")
      kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
      echo "k $model $k $sweep wall $wall" | tee -a "$RAW/k_wall.txt"
      ids=$("$PY" -c 'import json,sys; j = json.load(open(sys.argv[1])); print(" ".join(j.get("trial_job_ids") or j.get("trialJobIds") or [j.get("id", "")]))' <("${MPSCTL[@]}" get "$sweep") 2>/dev/null)
      for id in $ids; do
        "${MPSCTL[@]}" logs "$id" > "$RAW/k_events_${model}_${k}_$id.jsonl" 2>&1 || true
      done
    done
  done
  timeout 240 "$PY" "$PERF/fused_step_profile.py" --scaling "$(echo ${K_VALUES:-1 2 4 8 16 32} | tr ' ' ,)" \
    --json "$RAW/k_replica.json"
  echo "replica scaling exit $?"
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  if [[ -x $NCU ]]; then
    for k in ${K_VALUES:-1 2 4 8 16 32}; do
      timeout 120 "$NCU" --profile-from-start off --csv \
        --metrics gpu__time_duration.sum,sm__cycles_active.avg.pct_of_peak_sustained_elapsed \
        "$PY" "$PERF/fused_step_profile.py" --ncu-step "$k" > "$RAW/k_ncu_$k.csv" 2> "$RAW/k_ncu_$k.err"
      echo "ncu K=$k: exit $?, $(grep -c '"sm__cycles_active' "$RAW/k_ncu_$k.csv") kernels"
    done
  fi
  "$PY" "$PERF/summarize_scaling.py" --raw "$RAW" --out "$OUT"
fi

[[ -n $mpsd_pid ]] && { kill -TERM "$mpsd_pid"; wait "$mpsd_pid"; }

say "summary"
"$PY" "$PERF/summarize_fast_path.py" --raw "$RAW" --graph-check "$OUT/graph_check.json" \
  --env "$RAW/env.txt" --out "$OUT"
# The raw results and the profiler's traces, in one file (the device tool brings back 8).
tar -czf "$OUT/raw.tar.gz" -C "$RAW" . && ls -l "$OUT"
