#!/usr/bin/env bash
# Runs every job file in examples/ as is through a real mpsd, one after another, and prints each
# job's last lines and final state: the check that the examples "run as is" on a machine with
# the data in the default places. Usage: tests/perf/run_examples.sh BUILD_DIR [OUT_DIR]
# (OUT_DIR gets mpsd.log and one <example>.log each). Where /usr/share/datasets/cifar10 is
# missing, it writes random CIFAR-10-format files there first (the shape of the real ones;
# the accuracy then means nothing), and /usr/share/datasets/colours{,.pt} the same way.
# PER_JOB_TIMEOUT_S (default 300) bounds each job.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(realpath "${1:?usage: run_examples.sh BUILD_DIR [OUT_DIR]}")
OUT=$(realpath -m "${2:-/tmp/mpsd-examples}")
mkdir -p "$OUT"
RUN=$(mktemp -d)
if [[ ! -e /usr/share/datasets/cifar10/test_batch.bin ]]; then
  mkdir -p /usr/share/datasets/cifar10 && python3 - <<'PY'
import os, random
random.seed(0)
for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    with open(os.path.join("/usr/share/datasets/cifar10", name), "wb") as f:
        for _ in range(10000):
            f.write(bytes([random.randrange(10)]) + os.urandom(3072))
PY
fi
# examples/image-folder.yaml and tensors.yaml: the colours task of examples/make_own_data.py.
if [[ ! -e /usr/share/datasets/colours.pt ]]; then
  /usr/bin/python3 "$REPO/examples/make_own_data.py" /usr/share/datasets/colours \
    --tensors /usr/share/datasets/colours.pt
fi
"$BUILD/server/mpsd" --listen "unix://$RUN/mpsd.sock" --state-dir "$RUN/state" > "$OUT/mpsd.log" 2>&1 &
mpsd_pid=$!
for _ in $(seq 300); do [[ -S $RUN/mpsd.sock ]] && break; sleep 0.1; done
MPSCTL=("$BUILD/client/mpsctl" --server "unix://$RUN/mpsd.sock")
# Examples that name a trained model by job id (`model: "1"`, an EvalJob) run last, against
# fashion-mnist-small.yaml's job, whatever id it got.
small_id=
for job in $(grep -L '^model: "' "$REPO"/examples/*.yaml) $(grep -l '^model: "' "$REPO"/examples/*.yaml); do
  name=$(basename "$job" .yaml)
  if grep -q '^model: "' "$job"; then
    if [[ -z $small_id ]]; then
      echo "== $name: skipped, fashion-mnist-small.yaml's job did not run"
      continue
    fi
    sed "s/^model: \"[^\"]*\"/model: \"$small_id\"/" "$job" > "$RUN/$name.yaml"
    job="$RUN/$name.yaml"
  fi
  start=$SECONDS
  timeout "${PER_JOB_TIMEOUT_S:-300}" "${MPSCTL[@]}" submit "$job" --follow > "$OUT/$name.log" 2>&1
  echo "== $name: exit $? in $((SECONDS - start)) s"
  if [[ $name == fashion-mnist-small ]]; then
    small_id=$("${MPSCTL[@]}" --json list --limit 1 2>/dev/null \
      | /usr/bin/python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["jobs"][0]["id"])' 2>/dev/null)
  fi
  grep -v '^ *step\|^\s*$' "$OUT/$name.log" | tail -n 6
done
kill -TERM "$mpsd_pid"; wait "$mpsd_pid"
