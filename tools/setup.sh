#!/usr/bin/env bash
# tools/setup.sh — installs what lav's build needs on Debian 12, once; safe to run again.
#   system: cmake, g++, HDF5, Boost.Program_options, GoogleTest, toml++ (apt)
#   .venv:  torch (LibTorch's headers and libraries, pinned) and h5py/pandas for report readers
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION="${LAV_TORCH_VERSION:-2.11.0}"
packages=(cmake g++ python3-venv libhdf5-dev libboost-program-options-dev libgtest-dev libtomlplusplus-dev)

missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv" >&2
    python3 -m venv .venv
fi
# only LibTorch's files are needed to build, so torch goes in without its CUDA runtime deps
if ! .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('torch').split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
    echo "setup: installing torch $TORCH_VERSION into .venv (about 530 MB, cached by pip)" >&2
    .venv/bin/pip install -q --no-deps "torch==$TORCH_VERSION"
fi
if ! .venv/bin/python -c "import h5py, pandas" 2>/dev/null; then
    echo "setup: installing h5py and pandas into .venv" >&2
    .venv/bin/pip install -q h5py pandas
fi
