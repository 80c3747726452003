#!/usr/bin/env bash
# tools/shards.sh — lav run shards side by side on this host's GPUs, then lav merge.
#
#   tools/shards.sh --out run.h5 [--gpus G] [--per-gpu P] [--junit run.xml] [--resume] -- <lav run arguments>
#   e.g. tools/shards.sh --out run.h5 --junit run.xml -- scenarios/nightly
#        tools/shards.sh --out run.h5 --gpus 1 --per-gpu 2 -- scenarios/nightly
#        tools/shards.sh --out fla.h5 --per-gpu 15 -- scenarios/fla --provider lav.providers.fla \
#            --backend auto,fla --triton-cache /tmp/triton --shard-by dtypes
#
# N = G × P shards: shard K of N runs with CUDA_VISIBLE_DEVICES=(K-1) mod G and writes
# <out less .h5>.shard-K-of-N.h5 (its log beside it, .log); once all have ended, their reports are
# merged into <out>. G is the number of GPUs nvidia-smi lists unless --gpus says; P (default 1)
# shards share each GPU, which pays where a run waits on launches or on the CPU more than on the
# GPU (the nightly's fp64 references: two shards on one H100 took 0.45 of the whole run's time).
# Each shard gets --threads nproc/N unless the arguments give --threads. LAV names the lav binary
# (default: build/src/lav, else lav on PATH). --resume, with the same arguments as before, keeps
# the shards whose reports are complete, finishes those a deadline or a kill stopped (lav run
# --resume) and runs those with no report yet. Exits with the first failing shard's code (a
# verification failure, 1, still merges), else lav merge's.
set -euo pipefail
out="" gpus="" per_gpu=1 junit=() resume=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --gpus) gpus="$2"; shift 2 ;;
        --per-gpu) per_gpu="$2"; shift 2 ;;
        --junit) junit=(--junit "$2"); shift 2 ;;
        --resume) resume=1; shift ;;
        --) shift; break ;;
        *) echo "tools/shards.sh: unknown option '$1' (put lav run's arguments after --)" >&2; exit 2 ;;
    esac
done
[[ -n "$out" && $# -gt 0 ]] || { sed -n '3,5p' "$0" >&2; exit 2; }
for n in "$per_gpu" ${gpus:+"$gpus"}; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "tools/shards.sh: --gpus and --per-gpu take a whole number ≥ 1, got '$n'" >&2; exit 2; }
done
lav="${LAV:-}"
if [[ -z "$lav" ]]; then
    lav="$(cd "$(dirname "$0")/.." && pwd)/build/src/lav"
    [[ -x "$lav" ]] || lav=lav
fi
if [[ -z "$gpus" ]]; then
    gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
    [[ "$gpus" -ge 1 ]] || { echo "tools/shards.sh: nvidia-smi lists no GPU; give --gpus N" >&2; exit 3; }
fi
n=$((gpus * per_gpu))
# the shards share the host's cores: each takes its part unless the arguments say --threads
threads=()
[[ " $* " == *" --threads"* ]] || threads=(--threads $(($(nproc) / n > 0 ? $(nproc) / n : 1)))
pids=() shards=()
for ((k = 1; k <= n; k++)); do
    shard="${out%.h5}.shard-$k-of-$n.h5"
    shards+=("$shard")
    where=(--out "$shard")
    if [[ $resume -eq 1 && -f "$shard" ]]; then
        shown="$("$lav" show "$shard" --format json 2>/dev/null || true)"
        if [[ "$shown" == *'"complete": true'* ]]; then
            # a kept shard's code is what its run exited with: 1 where a record failed or errored
            kept=0
            [[ "$shown" == *'"fail": 0, "error": 0}'* ]] || kept=1
            pids+=("kept $kept")
            continue
        fi
        where=(--resume "$shard")
    fi
    CUDA_VISIBLE_DEVICES=$(((k - 1) % gpus)) "$lav" run "$@" "${threads[@]}" --shard "$k/$n" \
        "${where[@]}" -q \
        >>"$shard.log" 2>&1 &
    pids+=($!)
done
status=0
for ((k = 1; k <= n; k++)); do
    code=0
    if [[ "${pids[$((k - 1))]}" == kept* ]]; then
        code="${pids[$((k - 1))]#kept }"
        echo "shard $k/$n: complete, kept (exit $code)"
    else
        wait "${pids[$((k - 1))]}" || code=$?
        echo "shard $k/$n: exit $code, $(tail -n 1 "${shards[$((k - 1))]}.log")"
    fi
    # 1 is a verification failure: the shard's report is complete and still merges
    if [[ $code -ne 0 && $status -eq 0 ]]; then status=$code; fi
done
[[ $status -le 1 ]] || exit "$status"
"$lav" merge "${shards[@]}" --out "$out" "${junit[@]}"
exit "$status"
