"""Writes xtransformers_capture.pt, the capture xtransformers_capture.toml replays: bf16 q, k, v
through xtransformers_rotary.prologue (which turns q and k into fp32), saved by lav.capture at
the call of a stand-in for the attention kernel. Run from the repository root:

    PYTHONPATH=python .venv/bin/python scenarios/seeds/make_capture.py
"""

import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)

import xtransformers_rotary  # noqa: E402
from lav.capture import capture  # noqa: E402


@capture(os.path.join(here, "xtransformers_capture.pt"))
def attention(q, k, v, scale=None, head_first=False):
    """The kernel's place in the model; lav replays what reaches it."""
    return v


def main():
    torch.manual_seed(3)
    B, T, H, K = 1, 16, 2, 8
    q, k, v = (torch.randn(B, T, H, K).bfloat16() for _ in range(3))
    q, k = xtransformers_rotary.prologue(q, k, xtransformers_rotary.make_module(K))
    attention(q, k, v, scale=K**-0.5)


if __name__ == "__main__":
    main()
