#!/usr/bin/env bash
# Issue 31's PyTorch rows for the 16-trial sweep (4 learning rates × 4 weight decays, AdamW, the
# seed ConvNet, Fashion-MNIST, batch 128, 3 epochs) on one CUDA GPU, each a wall time from start
# to the last trial's end, appended to RAW/s_wall.txt, every process's JSON result in RAW:
#   ensemble     PyTorch's ensemble recipe, the whole step in one CUDA graph (torch_ensemble.py)
#   concurrent   16 torch_resident.py --cuda-graph --adamw processes started together
#   sequential   the same 16 processes one after another
# Usage: tests/perf/sweep_torch.sh IDX_DIR RAW [ensemble concurrent sequential]
# (gpu_fast_path.sh PHASES=s runs it after mpsd's sweeps.)
set -uo pipefail
PERF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IDX_DIR=$1
RAW=$2
shift 2
ROWS=${*:-ensemble concurrent sequential}
PY=${PYTHON:-python3}
lrs=(0.0003 0.001 0.003 0.01)
wds=(0 0.0001 0.001 0.01)
mkdir -p "$RAW"
now() { date +%s.%N; }
since() { "$PY" -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 2))' "$1"; }
trial() {  # lr wd json
  "$PY" "$PERF/torch_resident.py" --idx-dir "$IDX_DIR" --cuda-graph --adamw --lr "$1" \
    --weight-decay "$2" --json "$3" > "${3%.json}.txt" 2>&1
}
for row in $ROWS; do
  start=$(now)
  case $row in
    ensemble)
      timeout 300 "$PY" "$PERF/torch_ensemble.py" --idx-dir "$IDX_DIR" --json "$RAW/s_ensemble.json" \
        --trials 16 --lrs "$(IFS=,; echo "${lrs[*]}")" --weight-decays "$(IFS=,; echo "${wds[*]}")" \
        --cuda-graph > "$RAW/s_ensemble.txt" 2>&1
      echo "ensemble exit $?" ;;
    concurrent|sequential)
      pids=()
      for lr in "${lrs[@]}"; do
        for wd in "${wds[@]}"; do
          if [[ $row == concurrent ]]; then
            trial "$lr" "$wd" "$RAW/s_torch_${row}_${lr}_$wd.json" &
            pids+=($!)
          else
            trial "$lr" "$wd" "$RAW/s_torch_${row}_${lr}_$wd.json"
          fi
        done
      done
      ((${#pids[@]})) && wait "${pids[@]}" ;;
    *) echo "unknown row $row"; continue ;;
  esac
  echo "torch $row: wall $(since "$start") s" | tee -a "$RAW/s_wall.txt"
done
