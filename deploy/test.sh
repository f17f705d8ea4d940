#!/usr/bin/env bash
# README's test command: installs what is missing (Debian 12), builds, runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname)" = Linux ] && command -v apt-get >/dev/null; then deploy/setup-debian.sh; fi
deploy/build.sh
ctest --test-dir "${MPSD_BUILD_DIR:-build}" --output-on-failure -j 2 --timeout 600
# ASan+UBSan and TSan builds (clang-14, torch-free) running the server, client and reader tests,
# and a smoke run of each libFuzzer target. MPSD_SANITIZERS="" skips them; "asan fuzz" picks.
if [ -n "${MPSD_SANITIZERS-asan tsan fuzz}" ]; then deploy/test-sanitizers.sh; fi
# The .deb: built from this tree, installed, started as the service, used, removed.
MPSD_BUILD_DIR="${MPSD_BUILD_DIR:-build}" deploy/test-package.sh
