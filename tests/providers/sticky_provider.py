"""A Python provider for lav's gpu tests whose bf16 call breaks the CUDA context.

recurrent_simple_gla runs the tests' pure-PyTorch recurrence (on CPU copies, its results moved
back to the GPU); with bf16 inputs it first indexes past the end of a CUDA tensor, a device-side
assert after which the CUDA context runs no more work, as after a kernel that faults.
"""

import os
import sys

import torch

NAME = "sticky"
DEVICE = "cuda"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_provider as torchref  # noqa: E402  (the folder is not on the path before)


def recurrent_simple_gla(q, k, v, g=None, h0=None, *, scale, head_first, cu_seqlens, state_dtype):
    if q.dtype == torch.bfloat16:
        torch.zeros(1, device=q.device)[torch.tensor([3], device=q.device)].item()
    on_cpu = [None if t is None else t.cpu() for t in (q, k, v, g, h0)]
    o, ht = torchref.recurrent_simple_gla(*on_cpu, scale=scale, head_first=head_first,
                                          cu_seqlens=None if cu_seqlens is None else
                                          cu_seqlens.cpu(), state_dtype=state_dtype)
    return o.to(q.device), ht.to(q.device)
