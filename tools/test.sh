#!/usr/bin/env bash
# tools/test.sh — set up (if needed), build everything, and run the cpu-labelled tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh
ctest --test-dir build -L cpu --output-on-failure -j "$(nproc)" "$@"
