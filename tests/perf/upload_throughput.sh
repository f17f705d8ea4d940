#!/usr/bin/env bash
# Issue 29's notes: upload throughput over loopback TLS, and the 50 MB folder case. One mpsd on
# 127.0.0.1 with TLS (a self-signed certificate) and a submitter token; mpsctl uploads
#   1. a 50 MB file of random bytes,
#   2. a 50 MB folder (Fashion-MNIST's 4 .gz files, 30 MB, plus a 20 MB file of random bytes),
#      first killed (SIGKILL) part-way, then run again: it resumes from the bytes the daemon holds,
#   3. the same folder again under another name, whole (the folder's own figure),
# then trains 1 epoch of an MLP on the uploaded folder (root: upload:NAME) and prints its state.
# Prints seconds and MB/s (1 MB = 10^6 bytes, of the bytes sent: the tar stream for a folder).
# Usage: tests/perf/upload_throughput.sh [BUILD_DIR] [KILL_AFTER_S]   (defaults: build, 0.3)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}")
kill_after=${2:-0.3}
work=$(mktemp -d -t mpsd-upload-XXXXXX)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -keyout "$work/key.pem" -out "$work/cert.pem" -subj /CN=localhost \
  -addext subjectAltName=IP:127.0.0.1,DNS:localhost 2>/dev/null
"$build/server/mpsd" token add --tokens "$work/tokens.yaml" --name laptop --role submitter \
  >"$work/token"
chmod 600 "$work/token"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/server/mpsd" --listen "unix://$work/mpsd.sock" --listen "127.0.0.1:$port" \
  --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" --tokens "$work/tokens.yaml" \
  --state-dir "$work/state" 2>"$work/mpsd.log" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$work"' EXIT
ctl() {
  "$build/client/mpsctl" --server "127.0.0.1:$port" --tls-ca "$work/cert.pem" \
    --token-file "$work/token" "$@"
}
for _ in $(seq 1 300); do ctl uploads >/dev/null 2>&1 && break; sleep 0.2; done

head -c 50000000 /dev/urandom >"$work/random.bin"
mkdir -p "$work/fmnist50"
cp /usr/share/datasets/fashion-mnist/*.gz "$work/fmnist50/"
head -c 20000000 /dev/urandom >"$work/fmnist50/padding.bin"
echo "folder: $(du -sb "$work/fmnist50" | cut -f1) bytes in $(ls "$work/fmnist50" | wc -l) files"

seconds() { awk -v a="$1" -v b="$2" 'BEGIN {print b - a}'; }
timed() {  # label, then the mpsctl arguments: prints wall seconds and the line mpsctl printed
  local start end out
  start=$(date +%s.%N)
  out=$(ctl "$@" 2>&1)
  end=$(date +%s.%N)
  printf '%-28s %6.2f s  %s\n' "$label" "$(seconds "$start" "$end")" "${out##*$'\n'}"
}
label="file 50 MB" timed upload "$work/random.bin"
label="folder 50 MB, whole" timed upload "$work/fmnist50" --name whole
# Killed part-way (a laptop's lid closed), then run again.
timeout -s KILL "$kill_after" "$build/client/mpsctl" --server "127.0.0.1:$port" \
  --tls-ca "$work/cert.pem" --token-file "$work/token" upload "$work/fmnist50" >/dev/null 2>&1 || true
held=$(ctl uploads --json | python3 -c 'import json,sys
d=json.load(sys.stdin); print(sum(int(u.get("size_bytes",0)) for u in d.get("uploads",[]) if u.get("kind")=="partial"))')
echo "killed after ${kill_after} s: the daemon held $held bytes of fmnist50"
start=$(date +%s.%N)
out=$(ctl upload "$work/fmnist50" 2>&1)
end=$(date +%s.%N)
echo "$out" | sed 's/^/  /'
printf '%-28s %6.2f s\n' "folder 50 MB, resumed" "$(seconds "$start" "$end")"

cat >"$work/job.yaml" <<EOF
kind: TrainJob
model: {name: mlp}
dataset: {name: fashion-mnist, root: upload:fmnist50, limit_train: 10000, limit_test: 1000}
batch_size: 128
epochs: 1
seed: 1
device: cpu
EOF
id=$(ctl submit "$work/job.yaml")
ctl wait "$id" >/dev/null && echo "job $id on upload:fmnist50: SUCCEEDED" || ctl get "$id"
