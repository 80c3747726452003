# bench/profile_op.py — one lav CUDA op at one shape, for a profiler to watch. Not a test.
"""Runs ``torch.ops.lav.<op>`` forward (``--pass fwd``) or forward and backward (``--pass fwdbwd``)
``--repeat`` times on inputs drawn as bench/cuda_ops.py draws them, so that a profiler can pick
one launch of one kernel, e.g.

    ncu -k regex:row_gate_forward --launch-skip 1 --launch-count 1 --section WarpStateStats \\
        python3 bench/profile_op.py chunk_simple_gla B1_T8192_H96_D128
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_ops  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("op", choices=sorted(cuda_ops.OPS))
    p.add_argument("shape", help="e.g. B4_T2048_H16_D128")
    p.add_argument("--pass", dest="which", choices=["fwd", "fwdbwd"], default="fwd")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--lib", default="build-gpu/kernels/liblav_ops.so")
    args = p.parse_args()
    cuda_ops._import_torch()
    torch = cuda_ops.torch
    state = cuda_ops.load_lav(args.lib, "cuda")
    if not state["loaded"]:
        sys.exit(state["error"])
    spec = cuda_ops.OPS[args.op]
    shape = cuda_ops.parse_shapes(args.shape)[0]
    ins = cuda_ops.make_inputs(spec.family, shape, torch.bfloat16, "cuda")
    names = cuda_ops.input_names(spec.family)
    fn = getattr(torch.ops.lav, spec.name)
    for _ in range(args.repeat):
        ts = [ins[n].detach().requires_grad_(args.which == "fwdbwd") for n in names]
        out = fn(*ts)
        if args.which == "fwdbwd":
            o = out[0] if isinstance(out, (tuple, list)) else out
            o.backward(torch.ones_like(o))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
