#!/usr/bin/env bash
# tools/build.sh — configures (once) and builds lav into build/; extra args go to cmake --build.
# This is the CPU build (tools/gpu.sh makes the CUDA one on a GPU machine): CUDA stays off even
# where nvcc and LibTorch's CUDA libraries would allow it, unless LAV_ENABLE_CUDA says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/CMakeCache.txt ]; then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLAV_ENABLE_CUDA="${LAV_ENABLE_CUDA:-OFF}"
fi
cmake --build build -j "$(nproc)" "$@"
