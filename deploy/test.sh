#!/usr/bin/env bash
# README's test command: installs what is missing (Debian 12), builds, runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname)" = Linux ] && command -v apt-get >/dev/null; then deploy/setup-debian.sh --tests; fi
# Every C++ file as clang-format writes it (.clang-format: Google, 100 columns).
deploy/check-format.sh
deploy/build.sh -DMPSD_BUILD_TESTS=ON
ctest --test-dir "${MPSD_BUILD_DIR:-build}" --output-on-failure -j 2 --timeout 600
# The ASan+UBSan and TSan builds (clang-14, torch-free) running the server, client and reader
# tests, and a smoke run of the libFuzzer targets (deploy/test-sanitizers.sh). MPSD_SANITIZERS=""
# skips them; "asan", "tsan", "fuzz" or any two run those parts.
export MPSD_SANITIZERS="${MPSD_SANITIZERS-asan tsan fuzz}"
if [ -n "$MPSD_SANITIZERS" ]; then deploy/test-sanitizers.sh; fi
# The .deb: built from this tree, installed, started as the service, used, removed.
MPSD_BUILD_DIR="${MPSD_BUILD_DIR:-build}" deploy/test-package.sh
