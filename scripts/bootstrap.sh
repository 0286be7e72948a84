#!/usr/bin/env bash
# scripts/bootstrap.sh: installs what the build needs, once per machine, and skips everything that is
# already there (safe to run on every `make`). Debian packages through apt; LibTorch 2.11.0 from the
# PyPI torch wheel in a virtual environment OUTSIDE the clone ($ABLATE_VENV, default
# ~/.cache/ablate/torch-2.11.0) so every clone on the machine, CI's included, reuses it; the trace
# check's HTA venv the same way (scripts/hta-venv.sh).
# Prints the CMake prefix path of LibTorch on its last line.
set -euo pipefail

TORCH_VERSION=2.11.0
VENV=${ABLATE_VENV:-$HOME/.cache/ablate/torch-$TORCH_VERSION}
PACKAGES=(build-essential cmake ninja-build ccache pkg-config libsqlite3-dev sqlite3 libfmt-dev
          libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
          gnuplot-nox python3-venv libgloo-dev xz-utils libiberty-dev chromium)
# chromium: only the ctest site_browser (every page of `ablate site` in a headless browser) uses it.

log() { echo "bootstrap: $*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# One bootstrap of the venv at a time per machine (two clones building at once share it).
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  log "creating $VENV with torch==$TORCH_VERSION (a few minutes, once per machine)"
  PY=${ABLATE_PYTHON:-python3}
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" >&2
fi
# The trace check's venv (HolisticTraceAnalysis, perfetto), so the CTest check_trace_sample runs here.
bash "$(dirname "$0")/hta-venv.sh" >&2
"$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null
