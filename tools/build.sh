#!/usr/bin/env bash
# tools/build.sh — configures (once) and builds lav into build/; extra args go to cmake --build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/CMakeCache.txt ]; then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j "$(nproc)" "$@"
