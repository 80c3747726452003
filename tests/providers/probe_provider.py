"""A Python provider for lav's tests that reports what it sees of lav's process.

versions() reports TRITON_CACHE_DIR as os.environ has it (lav run --triton-cache sets it before
the interpreter starts). recurrent_simple_gla multiplies the bf16 q by an fp32 tensor before
running torchref's recurrence: an op that promotes, for the dtype tracer to see.
chunk_simple_gla runs the same recurrence on a detached gate and hands back its final state
detached: its backward gives no dg and never reads dht, as FLA 0.6.0's chunk_hgrn (no dh0, no
dht); it refuses bf16 inputs after compiling, as a Triton kernel that asserts on its dtypes does. The first call of each function
"compiles" for 0.2 s, as a JIT does, and jit_seconds() counts it. unsupported() says what the
probe lacks, as FLA's provider does.
"""

import os
import sys
import time

import torch

NAME = "probe"
DEVICE = "cpu"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_provider as torchref  # noqa: E402  (the folder is not on the path before)


_compiled = set()
_jit = 0.0


def jit_seconds():
    return _jit


def _compile_once(name):
    global _jit
    if name not in _compiled:
        _compiled.add(name)
        start = time.perf_counter()
        time.sleep(0.2)
        _jit += time.perf_counter() - start


def unsupported(family, variant, options):
    return None if family == "simple_gla" else "the probe knows simple_gla only"


def versions():
    return {"torch": torch.__version__,
            "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR", "unset")}


def recurrent_simple_gla(q, k, v, g=None, h0=None, *, scale, head_first, cu_seqlens, state_dtype):
    _compile_once("recurrent")
    # bf16 q times fp32 ones: ATen promotes the product to fp32; cast back, o stays bf16
    q = (q * torch.ones(q.shape[-1], dtype=torch.float32)).to(q.dtype)
    return torchref.recurrent_simple_gla(q, k, v, g, h0, scale=scale, head_first=head_first,
                                         cu_seqlens=cu_seqlens, state_dtype=state_dtype)


def chunk_simple_gla(q, k, v, g=None, h0=None, *, scale, head_first, cu_seqlens, state_dtype):
    _compile_once("chunk")
    if q.dtype == torch.bfloat16:
        raise AssertionError("probe's chunk does not support bfloat16")
    g = None if g is None else g.detach()
    o, ht = torchref.recurrent_simple_gla(q, k, v, g, h0, scale=scale, head_first=head_first,
                                          cu_seqlens=cu_seqlens, state_dtype=state_dtype)
    return o, ht.detach()
