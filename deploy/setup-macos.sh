#!/usr/bin/env bash
# macOS (Apple silicon): what building, testing and running mpsd need, from Homebrew, plus
# PyTorch's LibTorch for arm64 (built with MPS) from PyTorch's wheel in a venv; then prints the
# build line. Only what is missing is installed.
#   deploy/setup-macos.sh            # the libraries and LibTorch
#   deploy/setup-macos.sh --agent    # also: install and load the LaunchAgent for an mpsd
#                                    # installed by Homebrew (deploy/com.mpsd.daemon.plist)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(uname)" = Darwin ] || { echo "setup-macos: this is for macOS" >&2; exit 1; }
command -v brew >/dev/null || { echo "setup-macos: needs Homebrew (https://brew.sh)" >&2; exit 1; }

formulae=(cmake pkg-config grpc protobuf abseil spdlog yaml-cpp sqlite cli11 googletest help2man)
missing=()
for formula in "${formulae[@]}"; do
  brew list --formula "$formula" >/dev/null 2>&1 || missing+=("$formula")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-macos: brew install ${missing[*]}"
  brew install "${missing[@]}"
fi

# LibTorch 2.x with MPS: the torch wheel carries its headers, libraries and CMake package.
venv="${MPSD_TORCH_VENV:-$HOME/.venvs/torch}"
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "setup-macos: PyTorch into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --upgrade pip torch
fi
"$venv/bin/python" - <<'PY'
import torch
print("setup-macos: torch %s, MPS built: %s, available: %s"
      % (torch.__version__, torch.backends.mps.is_built(), torch.backends.mps.is_available()))
PY
torch_cmake="$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
echo "setup-macos: build with"
echo "  deploy/build.sh -DCMAKE_PREFIX_PATH=\"$(brew --prefix);$torch_cmake\""

if [ "${1:-}" = --agent ]; then
  prefix="$(brew --prefix)"
  [ -x "$prefix/bin/mpsd" ] || { echo "setup-macos: no $prefix/bin/mpsd: brew install mpsd first" >&2; exit 1; }
  agent="$HOME/Library/LaunchAgents/com.mpsd.daemon.plist"
  mkdir -p "$HOME/Library/LaunchAgents" "$HOME/Library/Logs/mpsd" "$HOME/Library/Application Support/mpsd"
  # launchd does not expand ~; an Intel Mac's Homebrew lives in /usr/local.
  sed -e "s|~/|$HOME/|g" -e "s|/opt/homebrew/|$prefix/|g" deploy/com.mpsd.daemon.plist >"$agent"
  plutil -lint "$agent"
  launchctl bootout "gui/$(id -u)" "$agent" 2>/dev/null || true
  launchctl bootstrap "gui/$(id -u)" "$agent"
  echo "setup-macos: loaded $agent; logs in ~/Library/Logs/mpsd/mpsd.log; try: mpsctl device"
fi
