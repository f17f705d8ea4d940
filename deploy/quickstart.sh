#!/usr/bin/env bash
# README's main job: installs what is missing (Debian 12), builds, starts mpsd with its built-in
# configuration and a temporary state dir, trains the ConvNet on the full Fashion-MNIST
# (examples/fashion-mnist.yaml) while following its metrics, then stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname)" = Linux ] && command -v apt-get >/dev/null; then deploy/setup-debian.sh; fi
build_dir="${MPSD_BUILD_DIR:-build}"
# Only what the main job needs: the daemon, its executor, mpsctl (deploy/test.sh builds the rest).
# A new build dir is configured without the tests, whose GoogleTest this command does not install;
# an existing one keeps its choice (deploy/test.sh turns them on).
configure=()
if [ ! -f "$build_dir/CMakeCache.txt" ]; then configure+=(-DMPSD_BUILD_TESTS=OFF); fi
MPSD_BUILD_TARGETS="mpsd mpsd-executor mpsctl" deploy/build.sh "${configure[@]}"

state_dir="$(mktemp -d -t mpsd-quickstart-XXXXXX)"
address="unix://$state_dir/mpsd.sock"
"$build_dir/server/mpsd" --listen "$address" --state-dir "$state_dir/state" \
  2>"$state_dir/mpsd.log" &
daemon=$!
stop_daemon() {
  kill -TERM "$daemon" 2>/dev/null && wait "$daemon" || true
  echo "mpsd stopped; its log and job database are in $state_dir"
}
trap stop_daemon EXIT

for _ in $(seq 1 100); do
  "$build_dir/client/mpsctl" --server "$address" device >/dev/null 2>&1 && break
  sleep 0.2
done
"$build_dir/client/mpsctl" --server "$address" device
"$build_dir/client/mpsctl" --server "$address" submit "${1:-examples/fashion-mnist.yaml}" --follow
