#!/usr/bin/env bash
# Issue 16 on one CUDA machine: builds mpsd against that machine's PyTorch 2.x LibTorch (with
# NCCL: trainer/CMakeLists.txt finds nccl.h beside it) by tests/perf/gpu_train_compare.sh's
# recipe (MODE=build, no MPS check), then runs a data-parallel TrainJob of world size 1 on the
# NCCL backend (distributed: {nproc_per_node: 1, backend: nccl}, cuda:0): the rendezvous, the
# broadcast, every step's bucketed gradient all-reduce and the metric reductions go through
# ProcessGroupNCCL. Checks that the job SUCCEEDED, that its log names nccl and the final weight
# check, and that the executor's environment has NCCL_NVLS_ENABLE=0. Two ranks on one GPU are
# not meaningful; the scaling measurement over several GPUs is its own issue.
#
# Inputs as gpu_train_compare.sh's (first argument DEPS, default .deps: DEPS/*.deb,
# DEPS/mpsd-src.tar.gz, DEPS/fashion-mnist/*.gz). Writes into $OUT: run.log build.log mpsd.log
# ddp_events.jsonl ddp_result.txt. Knobs: OUT, WORK, PREFIX, JOBS, PYTHON, TORCH_PREFIX,
# BUILD_TIMEOUT_S (default 420), RUN_TIMEOUT_S (default 120), SKIP_BUILD=1.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEPS=$(realpath "${1:-${DEPS:-$REPO/.deps}}")
OUT=${OUT:-$REPO/perf-out}
WORK=${WORK:-/tmp/mpsd-perf}
PREFIX=${PREFIX:-/opt/deps}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-120}
ARCH_LIB=usr/lib/x86_64-linux-gnu
mkdir -p "$OUT"

# The build (it tees into $OUT/run.log and writes $OUT/build.log).
OUT="$OUT" WORK="$WORK" PREFIX="$PREFIX" MODE=build MPS_COMPILE_CHECK=0 \
  BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-420} TOTAL_BUDGET_S=450 \
  bash "$REPO/tests/perf/gpu_train_compare.sh" "$DEPS"
build_rc=$?
exec > >(tee -a "$OUT/run.log") 2>&1
echo "==== ddp_nccl_world1: build exit $build_rc"
grep -h "distributed:" "$WORK/build.configure.log" 2>/dev/null
[[ $build_rc -eq 0 ]] || exit "$build_rc"
BUILD="$WORK/build"

if compgen -G "$DEPS/*.deb" > /dev/null; then
  export LD_LIBRARY_PATH="$PREFIX/$ARCH_LIB:$PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
IDX_DIR="$WORK/data/fashion-mnist"
mkdir -p "$IDX_DIR" && cp "$DEPS"/fashion-mnist/*-ubyte.gz "$IDX_DIR"/
RUN_DIR="$WORK/ddp-run"
rm -rf "$RUN_DIR" && mkdir -p "$RUN_DIR/state"
SOCK="unix://$RUN_DIR/mpsd.sock"
cat > "$RUN_DIR/job.yaml" <<JOB
kind: TrainJob
model: {name: convnet, dropout: 0}
dataset: {name: fashion-mnist, root: $IDX_DIR, limit_train: 12800, limit_test: 2000}
batch_size: 128
epochs: 2
optimizer: {name: adam, learning_rate: 0.001}
seed: 1
device: cuda
distributed: {nproc_per_node: 1, backend: nccl, master_port: 29517, timeout_s: 60}
JOB
"$BUILD/server/mpsd" --listen "$SOCK" --state-dir "$RUN_DIR/state" > "$OUT/mpsd.log" 2>&1 &
mpsd_pid=$!
for _ in $(seq 600); do [[ -S $RUN_DIR/mpsd.sock ]] && break; sleep 0.1; done
MPSCTL=("$BUILD/client/mpsctl" --server "$SOCK" --json)
t0=$EPOCHREALTIME
timeout "$RUN_TIMEOUT_S" "${MPSCTL[@]}" submit "$RUN_DIR/job.yaml" --follow > "$OUT/ddp_events.jsonl"
submit_rc=$?
t1=$EPOCHREALTIME
executor=$(pgrep -f "mpsd-executor --socket $RUN_DIR" | head -1)
nvls=$(tr '\0' '\n' < "/proc/$executor/environ" 2>/dev/null | grep '^NCCL_NVLS_ENABLE=')
kill -TERM "$mpsd_pid"; wait "$mpsd_pid"
{
  echo "submit exit $submit_rc, wall $(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }") s"
  echo "executor environment: ${nvls:-NCCL_NVLS_ENABLE unset}"
  grep -o '"text": *"[^"]*distributed[^"]*"' "$OUT/ddp_events.jsonl"
  grep -o '"epoch": *{[^}]*}' "$OUT/ddp_events.jsonl"
  grep -o '"state": *"[A-Z]*"' "$OUT/ddp_events.jsonl" | tail -1
} | tee "$OUT/ddp_result.txt"
grep -q 'nccl' "$OUT/ddp_result.txt" && grep -q 'bitwise identical' "$OUT/ddp_result.txt" &&
  grep -q 'NCCL_NVLS_ENABLE=0' "$OUT/ddp_result.txt" && [[ $submit_rc -eq 0 ]]
