#!/usr/bin/env bash
# Issue 7, first step: on one CUDA machine with PyTorch 2.x, build mpsd against that PyTorch's
# LibTorch and measure, in the same run, seconds per epoch (median of epochs 2..N) and final test
# accuracy for Fashion-MNIST, the seed ConvNet, batch 128, Adam 1e-3, 3 epochs:
#   (1)  the seeds' PyTorch script: torchvision dataset, DataLoader(num_workers=2, pin_memory)
#   (2)  PyTorch eager, whole dataset resident on the GPU (randperm + index per batch)
#   (2b) the same with Adam(fused=True)
#   (3)  a bare LibTorch C++ loop, data resident on the GPU (tests/perf/bare_loop.cc)
#   (4)  an mpsd TrainJob end to end (mpsd on a unix socket, mpsctl submit --follow --json)
#   (5a) torch.compile(model) + fused Adam, (5b) torch.compile(mode="reduce-overhead") + fused
#        Adam, (5c) the whole step captured in one CUDA graph (capturable fused Adam)
# plus ResNet-50 inference at batch 32, 64, 128 (fp32, and bf16 + channels_last): PyTorch eager
# (tests/perf/torch_bench.py) against an mpsd BenchJob,
# and writes $OUT/results.json and $OUT/RESULTS.md (tests/perf/summarize.py).
#
# For a machine without package network the inputs come in one directory, DEPS (first argument,
# default .deps):
#   DEPS/*.deb                 Debian 12 packages mpsd needs (gRPC, protobuf, abseil, spdlog, fmt,
#                              yaml-cpp, SQLite, CLI11, re2, c-ares, zlib, OpenSSL, pkgconf; see
#                              tests/perf/RESULTS.md), unpacked into PREFIX (default /opt/deps)
#   DEPS/mpsd-src.tar.gz       the tree to build: git archive --format=tar.gz -o ... HEAD
#   DEPS/fashion-mnist/*.gz    the four Fashion-MNIST IDX files
# Empty DEPS/*.deb: the libraries are taken from the system (PREFIX unused).
#
# MPS_COMPILE_CHECK=1 (the default with MODE=build) then also builds mpsd-executor with the Apple
# MPS code paths compiled in (tests/perf/mps_compile_check.sh; build.log ends with its verdict).
# MODE=build only unpacks, configures and builds; MODE=mpsd also runs the mpsd job but none of
# the PyTorch variants (both to try the recipe on a machine without a GPU, e.g. with TORCH_PREFIX
# pointing at Debian's CPU LibTorch, JOB_DEVICE=cpu and LIMIT_TRAIN/LIMIT_TEST). Other knobs:
# OUT, PREFIX, WORK, JOBS, EPOCHS, BATCH, LR, PYTHON, TORCH_PREFIX, BUILD_TIMEOUT_S, RUN_TIMEOUT_S,
# SKIP_BUILD=1 (reuse WORK/build from an earlier run).
#
# At most 8 files land in $OUT (the device tool brings back 8): env.txt run.log build.log mpsd.log
# device.json mpsd_events.jsonl results.json RESULTS.md; the BenchJob's rows are in results.json.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PERF="$REPO/tests/perf"
DEPS=$(realpath "${1:-${DEPS:-$REPO/.deps}}")
OUT=${OUT:-$REPO/perf-out}
PREFIX=${PREFIX:-/opt/deps}
WORK=${WORK:-/tmp/mpsd-perf}
JOBS=${JOBS:-16}
EPOCHS=${EPOCHS:-3}
BATCH=${BATCH:-128}
LR=${LR:-0.001}
MODE=${MODE:-all}
if [[ $MODE == build ]]; then MPS_COMPILE_CHECK=${MPS_COMPILE_CHECK:-1}; fi
JOB_DEVICE=${JOB_DEVICE:-cuda}
LIMIT_TRAIN=${LIMIT_TRAIN:-0}
LIMIT_TEST=${LIMIT_TEST:-0}
PY=${PYTHON:-python3}
if [[ $MODE == build ]]; then BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-500}; fi  # + the MPS check
BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-330}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-150}
TOTAL_BUDGET_S=${TOTAL_BUDGET_S:-560}   # every step's timeout is cut to end the script by then
DEADLINE=$((SECONDS + TOTAL_BUDGET_S))
# tmo LIMIT: LIMIT, or less so that 25 s are left for the rest (summary) before the deadline.
tmo() { local t=$1 left=$((DEADLINE - SECONDS - 25)); ((left < t)) && t=$left; ((t < 5)) && t=5; echo "$t"; }
export PYTHONUNBUFFERED=1

rm -rf "$WORK/raw" && mkdir -p "$OUT" "$WORK/raw"
exec > >(tee -a "$OUT/run.log") 2>&1
say() { printf '\n==== [%s] %s\n' "$(date +%T)" "$*"; }
say "gpu_train_compare.sh: DEPS=$DEPS OUT=$OUT PREFIX=$PREFIX WORK=$WORK MODE=$MODE"

TORCH_PREFIX=${TORCH_PREFIX:-$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')}
ARCH_LIB=usr/lib/x86_64-linux-gnu

# ---- environment ------------------------------------------------------------------------------
if [[ $MODE == all ]]; then
  say "environment"
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -srm)"
    grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null
    echo "cpus: $(nproc)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit \
      --format=csv 2>&1
    "$PY" - <<'EOF' 2>&1
import importlib, platform, torch
print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("torch.cuda.is_available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, "memory_bytes", p.total_memory, "sm", p.multi_processor_count)
try:
    tv = importlib.import_module("torchvision")
    print("torchvision", tv.__version__)
except Exception as e:  # noqa: BLE001
    print("torchvision missing:", e)
EOF
    echo "cmake: $(cmake --version | head -1)"
    echo "g++: $(g++ --version | head -1)"
    nvcc_path=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
    echo "nvcc: ${nvcc_path:-none} $("${nvcc_path:-true}" --version 2>/dev/null | grep -i release)"
    echo "torch cmake prefix: $TORCH_PREFIX"
  } | tee "$OUT/env.txt"
fi

# ---- data -------------------------------------------------------------------------------------
IDX_DIR="$WORK/data/fashion-mnist"      # the .gz files, for mpsd and the resident variants
TV_ROOT="$WORK/data/torchvision"        # TV_ROOT/FashionMNIST/raw/<uncompressed>, for torchvision
if [[ $MODE != build ]]; then
  say "data"
  mkdir -p "$IDX_DIR" "$TV_ROOT/FashionMNIST/raw"
  cp "$DEPS"/fashion-mnist/*-ubyte.gz "$IDX_DIR"/
  for f in "$IDX_DIR"/*.gz; do gunzip -c "$f" > "$TV_ROOT/FashionMNIST/raw/$(basename "${f%.gz}")"; done
  ls -l "$IDX_DIR" "$TV_ROOT/FashionMNIST/raw"
fi

COMMON=(--epochs "$EPOCHS" --batch-size "$BATCH" --lr "$LR" --seed 1)

# ---- (1), (2), (2b): PyTorch ------------------------------------------------------------------
if [[ $MODE == all ]]; then
  say "(1) seeds' script: torchvision dataset, DataLoader(num_workers=2, pin_memory=True)"
  timeout "$(tmo "$RUN_TIMEOUT_S")" "$PY" "$PERF/seed_dataloader.py" "${COMMON[@]}" \
    --torchvision-root "$TV_ROOT" --idx-dir "$IDX_DIR" --json "$WORK/raw/v1.json"
  echo "exit $?"
  say "(2) PyTorch eager, dataset resident on the GPU"
  timeout "$(tmo "$RUN_TIMEOUT_S")" "$PY" "$PERF/torch_resident.py" "${COMMON[@]}" \
    --idx-dir "$IDX_DIR" --json "$WORK/raw/v2.json"
  echo "exit $?"
  say "(2b) PyTorch eager, dataset resident on the GPU, Adam(fused=True)"
  timeout "$(tmo "$RUN_TIMEOUT_S")" "$PY" "$PERF/torch_resident.py" "${COMMON[@]}" --fused \
    --idx-dir "$IDX_DIR" --json "$WORK/raw/v2b.json"
  echo "exit $?"
  for v in "5a --compile default" "5b --compile reduce-overhead" "5c --cuda-graph"; do
    set -- $v
    say "($1) PyTorch, dataset resident on the GPU, ${*:2}"
    timeout "$(tmo "$RUN_TIMEOUT_S")" "$PY" "$PERF/torch_resident.py" "${COMMON[@]}" "${@:2}" \
      --idx-dir "$IDX_DIR" --json "$WORK/raw/v$1.json"
    echo "exit $?"
  done
  say "ResNet-50 inference, PyTorch eager"
  timeout "$(tmo 120)" "$PY" "$PERF/torch_bench.py" --batch-sizes 32,64,128 --warmup 10 \
    --iters 50 --json "$WORK/raw/bench_torch.json"
  echo "exit $?"
fi

# ---- build mpsd -------------------------------------------------------------------------------
SRC="$WORK/src"
BUILD="$WORK/build"
build_mpsd() {
  set -o pipefail
  local cmake_args=() prefix_path="$TORCH_PREFIX"
  if compgen -G "$DEPS/*.deb" > /dev/null; then
    say "unpacking $(ls "$DEPS"/*.deb | wc -l) Debian packages into $PREFIX"
    case $PREFIX in /|/usr|/usr/*|/opt|"") echo "refusing PREFIX=$PREFIX"; return 1 ;; esac
    rm -rf "$PREFIX" && mkdir -p "$PREFIX"
    for f in "$DEPS"/*.deb; do dpkg -x "$f" "$PREFIX" || return 1; done
    # Absolute symbolic links (zlib1g-dev: usr/lib/.../libz.so -> /lib/.../libz.so.1.2.13) point
    # into the system, not the prefix: point them at the prefix's copy.
    local link target
    while IFS= read -r link; do
      target=$(readlink "$link")
      ln -sfn "$PREFIX$target" "$link"
      [[ -e $link ]] || echo "dangling after relinking: $link -> $PREFIX$target"
    done < <(find "$PREFIX" -type l -lname '/*')
    # pkg-config files name /usr: point them (and any absolute /usr/include or /usr/lib paths
    # in the CMake packages' link interfaces) at the prefix.
    sed -i -e "s#=/usr\\b#=$PREFIX/usr#g" -e "s# -I/usr/# -I$PREFIX/usr/#g" \
      -e "s# -L/usr/# -L$PREFIX/usr/#g" "$PREFIX/$ARCH_LIB"/pkgconfig/*.pc
    find "$PREFIX/$ARCH_LIB/cmake" "$PREFIX/usr/share/cmake" -name '*.cmake' -print0 |
      xargs -0 sed -i -E "s#([\";])/usr/(include|lib/x86_64-linux-gnu/lib)#\\1$PREFIX/usr/\\2#g"
    local need missing=0
    for need in bin/protoc bin/grpc_cpp_plugin bin/pkgconf include/google/protobuf/message.h \
        include/grpcpp/grpcpp.h include/absl/status/status.h include/spdlog/spdlog.h \
        include/yaml-cpp/yaml.h include/sqlite3.h include/CLI/CLI.hpp include/zlib.h \
        include/openssl/ssl.h include/re2/re2.h include/ares.h \
        lib/x86_64-linux-gnu/libprotobuf.so lib/x86_64-linux-gnu/libprotoc.so.32 \
        lib/x86_64-linux-gnu/libgrpc++.so lib/x86_64-linux-gnu/libgrpc.so \
        lib/x86_64-linux-gnu/libgrpc++_reflection.so lib/x86_64-linux-gnu/libspdlog.so \
        lib/x86_64-linux-gnu/libfmt.so lib/x86_64-linux-gnu/libyaml-cpp.so \
        lib/x86_64-linux-gnu/libsqlite3.so lib/x86_64-linux-gnu/libz.so \
        lib/x86_64-linux-gnu/libssl.so lib/x86_64-linux-gnu/libre2.so \
        lib/x86_64-linux-gnu/libcares.so lib/x86_64-linux-gnu/libabsl_status.so \
        lib/x86_64-linux-gnu/cmake/grpc/gRPCConfig.cmake share/cmake/CLI11/CLI11Config.cmake; do
      if [[ ! -e $PREFIX/usr/$need ]]; then echo "missing after unpacking: $PREFIX/usr/$need"; missing=1; fi
    done
    ((missing)) && return 1
    export LD_LIBRARY_PATH="$PREFIX/$ARCH_LIB:$PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LIBRARY_PATH="$PREFIX/$ARCH_LIB:$PREFIX/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export PKG_CONFIG_PATH="$PREFIX/$ARCH_LIB/pkgconfig"
    export PATH="$PATH:$PREFIX/usr/bin"   # pkg-config if the system has none; system tools first
    prefix_path="$PREFIX/usr;$TORCH_PREFIX"
    cmake_args+=(
      -DProtobuf_INCLUDE_DIR="$PREFIX/usr/include"
      -DProtobuf_LIBRARY="$PREFIX/$ARCH_LIB/libprotobuf.so"
      -DProtobuf_LITE_LIBRARY="$PREFIX/$ARCH_LIB/libprotobuf-lite.so"
      -DProtobuf_PROTOC_LIBRARY="$PREFIX/$ARCH_LIB/libprotoc.so"
      -DProtobuf_PROTOC_EXECUTABLE="$PREFIX/usr/bin/protoc"
      -DOPENSSL_ROOT_DIR="$PREFIX/usr"
      -DZLIB_ROOT="$PREFIX/usr"
      -DPKG_CONFIG_EXECUTABLE="$(command -v pkg-config || echo "$PREFIX/usr/bin/pkgconf")")
  fi
  # A CUDA LibTorch's CMake package looks for the CUDA toolkit (nvcc) of the same version.
  # USE_SYSTEM_NVTX: take the header-only nvtx3 from the toolkit (CUDA >= 12.9 has no
  # libnvToolsExt, which older packages' fallback asks for). PyTorch 2.11 + CUDA 13.0 found nvtx3
  # without it (the flag is then reported unused) and ignores CMAKE_CUDA_ARCHITECTURES with a
  # warning (TORCH_CUDA_ARCH_LIST rules); both are kept for other wheels.
  local nvcc
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
  if [[ -n $nvcc ]]; then
    export CUDACXX="$nvcc" TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
    cmake_args+=(-DCUDAToolkit_ROOT="$(dirname "$(dirname "$nvcc")")" -DCMAKE_CUDA_ARCHITECTURES=90
                 -DUSE_SYSTEM_NVTX=ON)
  fi
  say "configure ($SRC from $DEPS/mpsd-src.tar.gz)"
  rm -rf "$SRC" "$BUILD" && mkdir -p "$SRC"
  tar -xzf "$DEPS/mpsd-src.tar.gz" -C "$SRC" || return 1
  local configure=(cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo
                   -DMPSD_BUILD_TESTS=OFF -DMPSD_BUILD_PERF=ON -DCMAKE_PREFIX_PATH="$prefix_path"
                   "${cmake_args[@]}")
  if ! CMAKE_POLICY_VERSION_MINIMUM=3.5 "${configure[@]}" 2>&1 | tee "$BUILD.configure.log"; then
    # Still no nvtx3: an empty CUDA::nvToolsExt, defined right after project(), lets the package's
    # torch::nvtoolsext resolve (NVTX ranges are only for profilers). Not needed, so not yet run,
    # with PyTorch 2.11.
    grep -q nvToolsExt "$BUILD.configure.log" || return 1
    say "configure failed on CUDA::nvToolsExt: again with an empty stand-in target"
    printf 'if(NOT TARGET CUDA::nvToolsExt)\n  add_library(CUDA::nvToolsExt INTERFACE IMPORTED GLOBAL)\nendif()\n' \
      > "$BUILD.nvtx_shim.cmake"
    rm -rf "$BUILD"
    CMAKE_POLICY_VERSION_MINIMUM=3.5 "${configure[@]}" -DCMAKE_PROJECT_INCLUDE="$BUILD.nvtx_shim.cmake" ||
      return 1
  fi
  grep -E '^(Torch_DIR|gRPC_DIR|absl_DIR|spdlog_DIR|yaml-cpp_DIR|Protobuf_PROTOC_EXECUTABLE|SQLite3_LIBRARY|ZLIB_LIBRARY_RELEASE|OPENSSL_SSL_LIBRARY|C10_CUDA_LIBRARY):' \
    "$BUILD/CMakeCache.txt"
  say "build -j$JOBS (mpsd and its executor, mpsctl, the bare loop)"
  cmake --build "$BUILD" -j "$JOBS" || return 1
  ldd "$BUILD/server/mpsd" | grep -E '=> not found|libtorch|libc10|libgrpc|libprotobuf|libcudart' || true
  if [[ ${MPS_COMPILE_CHECK:-0} == 1 ]]; then
    say "MPS compile check: mpsd-executor with -DMPSD_MPS_COMPILE_CHECK=ON (tests/perf/mps_compile_check.sh)"
    local shim=()
    [[ -f $BUILD.nvtx_shim.cmake ]] && shim=(-DCMAKE_PROJECT_INCLUDE="$BUILD.nvtx_shim.cmake")
    bash "$SRC/tests/perf/mps_compile_check.sh" "$SRC" "$BUILD-mps" "$JOBS" \
      -DCMAKE_PREFIX_PATH="$prefix_path" "${cmake_args[@]}" "${shim[@]}" || return 1
  fi
}
run_build() {
  (export -f build_mpsd say; export DEPS PREFIX SRC BUILD JOBS TORCH_PREFIX ARCH_LIB MPS_COMPILE_CHECK
   timeout "$(tmo "$BUILD_TIMEOUT_S")" bash -c build_mpsd) > "$OUT/build.log" 2>&1
}
if [[ ${SKIP_BUILD:-0} == 1 && -x $BUILD/server/mpsd ]]; then
  say "SKIP_BUILD=1: using $BUILD"
  build_rc=0
else
  say "build mpsd (log: build.log)"
  run_build
  build_rc=$?
fi
[[ -f $OUT/build.log ]] && tail -n 40 "$OUT/build.log"
echo "build exit $build_rc"
echo "$build_rc" > "$WORK/raw/build_rc"

# ---- (3): the bare LibTorch loop --------------------------------------------------------------
[[ $MODE == build ]] && exit "$build_rc"
if [[ $build_rc -eq 0 && $MODE == all ]]; then
  say "(3) bare LibTorch C++ loop"
  (
    if compgen -G "$DEPS/*.deb" > /dev/null; then
      export LD_LIBRARY_PATH="$PREFIX/$ARCH_LIB:$PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    timeout "$(tmo "$RUN_TIMEOUT_S")" "$BUILD/tests/perf/mpsd_bare_loop" "$IDX_DIR" \
      "$WORK/raw/v3.json" "$EPOCHS" "$BATCH" "$LR" 1 "$JOB_DEVICE"
    echo "exit $?"
  )
fi

# ---- (4): an mpsd TrainJob end to end ---------------------------------------------------------

if [[ $build_rc -eq 0 ]]; then
  say "(4) mpsd TrainJob end to end"
  RUN_DIR="$WORK/mpsd-run"
  rm -rf "$RUN_DIR" && mkdir -p "$RUN_DIR/state"
  SOCK="unix://$RUN_DIR/mpsd.sock"
  cat > "$RUN_DIR/job.yaml" <<EOF
kind: TrainJob
model: {name: convnet}
dataset: {name: fashion-mnist, root: $IDX_DIR, limit_train: $LIMIT_TRAIN, limit_test: $LIMIT_TEST}
batch_size: $BATCH
epochs: $EPOCHS
optimizer: {name: adam, learning_rate: $LR}
seed: 1
device: $JOB_DEVICE
EOF
  cp "$RUN_DIR/job.yaml" "$WORK/raw/job.yaml"
  (
    if compgen -G "$DEPS/*.deb" > /dev/null; then
      export LD_LIBRARY_PATH="$PREFIX/$ARCH_LIB:$PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    "$BUILD/server/mpsd" --listen "$SOCK" --state-dir "$RUN_DIR/state" > "$OUT/mpsd.log" 2>&1 &
    mpsd_pid=$!
    for _ in $(seq 600); do [[ -S $RUN_DIR/mpsd.sock ]] && break; sleep 0.1; done
    MPSCTL=("$BUILD/client/mpsctl" --server "$SOCK" --json)
    timeout 60 "${MPSCTL[@]}" device > "$OUT/device.json"
    echo "device (before): $(cat "$OUT/device.json")"
    t0=$EPOCHREALTIME
    timeout "$(tmo "$RUN_TIMEOUT_S")" "${MPSCTL[@]}" submit "$RUN_DIR/job.yaml" --follow \
      > "$OUT/mpsd_events.jsonl"
    submit_rc=$?
    t1=$EPOCHREALTIME
    echo "{\"submit_rc\": $submit_rc, \"t0\": $t0, \"t1\": $t1}" > "$WORK/raw/v4_wall.json"
    cat "$WORK/raw/v4_wall.json"
    timeout 60 "${MPSCTL[@]}" device >> "$OUT/device.json"
    echo "device (after): $(tail -n1 "$OUT/device.json")"
    grep -v '"step"' "$OUT/mpsd_events.jsonl"
    if [[ $MODE == all ]]; then
      say "(4b) mpsd TrainJob, drop_last: true (static batch shape, as (5c))"
      { cat "$RUN_DIR/job.yaml"; echo "drop_last: true"; } > "$RUN_DIR/job_drop_last.yaml"
      timeout "$(tmo "$RUN_TIMEOUT_S")" "${MPSCTL[@]}" submit "$RUN_DIR/job_drop_last.yaml" \
        --follow | grep -v '"step"' > "$WORK/raw/v4b_events.jsonl"
      echo "exit $?"
      cat "$WORK/raw/v4b_events.jsonl"
    fi
    if [[ $MODE == all ]]; then
      say "ResNet-50 inference, mpsd BenchJob"
      printf '%s\n' "kind: BenchJob" "models: [resnet50]" "batch_sizes: [32, 64, 128]" \
        "devices: [$JOB_DEVICE]" "mode: inference" "precisions: [fp32, bf16]" \
        "memory_formats: [contiguous, channels_last]" "warmup_iters: 10" "iters: 50" \
        > "$RUN_DIR/bench.yaml"
      timeout "$(tmo 150)" "${MPSCTL[@]}" submit "$RUN_DIR/bench.yaml" --follow \
        > "$WORK/raw/bench_mpsd.jsonl"
      echo "bench exit $?, rows: $(grep -c bench_row "$WORK/raw/bench_mpsd.jsonl")"
    fi
    kill -TERM "$mpsd_pid"
    wait "$mpsd_pid"
    echo "mpsd exit $?"
  )
fi

# ---- results ----------------------------------------------------------------------------------
say "results"
"$PY" "$PERF/summarize.py" --raw "$WORK/raw" --out "$OUT" --env "$OUT/env.txt" \
  --events "$OUT/mpsd_events.jsonl" --device "$OUT/device.json" \
  --epochs "$EPOCHS" --batch-size "$BATCH" --lr "$LR"
