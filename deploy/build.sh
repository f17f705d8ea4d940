#!/usr/bin/env bash
# Configures and builds mpsd into ./build (or $MPSD_BUILD_DIR). Extra arguments go to cmake's
# configure step, e.g. -DCMAKE_PREFIX_PATH=... for a CUDA LibTorch. MPSD_BUILD_TARGETS="a b"
# builds only those targets (deploy/quickstart.sh: the daemon, its executor and mpsctl, not the
# tests); default: everything.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${MPSD_BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" "$@"
# A LibTorch translation unit needs about 1 GiB of memory and 20-40 s: two at a time.
targets=()
for target in ${MPSD_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build_dir" -j "${MPSD_JOBS:-2}" "${targets[@]}"
