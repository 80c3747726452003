#!/usr/bin/env bash
# tools/baselines.sh — makes (or remakes) the committed nightly baseline of this build's backend
# and device class: runs scenarios/nightly as the CI examples do and writes the run as
# reports/baselines/nightly-<class>.h5 with lav gate --update-baseline.
#
#   tools/baselines.sh [--shards G [--per-gpu P]] [-- <more lav run arguments>]
#
# The class is cuda-<gpu> (cuda-h100, from nvidia-smi's name of GPU 0) where lav was built with
# CUDA and a GPU is visible, else cpu. With --shards G the run is G shards side by side, one per
# GPU (tools/shards.sh), merged; --per-gpu P runs P shards on each GPU. LAV names the lav binary
# (default build/src/lav). Rerun it after a change to scenarios/nightly, to the report's layout,
# or to which rows a CUDA build has (a variant that gains a CUDA row changes its record ids from
# .../cpu/... to .../cuda/...).
set -euo pipefail
cd "$(dirname "$0")/.."
lav="${LAV:-build/src/lav}"
shards=0 per_gpu=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --shards) shards="$2"; shift 2 ;;
        --per-gpu) per_gpu="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "tools/baselines.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
[[ "$per_gpu" == 1 || "$shards" -gt 0 ]] || {
    echo "tools/baselines.sh: --per-gpu needs --shards G (the GPUs to share out)" >&2; exit 2; }
run_args=(scenarios/nightly)
if "$lav" version | grep -q ', CUDA' && nvidia-smi -L >/dev/null 2>&1; then
    gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | grep -oE '[A-Z][0-9]+' | head -1)"
    class="cuda-$(echo "${gpu:-gpu}" | tr '[:upper:]' '[:lower:]')"
else
    class=cpu
fi
mkdir -p reports/out
run=reports/out/baseline-$class.h5
if [[ "$shards" -gt 0 ]]; then
    LAV="$lav" tools/shards.sh --gpus "$shards" --per-gpu "$per_gpu" --out "$run" -- "${run_args[@]}" "$@" || [ $? -eq 1 ]
else
    # exit 1 (a verification failed) is still a baseline: the gate compares with what was measured
    "$lav" run "${run_args[@]}" "$@" --out "$run" -q || [ $? -eq 1 ]
fi
"$lav" gate "$run" --baseline "reports/baselines/nightly-$class.h5" --update-baseline
