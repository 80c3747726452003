"""A Python provider for lav's tests: simple_gla's recurrence in plain PyTorch, on the CPU.

recurrent_simple_gla is right; chunk_simple_gla raises, as a kernel that cannot take its inputs
would, so that the test sees the error record with the traceback.
"""

import torch

NAME = "torchref"
DEVICE = "cpu"


def versions():
    return {"torch": torch.__version__}


def unsupported(family, variant, options):
    if options.get("gate") == "g_gamma":
        return "torchref takes no constant decay (gate = g_gamma)"
    return None


def recurrent_simple_gla(q, k, v, g=None, h0=None, *, scale, head_first, cu_seqlens, state_dtype):
    out_dtype = q.dtype
    if head_first:
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        g = None if g is None else g.transpose(1, 2)
    B, T, H, K = q.shape
    V = v.shape[-1]
    q, k, v = (x.to(state_dtype) for x in (q, k, v))
    g = torch.zeros(B, T, H, dtype=state_dtype) if g is None else g.to(state_dtype)
    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        cu = cu_seqlens.tolist()
        spans = [(0, s, e) for s, e in zip(cu[:-1], cu[1:])]
    o = [[None] * T for _ in range(B)]
    finals = []
    for n, (b, s, e) in enumerate(spans):
        S = torch.zeros(H, K, V, dtype=state_dtype) if h0 is None else h0[n].to(state_dtype)
        for t in range(s, e):
            S = S * g[b, t].exp()[:, None, None] + k[b, t][:, :, None] * v[b, t][:, None, :]
            o[b][t] = (S * q[b, t][:, :, None]).sum(1) * scale
        finals.append(S)
    o = torch.stack([torch.stack(row) for row in o]).to(out_dtype)
    return (o.transpose(1, 2) if head_first else o), torch.stack(finals)


def chunk_simple_gla(q, k, v, **settings):
    raise ValueError("torchref has no chunked form")
