#!/usr/bin/env bash
# tools/setup.sh — installs what lav's build needs on Debian 12, once; safe to run again.
#   system: cmake, g++, HDF5, Boost.Program_options, GoogleTest, toml++, chromium (apt; the
#           HTML report's test loads the page in headless chromium)
#   .venv:  torch (LibTorch's headers and libraries, pinned), what `import torch` needs there
#           (Python providers run in an interpreter embedded in lav), h5py/pandas for report
#           readers, plotly for `lav report`, websocket-client and pillow for the HTML report's
#           test (it drives chromium and reads its screenshot)
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION="${LAV_TORCH_VERSION:-2.11.0}"
packages=(cmake g++ python3-venv python3-dev libhdf5-dev libboost-program-options-dev libgtest-dev
          libtomlplusplus-dev chromium)

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
# `import torch` loads LibTorch's CUDA half, which asks for three libraries the CUDA toolkit
# lacks (cuFile, cuSPARSELt, NVSHMEM; no GPU is needed to load them), and torch's pure-Python
# dependencies; the versions are the ones torch 2.11.0 pins
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    echo "setup: installing what import torch needs into .venv" >&2
    .venv/bin/pip install -q --no-deps "nvidia-cufile==1.15.1.6.*" "nvidia-cusparselt-cu13==0.8.0" \
        "nvidia-nvshmem-cu13==3.4.5"
    .venv/bin/pip install -q typing-extensions sympy networkx jinja2 fsspec filelock "setuptools<82"
fi
if ! .venv/bin/python -c "import h5py, pandas, plotly, websocket, PIL" 2>/dev/null; then
    echo "setup: installing h5py, pandas, plotly, websocket-client and pillow into .venv" >&2
    .venv/bin/pip install -q h5py pandas plotly websocket-client pillow
fi
