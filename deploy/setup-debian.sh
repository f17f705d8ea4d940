#!/usr/bin/env bash
# Installs what mpsd needs on Debian 12 (bookworm), and only what is missing. Needs root, or sudo.
#   deploy/setup-debian.sh          building mpsd, mpsd-executor and mpsctl, and running the main
#                                   job (deploy/quickstart.sh)
#   deploy/setup-debian.sh --tests  that, and what only the test suite, the sanitizer and fuzzing
#                                   builds and the .deb test need (deploy/test.sh, so CI)
# docs/development.md ("Dependencies") says what each package is for.
set -euo pipefail

usage() { echo "usage: $0 [--tests]" >&2; exit 64; }
with_tests=0
for arg in "$@"; do
  case "$arg" in
    --tests) with_tests=1 ;;
    *) usage ;;
  esac
done

# Building and running: the toolchain, the libraries mpsd, mpsd-executor and mpsctl link, the
# dashboard's chart library (embedded into mpsd), a fast BLAS for CPU training, and the data the
# main job trains on.
packages=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libyaml-cpp-dev libsqlite3-dev libcli11-dev zlib1g-dev
  libtorch-dev libgloo-dev libcpp-httplib-dev prometheus-cpp-dev libsystemd-dev libssl-dev
  libturbojpeg0-dev libpng-dev libcrcutil-dev libarchive-dev
  libopenblas0-pthread
  libjs-dygraphs
  dataset-fashion-mnist
)
# Only for the tests (deploy/test.sh): GoogleTest; the command-line tools the tests run (sqlite3
# salvage, openssl certificates, zsh completion, prlimit, help2man's man pages in the .deb);
# Python with the client's libraries, venv and pip (the Python client tests), prometheus-client
# (parses /metrics), crcmod (checks TensorBoard files' CRC-32C), Pillow, PyTorch and torchvision
# (write image folders and tensors files, load trained models as a Python user would); the
# dashboard's
# browser test (chromium, its driver, selenium); clang-14 with its sanitizer runtimes and
# symbolizer (deploy/test-sanitizers.sh); clang-format-14 (deploy/check-format.sh); Go with gRPC (protobuf 1.5: the 1.3 that gRPC's package
# pulls in panics at the first call) and its protoc plugins, and Node.js with npm, for the other
# languages' client examples (tests/client/other_languages_test.py).
test_packages=(
  libgtest-dev
  sqlite3 openssl zsh util-linux help2man
  python3 python3-grpcio python3-protobuf python3-yaml python3-venv python3-pip python3-setuptools
  python3-prometheus-client python3-pil python3-torch python3-torchvision python3-crcmod
  chromium chromium-driver python3-selenium
  clang-14 libclang-rt-14-dev llvm-14 clang-format-14
  golang-go golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev protoc-gen-go
  protoc-gen-go-grpc
)
if [ "$with_tests" = 1 ]; then
  packages+=("${test_packages[@]}")
  # A Node.js that came with its own npm (e.g. NodeSource's) is used as it is.
  command -v node >/dev/null || packages+=(nodejs)
  command -v npm >/dev/null || packages+=(npm)
fi

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup-debian: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
