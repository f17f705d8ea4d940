#!/usr/bin/env bash
# Runs the BenchJob examples (examples/resnet50-bench.yaml, examples/arch-bench.yaml) through a
# real mpsd on this machine, one after the other, and keeps what `mpsctl` printed: the followed
# rows, then each table as Markdown and CSV. For the notes and tests/perf/RESULTS-style reports.
#   tests/perf/bench_examples.sh BUILD_DIR [OUT_DIR] [EXAMPLE...]
# BUILD_DIR holds server/mpsd and client/mpsctl; OUT_DIR (default /tmp/mpsd-bench-examples) gets
# device.txt, load.txt, mpsd.log and per example NAME.follow.txt, NAME.md and NAME.csv.
set -uo pipefail

BUILD=$(realpath "${1:?usage: bench_examples.sh BUILD_DIR [OUT_DIR] [EXAMPLE...]}")
OUT=${2:-/tmp/mpsd-bench-examples}
shift $(($# >= 2 ? 2 : 1))
EXAMPLES=("$@")
((${#EXAMPLES[@]})) || EXAMPLES=(resnet50-bench arch-bench)
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=$(mktemp -d /tmp/mpsd-bench-XXXXXX)
SERVER="unix://$STATE/mpsd.sock"
mkdir -p "$OUT"
mpsctl() { "$BUILD/client/mpsctl" --server "$SERVER" "$@"; }

"$BUILD/server/mpsd" --listen "$SERVER" --state-dir "$STATE/state" > "$OUT/mpsd.log" 2>&1 &
MPSD=$!
trap 'kill -TERM $MPSD 2>/dev/null; wait $MPSD 2>/dev/null; rm -rf "$STATE"' EXIT
for _ in $(seq 300); do mpsctl device > /dev/null 2>&1 && break; sleep 0.2; done
mpsctl device | tee "$OUT/device.txt"
: > "$OUT/load.txt"
for example in "${EXAMPLES[@]}"; do
  echo "== $example: $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/load.txt"
  start=$SECONDS
  mpsctl submit "$SRC/examples/$example.yaml" --follow | tee "$OUT/$example.follow.txt"
  echo "exit ${PIPESTATUS[0]} after $((SECONDS - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" |
    tee -a "$OUT/load.txt"
  id=$(head -1 "$OUT/$example.follow.txt" | cut -d' ' -f2)
  mpsctl bench "$id" --format markdown | tee "$OUT/$example.md"
  mpsctl bench "$id" --format csv > "$OUT/$example.csv"
done
