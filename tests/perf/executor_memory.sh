#!/usr/bin/env bash
# Issue 6's notes: three different jobs through one mpsd and its executor process, with each
# job's device memory at start, peak and after cleanup (the job summary's MemoryStats, next to
# the executor's baseline) and the executor's resident memory (/proc: VmRSS before and after
# the job, VmHWM over it, reset per job through clear_refs), then the executor's restarts.
# Usage: tests/perf/executor_memory.sh [BUILD_DIR] [DEVICE]   (defaults: build, cpu)
# The config (CONFIG=file) may set executor: {isolation, restart_*}.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
device=${2:-cpu}
work=$(mktemp -d -t mpsd-executor-memory-XXXXXX)
address="unix://$work/mpsd.sock"
args=(--listen "$address" --state-dir "$work/state")
[[ -n ${CONFIG:-} ]] && args+=(--config "$CONFIG")
"$build/server/mpsd" "${args[@]}" 2>"$work/mpsd.log" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null; echo "log: $work/mpsd.log"' EXIT
ctl() { "$build/client/mpsctl" --server "$address" "$@"; }
for _ in $(seq 1 300); do ctl device >/dev/null 2>&1 && break; sleep 0.2; done

status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null || true; }
executor_pid() { ctl device --json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("executor_pid", 0))'; }

root=/usr/share/datasets/fashion-mnist
jobs=(
  "model: {name: mlp}|dataset: {name: fashion-mnist, root: $root, limit_train: 20000, limit_test: 2000}"
  "model: {name: convnet}|dataset: {name: fashion-mnist, root: $root, limit_train: 5000, limit_test: 1000}"
  "model: {name: cifar_cnn}|dataset: {name: fashion-mnist, root: $root, limit_train: 5000, limit_test: 1000}"
)
printf '%-8s %-7s %-10s %-10s %-10s %-10s %-10s %-10s %-10s %s\n' job model pid \
  alloc_start alloc_peak alloc_after resv_peak rss_before_MiB rss_peak_MiB "rss_after_MiB restart"
for spec in "${jobs[@]}"; do
  model_line=${spec%%|*}
  printf 'kind: TrainJob\n%s\n%s\nbatch_size: 64\nepochs: 1\nseed: 1\ndevice: %s\n' \
    "$model_line" "${spec#*|}" "$device" >"$work/job.yaml"
  pid=$(executor_pid)
  hwm=0
  rss_before=$(status_kb "$pid" VmRSS)
  echo 5 >"/proc/$pid/clear_refs" 2>/dev/null || true  # resets VmHWM to the current RSS
  id=$(ctl submit "$work/job.yaml" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  while :; do
    state=$(ctl get "$id" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case $state in SUCCEEDED|FAILED|CANCELLED|INTERRUPTED) break ;; esac
    h=$(status_kb "$pid" VmHWM); [[ -n $h && $h != 0 ]] && hwm=$h
    sleep 0.2
  done
  # An executor replaced after the job (restart policy) is gone: its figures stay the last seen.
  h=$(status_kb "$pid" VmHWM); [[ -n $h && $h != 0 ]] && hwm=$h
  rss_after=$(status_kb "$pid" VmRSS)
  ctl get "$id" --json | python3 -c '
import json, sys
j = json.load(sys.stdin); s = j.get("summary", {}); m = s.get("memory", {})
g = lambda k: int(m.get(k, 0))
mib = lambda kb: "%.1f" % (int(kb) / 1024) if kb and kb != "0" else "-"
print("%-8s %-7s %-10s %-10d %-10d %-10d %-10d %-14s %-12s %-13s %s" % (
    j["id"] + ":" + j["state"][:4], sys.argv[1], s.get("executor_pid", 0),
    g("allocated_before_bytes"), g("peak_allocated_bytes"), g("allocated_after_bytes"),
    g("peak_reserved_bytes"), mib(sys.argv[2]), mib(sys.argv[3]), mib(sys.argv[4]),
    s.get("executor_restart_reason", "-") or "-"))' \
    "$(echo "$model_line" | sed 's/.*name: \([a-z_]*\).*/\1/')" "$rss_before" "${hwm:-0}" "$rss_after"
done
echo
ctl device
