#!/usr/bin/env bash
# The Apple MPS code paths (trainer/compat/mps.cc), compiled and linked off Apple: configures SRC into
# BUILD with -DMPSD_MPS_COMPILE_CHECK=ON against a LibTorch 2.x (whose MPS API exists everywhere
# and answers "not available" off Apple) and builds mpsd-executor only; then checks that the
# executor really references the MPS API (torch::mps::is_available, at::detail::getMPSHooks)
# and that it starts. Prints "MPS compile check: PASSED" or "MPS compile check: FAILED (...)".
#   tests/perf/mps_compile_check.sh SRC BUILD JOBS [cmake configure arguments...]
# gpu_train_compare.sh calls it after its own build, with the same configure arguments
# (CMAKE_PREFIX_PATH naming PyTorch's LibTorch, the unpacked dependencies). On Debian's
# LibTorch 1.13 the configure step stops with "MPSD_MPS_COMPILE_CHECK needs LibTorch >= 2".
set -uo pipefail
src=$1 build=$2 jobs=$3
shift 3
fail() { echo "MPS compile check: FAILED ($*)"; exit 1; }
rm -rf "$build"
start=$SECONDS
CMAKE_POLICY_VERSION_MINIMUM=3.5 cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DMPSD_BUILD_TESTS=OFF -DMPSD_MPS_COMPILE_CHECK=ON "$@" 2>&1 | grep -E "MPSD_MPS_COMPILE_CHECK|Error|error" 
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail "configure"
cmake --build "$build" -j "$jobs" --target mpsd-executor 2>&1 | grep -E "error|warning: .*mps|Linking" 
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail "build"
executor="$build/trainer/mpsd-executor"
symbols=$(nm -C "$executor" 2>/dev/null | grep -cE "torch::mps::is_available|at::detail::getMPSHooks")
[[ $symbols -ge 2 ]] || fail "the executor does not reference the MPS API ($symbols symbols)"
"$executor" --help > /dev/null || fail "the executor does not start"
echo "MPS compile check: PASSED (mpsd-executor built with the MPS code paths in $((SECONDS - start)) s;" \
  "$symbols references to torch::mps / getMPSHooks)"
