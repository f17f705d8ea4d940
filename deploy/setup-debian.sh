#!/usr/bin/env bash
# Installs what building, testing and running mpsd need on Debian 12 (bookworm), and only what
# is missing. Needs root, or sudo.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libyaml-cpp-dev libsqlite3-dev sqlite3 libcli11-dev zlib1g-dev
  libtorch-dev libgloo-dev libgtest-dev libcpp-httplib-dev prometheus-cpp-dev libsystemd-dev help2man zsh
  libssl-dev openssl
  python3 python3-grpcio python3-protobuf python3-yaml python3-venv python3-pip python3-setuptools
  python3-prometheus-client
  libturbojpeg0-dev libpng-dev libssl-dev python3-pil python3-torch
  libopenblas0-pthread
  dataset-fashion-mnist
  libjs-dygraphs
  chromium chromium-driver python3-selenium
  clang-14 libclang-rt-14-dev llvm-14 util-linux
)

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
