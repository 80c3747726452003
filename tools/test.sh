#!/usr/bin/env bash
# tools/test.sh — set up (if needed), build everything, and run the cpu-labelled tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# LibTorch's OpenMP threads spin between parallel regions; on a busy machine that spinning took
# most of the run time, so they sleep instead
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
# ctest runs one test per core, so each test keeps to one thread rather than oversubscribing
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
bash tools/setup.sh
bash tools/build.sh
ctest --test-dir build -L cpu --output-on-failure -j "$(nproc)" "$@"
