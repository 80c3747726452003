"""A Python provider for lav's tests whose backwards are missing in part or whole.

recurrent_simple_gla runs the tests' pure-PyTorch recurrence and hands back its final state
detached, so autograd never sees dht: the fault of a kernel whose backward does not read the
cotangent of its final state (FLA 0.6.0's fused_recurrent_rwkv6 is one). chunk_simple_gla hands
back both outputs detached: a forward-only kernel (FLA 0.6.0's fused_recurrent_kda is one).
"""

import os
import sys

NAME = "nodht"
DEVICE = "cpu"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_provider as torchref  # noqa: E402  (the folder is not on the path before)


def recurrent_simple_gla(q, k, v, g=None, h0=None, *, scale, head_first, cu_seqlens, state_dtype):
    o, ht = torchref.recurrent_simple_gla(q, k, v, g, h0, scale=scale, head_first=head_first,
                                          cu_seqlens=cu_seqlens, state_dtype=state_dtype)
    return o, ht.detach()


def chunk_simple_gla(q, k, v, g=None, h0=None, *, scale, head_first, cu_seqlens, state_dtype):
    o, ht = torchref.recurrent_simple_gla(q, k, v, g, h0, scale=scale, head_first=head_first,
                                          cu_seqlens=cu_seqlens, state_dtype=state_dtype)
    return o.detach(), ht.detach()
