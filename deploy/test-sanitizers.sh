#!/usr/bin/env bash
# The sanitizer and fuzzing suites (issue 14), torch-free, compiled with clang-14 (Debian
# clang-14, libclang-rt-14-dev: deploy/setup-debian.sh --tests). Called by deploy/test.sh, so CI
# runs it.
#   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer, plus libFuzzer's coverage
#                instrumentation: the daemon, mpsctl, the api/, server/, client/ tests and the
#                torch-free readers' tests (IDX, CIFAR-10), and tests/fuzz's targets, each run
#                for MPSD_FUZZ_SECONDS (default 30, libFuzzer seed MPSD_FUZZ_SEED, default 1)
#                from its seed corpus.
#   build-tsan/  ThreadSanitizer, compiled with -Wall -Wextra -Wthread-safety -Werror
#                (MPSD_STRICT_WARNINGS): the daemon, mpsctl and the same tests; what Debian's abseil and
#                gRPC (built without TSan) order is told to TSan by tests/sanitizers/tsan_*_sync.cc,
#                and tests/sanitizers/tsan.supp names the library calls left (docs/development.md,
#                "Sanitizers and fuzzing").
# Neither links LibTorch (MPSD_WITH_TORCH=OFF): mpsd-executor, the trainer and the end-to-end
# tests stay in the main build. MPSD_SANITIZERS="asan tsan fuzz" picks the parts (default all).
set -euo pipefail
cd "$(dirname "$0")/.."
parts="${MPSD_SANITIZERS:-asan tsan fuzz}"
jobs="${MPSD_JOBS:-2}"
fuzz_seconds="${MPSD_FUZZ_SECONDS:-30}"
# A fixed seed by default, so a run from a fresh tree (CI's) takes the same mutation path each
# time and a red run is a new input, not chance; MPSD_FUZZ_SEED=0 lets libFuzzer pick one.
fuzz_seed="${MPSD_FUZZ_SEED:-1}"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

# configure DIR COMPILE_FLAGS LINK_FLAGS [CMAKE ARGS...]
# -gline-tables-only, not -g: the reports' stacks name each frame's file and line all the same,
# and the build compiles faster without the types and variables a debugger would read.
configure() {
  local dir="$1" flags="$2" link_flags="$3"
  shift 3
  cmake -S . -B "$dir" -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS="$flags -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="$link_flags" -DMPSD_WITH_TORCH=OFF -DMPSD_TEST_DEBUG_INFO=ON "${launcher[@]}" "$@" >/dev/null
}

# The sanitizers stop the test at the first report; the symbolizer names the lines.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizers/lsan.supp}"
if command -v llvm-symbolizer-14 >/dev/null; then
  export ASAN_SYMBOLIZER_PATH="$(command -v llvm-symbolizer-14)"
  export TSAN_SYMBOLIZER_PATH="$ASAN_SYMBOLIZER_PATH"
fi

if [[ " $parts " == *" asan "* || " $parts " == *" fuzz "* ]]; then
  echo "test-sanitizers: ASan+UBSan build (build-asan/)"
  asan="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link"
  configure build-asan "$asan" "$asan" -DMPSD_BUILD_FUZZERS=ON
  cmake --build build-asan -j "$jobs"
fi
if [[ " $parts " == *" asan "* ]]; then
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 600
fi
if [[ " $parts " == *" fuzz "* ]]; then
  # Each target from its seed corpus (tests/fuzz/corpus/<target>/), new inputs kept in
  # build-asan/fuzz-corpus/<target>/, a crash's input in build-asan/fuzz-artifacts/. libFuzzer
  # runs one process on one core: two targets at a time, each for the full fuzz_seconds.
  mkdir -p build-asan/fuzz-artifacts
  fuzz() {
    local fuzzer="$1"
    mkdir -p "build-asan/fuzz-corpus/$fuzzer"
    build-asan/tests/fuzz/$fuzzer -seed="$fuzz_seed" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix=build-asan/fuzz-artifacts/"$fuzzer"- \
      "build-asan/fuzz-corpus/$fuzzer" "tests/fuzz/corpus/$fuzzer" 2>"build-asan/$fuzzer.log"
  }
  fuzzers=(${MPSD_FUZZERS:-job_file_fuzzer config_fuzzer idx_fuzzer cifar_fuzzer zip_index_fuzzer pickle_scan_fuzzer submit_request_fuzzer})
  for ((i = 0; i < ${#fuzzers[@]}; i += 2)); do
    pair=("${fuzzers[@]:i:2}")
    pids=()
    for fuzzer in "${pair[@]}"; do
      echo "test-sanitizers: $fuzzer for ${fuzz_seconds} s"
      fuzz "$fuzzer" &
      pids+=($!)
    done
    # Both ended before either is reported: a failing one leaves no fuzzer running.
    statuses=()
    for pid in "${pids[@]}"; do
      status=0
      wait "$pid" || status=$?
      statuses+=("$status")
    done
    for j in "${!pair[@]}"; do
      fuzzer="${pair[j]}"
      if [ "${statuses[j]}" != 0 ]; then
        tail -n 60 "build-asan/$fuzzer.log"
        echo "test-sanitizers: $fuzzer failed (exit ${statuses[j]}), log build-asan/$fuzzer.log" >&2
        exit 1
      fi
      grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "build-asan/$fuzzer.log" |
        sed "s/^/  $fuzzer: /"
    done
  done
fi
if [[ " $parts " == *" tsan "* ]]; then
  echo "test-sanitizers: TSan build (build-tsan/)"
  # Debian's libabsl and libgrpc are built without TSan: tests/sanitizers/tsan_absl_sync.cc
  # (absl::Mutex, CondVar, Notification) and tsan_grpc_sync.cc (an operation's start before its
  # completion) tell TSan what they order, linked into every program. The objects are in the
  # link flags, which CMake does not track: when one changed, the programs linked with the old
  # one are removed so that the build links them again.
  mkdir -p build-tsan
  sync_objects=""
  relink=0
  for sync in tsan_absl_sync tsan_grpc_sync; do
    clang++-14 -std=c++17 -fsanitize=thread -O1 -g -c "tests/sanitizers/$sync.cc" \
      -o "build-tsan/$sync.o.new"
    if cmp -s "build-tsan/$sync.o.new" "build-tsan/$sync.o"; then
      rm "build-tsan/$sync.o.new"
    else
      mv "build-tsan/$sync.o.new" "build-tsan/$sync.o"
      relink=1
    fi
    sync_objects+=" $PWD/build-tsan/$sync.o"
  done
  if [ "$relink" = 1 ]; then
    find build-tsan -path '*/CMakeFiles' -prune -o -type f -perm -u+x -print | xargs -r rm -f
  fi
  # Also the warning build: -Wall -Wextra -Wthread-safety -Werror over mpsd's torch-free code.
  configure build-tsan "-fsanitize=thread" "-fsanitize=thread$sync_objects -ldl" \
    -DMPSD_STRICT_WARNINGS=ON
  cmake --build build-tsan -j "$jobs"
  # The canary: what absl orders is not reported, what it does not order is (66: TSan's code).
  clang++-14 -std=c++17 -fsanitize=thread -O1 -g tests/sanitizers/tsan_canary.cc $sync_objects \
    -labsl_synchronization -ldl -o build-tsan/tsan_canary
  if ! build-tsan/tsan_canary ordered >build-tsan/tsan_canary.log 2>&1; then
    cat build-tsan/tsan_canary.log
    echo "test-sanitizers: TSan reported tests/sanitizers/tsan_canary.cc's ordered access" >&2
    exit 1
  fi
  canary=0
  build-tsan/tsan_canary race >build-tsan/tsan_canary.log 2>&1 || canary=$?
  if [ "$canary" != 66 ] || ! grep -q "data race.*tsan_canary.cc" build-tsan/tsan_canary.log; then
    cat build-tsan/tsan_canary.log
    echo "test-sanitizers: TSan did not report tests/sanitizers/tsan_canary.cc's race" >&2
    exit 1
  fi
  echo "test-sanitizers: tsan_canary: the ordered access passes, the race is reported"
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" --timeout 600
fi
