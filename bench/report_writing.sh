#!/usr/bin/env bash
# bench/report_writing.sh — report writing's share of a `lav run` of 10,000 tiny cases.
#
#   bash bench/report_writing.sh [BUILD_DIR] [SEEDS]
#
# Writes a scenario of SEEDS (default 2500) seeds x 2 variants x 2 passes of a B1_T4_H1_K2_V2
# simple_gla case, runs lav on it with one thread and -v, which says how long the run spent
# writing its report (the file is brought up to date at most every 0.5 s), then replays the
# report through bench_report_writing, which puts it in place after every case: the cost the
# interval saves.
set -euo pipefail
build=${1:-build}
seeds=${2:-2500}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

{
    echo 'name = "bench_tiny"'
    echo 'description = "many tiny cases, to time the report writer"'
    echo 'family = "simple_gla"'
    echo 'passes = ["fwd", "bwd"]'
    echo '[shape]'
    echo 'B = 1'
    echo 'T = 4'
    echo 'H = 1'
    echo 'K = 2'
    echo 'V = 2'
    echo '[matrix]'
    echo "seed = [$(seq -s ', ' 1 "$seeds")]"
} >"$work/tiny.toml"

export OMP_WAIT_POLICY=PASSIVE
start=$(date +%s.%N)
status=0
"$build/src/lav" run "$work/tiny.toml" --out "$work/run.h5" --threads 1 -v >/dev/null \
    2>"$work/run.log" || status=$?
end=$(date +%s.%N)
[ "$status" -le 1 ] || { echo "lav run failed with exit code $status" >&2; exit 1; }
run_seconds=$(echo "$end - $start" | bc)

replay=$("$build/bench/bench_report_writing" "$work/run.h5" "$work/replay.h5")
writing=$(echo "$replay" | sed -n 's/.*writing \([0-9.]*\) s.*/\1/p')
echo "lav $(git -C "$(dirname "$0")" rev-parse --short HEAD), $(nproc) cores"
echo "lav run: $run_seconds s wall"
echo "replay:  $replay"
echo "in the run: $(grep '^report writing:' "$work/run.log")"
echo "after every case it would be: $(echo "scale=1; 100 * $writing / $run_seconds" | bc) % of the run"
