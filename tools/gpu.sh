#!/usr/bin/env bash
# tools/gpu.sh — on the CUDA machine: configure with CUDA, build, run the gpu tests (--tests REGEX:
# those whose names match, as ctest -R); with --sanitize also under compute-sanitizer (memcheck,
# racecheck, synccheck); with --scenarios DIR... also `lav run`.
# Logs and reports go to build-gpu/last/, and are copied to $OUT when set. Needs .devdeps/
# (tools/devdeps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
out=build-gpu/last
rm -rf "$out" && mkdir -p "$out"
trap '[ -n "${OUT:-}" ] && cp -r "$out"/. "$OUT"/' EXIT
sanitize=0
tests=""
scenarios=()
while [ $# -gt 0 ]; do
    case "$1" in
        --sanitize) sanitize=1 ;;
        --tests) shift; tests="${1:?gpu.sh: --tests needs a regular expression}" ;;
        --scenarios) shift; while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do scenarios+=("$1"); shift; done; continue ;;
        *) echo "gpu.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
export OMP_WAIT_POLICY=PASSIVE
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
# LAV_COMMIT names lav's commit where this folder is a copy without its git history
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DLAV_ENABLE_CUDA=ON \
    -DLAV_COMMIT="${LAV_COMMIT:-}" \
    -DCMAKE_PREFIX_PATH="$prefix" -DTorch_DIR="$prefix/Torch" >"$out/configure.log" 2>&1 \
    || { tail -30 "$out/configure.log"; exit 1; }
grep "lav:" "$out/configure.log"
# keep going past a failing target, so the tests of the targets that built still run
keep_going=()
[ ${#generator[@]} -gt 0 ] && keep_going=(-- -k 0)
cmake --build build-gpu -j "$(nproc)" ${LAV_GPU_TARGETS:+--target $LAV_GPU_TARGETS} \
    "${keep_going[@]}" >"$out/build.log" 2>&1 || grep -E "error" -A3 "$out/build.log" | head -60
ctest --test-dir build-gpu -L gpu ${tests:+-R "$tests"} -j 8 --output-on-failure --output-junit "$PWD/$out/gpu-tests.xml" \
    >"$out/gpu-tests.log" 2>&1
status=$?
tail -5 "$out/gpu-tests.log"
if [ "$sanitize" = 1 ]; then
    # memcheck over the whole CUDA suites, a gtest shard per core side by side (the suites' CPU
    # rows dominate); racecheck and synccheck (slow) over a small matrix: bf16 inputs with fp32
    # states of every row, both layouts, varlen included, but not the K = V = 256 cases (about
    # 47 s each under racecheck on an H100) nor the delta rule chunk rows' one head over 1000
    # positions (over 150 s each on an H200)
    small='*bf16_state_fp32*-*K256_V256*:*delta_rule_chunk*_H1_*'
    sanitize_one() {  # tool, test binary, filter, log; prints the verdict line
        local pids=() code=0 i n shards="${LAV_SANITIZE_SHARDS:-$(nproc)}"
        # eight tests a shard at least: a shard whose tests make no CUDA call exits before the
        # first one, which compute-sanitizer reports as a failure (test_cuda_chunk's four tests
        # in four shards: RowGateForward.RefusesWhatItDoesNotCompute refuses before any launch)
        n=$("$2" --gtest_list_tests --gtest_filter="$3" | grep -c '^  ')
        [ "$n" = 0 ] && { echo "compute-sanitizer $1 $(basename "$2") ($3): no test matches"; return; }
        [ $(((n + 7) / 8)) -lt "$shards" ] && shards=$(((n + 7) / 8))
        # one CPU thread a shard: the shards fill the cores already, and the CPU rows' thread
        # pools fighting over them made each delta chunk case take ~80 s under memcheck, not ~11 s
        for ((i = 0; i < shards; i++)); do
            OMP_NUM_THREADS=1 GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${LAV_SANITIZE_TIMEOUT:-400}" \
                compute-sanitizer --tool "$1" --error-exitcode 3 "$2" --gtest_filter="$3" \
                >"$4.$i" 2>&1 &
            pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p" || code=$?; done
        cat "$4".* >"$4" && rm -f "$4".*
        echo "compute-sanitizer $1 $(basename "$2") ($3, $shards shards): exit $code;" \
            "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|tests? ran' "$4" | sort | uniq -c | tr '\n' ' ')"
    }
    for t in build-gpu/tests/families/test_families_cuda build-gpu/tests/cuda/test_cuda_chunk \
             build-gpu/tests/cuda/test_cuda_trace; do
        [ -x "$t" ] || continue
        for tool in memcheck racecheck synccheck; do
            filter="${LAV_SANITIZE_FILTER:-*}"
            [ "$tool" != memcheck ] && filter="${LAV_SANITIZE_SMALL:-$small}"
            sanitize_one "$tool" "$t" "$filter" "$out/sanitize-$tool-$(basename "$t").log"
        done
    done
fi
if [ ${#scenarios[@]} -gt 0 ]; then
    build-gpu/src/lav run "${scenarios[@]}" --out "$out/gpu.h5" >"$out/lav-run.log" 2>&1
    echo "lav run: exit $?"
    tail -15 "$out/lav-run.log"
fi
exit $status
