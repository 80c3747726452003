#!/usr/bin/env bash
# tools/shards.sh — one lav run shard per GPU of this host, side by side, then lav merge.
#
#   tools/shards.sh --out run.h5 [--gpus N] [--junit run.xml] -- <lav run arguments>
#   e.g. tools/shards.sh --out run.h5 --junit run.xml -- scenarios/nightly
#
# Shard K of N runs with CUDA_VISIBLE_DEVICES=K-1 and writes <out less .h5>.shard-K-of-N.h5 (its log
# beside it, .log); once all have ended, their reports are merged into <out>. N is the number
# of GPUs nvidia-smi lists unless --gpus says; LAV names the lav binary (default: build/src/lav,
# else lav on PATH). Exits with the first failing shard's code (a verification failure, 1, still
# merges), else lav merge's.
set -euo pipefail
out="" gpus="" junit=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --gpus) gpus="$2"; shift 2 ;;
        --junit) junit=(--junit "$2"); shift 2 ;;
        --) shift; break ;;
        *) echo "tools/shards.sh: unknown option '$1' (put lav run's arguments after --)" >&2; exit 2 ;;
    esac
done
[[ -n "$out" && $# -gt 0 ]] || { sed -n '4,5p' "$0" >&2; exit 2; }
lav="${LAV:-}"
if [[ -z "$lav" ]]; then
    lav="$(cd "$(dirname "$0")/.." && pwd)/build/src/lav"
    [[ -x "$lav" ]] || lav=lav
fi
if [[ -z "$gpus" ]]; then
    gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
    [[ "$gpus" -ge 1 ]] || { echo "tools/shards.sh: nvidia-smi lists no GPU; give --gpus N" >&2; exit 3; }
fi
pids=() shards=()
for ((k = 1; k <= gpus; k++)); do
    shard="${out%.h5}.shard-$k-of-$gpus.h5"
    shards+=("$shard")
    CUDA_VISIBLE_DEVICES=$((k - 1)) "$lav" run "$@" --shard "$k/$gpus" --out "$shard" -q \
        >"$shard.log" 2>&1 &
    pids+=($!)
done
status=0
for ((k = 1; k <= gpus; k++)); do
    code=0
    wait "${pids[$((k - 1))]}" || code=$?
    echo "shard $k/$gpus: exit $code, $(tail -n 1 "${shards[$((k - 1))]}.log")"
    # 1 is a verification failure: the shard's report is complete and still merges
    if [[ $code -ne 0 && $status -eq 0 ]]; then status=$code; fi
done
[[ $status -le 1 ]] || exit "$status"
"$lav" merge "${shards[@]}" --out "$out" "${junit[@]}"
exit "$status"
