#!/usr/bin/env bash
# bench/capture_load.sh — makes a capture of B1 T8192 H36 K=V=256 bf16 q, k, v with
# python/lav/capture.py in a temporary folder and times bench_capture_load on it.
#   bench/capture_load.sh [BUILD_DIR]     (default: build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
PYTHONPATH="$root/python" "$root/.venv/bin/python" - "$dir" <<'PY'
import sys, torch
from lav.capture import capture
@capture(sys.argv[1] + "/capture.pt")
def kernel(q, k, v, scale=None, head_first=False):
    return v
q, k, v = (torch.randn(1, 8192, 36, 256, dtype=torch.bfloat16) for _ in range(3))
kernel(q, k, v)
PY
cat >"$dir/replay.toml" <<'TOML'
name = "bench_capture_load"
description = "a B1 T8192 H36 K=V=256 bf16 capture replayed"
family = "simple_gla"
variants = ["chunk"]
[options]
gate = "none"
[inputs]
from = "capture.pt"
TOML
ls -la "$dir/capture.pt"
"$build/bench/bench_capture_load" "$dir/replay.toml"
