#!/usr/bin/env bash
# tools/smoke.sh — the main job: set up (if needed), build, run the smoke scenarios, print the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
# LibTorch's OpenMP threads spin between parallel regions; on a busy machine that spinning took
# most of the run time, so they sleep instead
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
bash tools/setup.sh
bash tools/build.sh --target lav
exec build/src/lav run scenarios/smoke --out reports/out/smoke.h5 "$@"
