#!/usr/bin/env bash
# README's test command: installs what is missing (Debian 12), builds, runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname)" = Linux ] && command -v apt-get >/dev/null; then deploy/setup-debian.sh --tests; fi
# Every C++ file as clang-format writes it (.clang-format: Google, 100 columns).
deploy/check-format.sh
# -g1 (line tables only) in place of RelWithDebInfo's -g, -O2 and -DNDEBUG as it has them: a
# LibTorch file compiles in ~70% of the time (trainer/fused_train.cc: 18 s against 26 s on 2
# cores), and CI compiles every one from nothing; a backtrace or a sanitizer's report still names
# the file and line of each frame, only a debugger's locals are gone. deploy/build.sh's default
# (what users build and the package ships) keeps -g.
deploy/build.sh -DMPSD_BUILD_TESTS=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
ctest --test-dir "${MPSD_BUILD_DIR:-build}" --output-on-failure -j 2 --timeout 600
# The ASan+UBSan and TSan builds (clang-14, torch-free) running the server, client and reader
# tests, and a smoke run of the libFuzzer targets (deploy/test-sanitizers.sh). MPSD_SANITIZERS=""
# skips them; "asan", "tsan", "fuzz" or any two run those parts.
export MPSD_SANITIZERS="${MPSD_SANITIZERS-asan tsan fuzz}"
if [ -n "$MPSD_SANITIZERS" ]; then deploy/test-sanitizers.sh; fi
# The .deb: built from this tree, installed, started as the service, used, removed.
MPSD_BUILD_DIR="${MPSD_BUILD_DIR:-build}" deploy/test-package.sh
