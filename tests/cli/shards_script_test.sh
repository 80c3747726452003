#!/usr/bin/env bash
# tests/cli/shards_script_test.sh LAV — tools/shards.sh on a CPU build: 2 shards sharing one
# "GPU" (--gpus 1 --per-gpu 2) merge into the report the whole run writes, also when --resume
# runs one of them again; bad counts exit 2.
set -uo pipefail
lav="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cat >"$dir/hgrn.toml" <<'TOML'
name = "shards_script_hgrn"
description = "six small cases to deal out"
family = "hgrn"
[shape]
B = 2
T = 64
H = 1
K = 8
V = 8
[matrix]
seed = [1, 2, 3, 4, 5, 6]
TOML
# the whole run with the threads tools/shards.sh gives each of its two shards, so that every sum
# is taken in the same order
threads=$(($(nproc) / 2 > 0 ? $(nproc) / 2 : 1))
"$lav" run "$dir/hgrn.toml" -q --threads $threads --out "$dir/whole.h5" >/dev/null || fail "the whole run"
LAV="$lav" "$root/tools/shards.sh" --gpus 1 --per-gpu 2 --out "$dir/run.h5" -- "$dir/hgrn.toml" \
    >"$dir/shards.out" 2>&1 || { cat "$dir/shards.out"; fail "tools/shards.sh exited $?"; }
grep -q "shard 2/2: exit 0" "$dir/shards.out" || { cat "$dir/shards.out"; fail "no second shard"; }
[[ -f "$dir/run.shard-1-of-2.h5" && -f "$dir/run.shard-2-of-2.h5.log" ]] || fail "shard files"
"$lav" show "$dir/run.shard-1-of-2.h5" >"$dir/show.txt" 2>&1
grep -q -- "--threads $threads --shard" "$dir/show.txt" ||
    fail "a shard did not get --threads $threads"
"$lav" diff "$dir/whole.h5" "$dir/run.h5" >"$dir/diff.txt" 2>&1
grep -q "^no differences" "$dir/diff.txt" || { cat "$dir/diff.txt"; fail "merge differs from the whole run"; }
# --resume keeps a complete shard and runs again the one whose report is gone
rm "$dir/run.shard-2-of-2.h5" "$dir/run.h5"
LAV="$lav" "$root/tools/shards.sh" --gpus 1 --per-gpu 2 --resume --out "$dir/run.h5" -- "$dir/hgrn.toml" \
    >"$dir/resume.out" 2>&1 || { cat "$dir/resume.out"; fail "tools/shards.sh --resume exited $?"; }
grep -q "shard 1/2: complete, kept (exit 0)" "$dir/resume.out" || { cat "$dir/resume.out"; fail "shard 1 not kept"; }
grep -q "shard 2/2: exit 0" "$dir/resume.out" || { cat "$dir/resume.out"; fail "shard 2 not run again"; }
"$lav" diff "$dir/whole.h5" "$dir/run.h5" >"$dir/diff.txt" 2>&1
grep -q "^no differences" "$dir/diff.txt" || { cat "$dir/diff.txt"; fail "resumed merge differs from the whole run"; }
for bad in "--per-gpu 0" "--gpus x"; do
    LAV="$lav" "$root/tools/shards.sh" $bad --out "$dir/bad.h5" -- "$dir/hgrn.toml" >/dev/null 2>&1
    code=$?
    [[ $code -eq 2 ]] || fail "$bad exited $code, not 2"
done
echo "ok"
