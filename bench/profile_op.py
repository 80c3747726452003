# bench/profile_op.py — one lav CUDA op at one shape, for a profiler to watch. Not a test.
"""Runs ``torch.ops.lav.<op>`` forward (``--pass fwd``) or forward and backward (``--pass fwdbwd``)
``--repeat`` times on inputs drawn as bench/cuda_ops.py draws them, so that a profiler can pick
one launch of one kernel, e.g.

    ncu -k regex:row_gate_forward --launch-skip 1 --launch-count 1 --section WarpStateStats \\
        python3 bench/profile_op.py chunk_simple_gla B1_T8192_H96_D128

With ``--kernels`` it times the calls itself instead: the GPU time of each kernel a call runs
(torch's profiler, CUDA activity), averaged over the calls after one untimed call.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_ops  # noqa: E402


def kernel_table(torch, run, calls: int) -> str:
    """Per-kernel GPU time of `run` in µs a call, largest first, and the call's total."""
    from torch.profiler import ProfilerActivity, profile

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    rows = [(e.self_device_time_total / calls, e.count / calls, e.key)
            for e in prof.key_averages() if e.self_device_time_total > 0]
    rows.sort(reverse=True)
    lines = [f"{us:10.1f} us  x{count:g}  {name[:100]}" for us, count, name in rows]
    lines.append(f"{sum(r[0] for r in rows):10.1f} us  a call, over {calls} calls")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("op", help="a lav op, e.g. chunk_delta_rule (`lav list` names its families)")
    p.add_argument("shape", help="e.g. B4_T2048_H16_D128")
    p.add_argument("--pass", dest="which", choices=["fwd", "fwdbwd"], default="fwd")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--kernels", action="store_true",
                   help="print each kernel's GPU time a call (torch's profiler) over --repeat calls")
    p.add_argument("--lib", default="build-gpu/kernels/liblav_ops.so")
    p.add_argument("--lav", default="build-gpu/src/lav", help="lav, whose list names the ops")
    args = p.parse_args()
    ops, _ = cuda_ops.list_ops(args.lav, "same")
    if args.op not in ops:
        sys.exit(f"error: {args.op} is not one of lav's CUDA ops here: {', '.join(sorted(ops))}")
    cuda_ops._import_torch()
    torch = cuda_ops.torch
    state = cuda_ops.load_lav(args.lib, "cuda")
    if not state["loaded"]:
        sys.exit(state["error"])
    spec = ops[args.op]
    shape = cuda_ops.parse_shapes(args.shape)[0]
    ins = cuda_ops.make_inputs(spec.family, shape, torch.bfloat16, "cuda")
    call = cuda_ops.lav_impl(spec, state).call
    grads = args.which == "fwdbwd"
    ts = [ins[n].detach().requires_grad_(grads) for n in cuda_ops.input_names(spec)]
    d_o = None

    def run():
        nonlocal d_o
        o = call(*ts)[0]
        if grads:
            d_o = torch.randn_like(o) if d_o is None else d_o
            o.backward(d_o)

    if args.kernels:
        print(f"{args.op} {args.shape} {args.which}, bf16")
        print(kernel_table(torch, run, args.repeat))
        return
    for _ in range(args.repeat):
        run()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
