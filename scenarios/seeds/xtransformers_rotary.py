"""Seed case 3 (README.md) as the model's own code: x-transformers-style rotary embeddings whose
frequencies are fp32 (an fp32 buffer, autocast disabled around them) turn bf16 q and k into fp32
while v stays bf16. Written for lav after the public report; xtransformers_python.toml runs it."""

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, positions):
        freqs = torch.outer(positions.float(), self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)


class Attention(nn.Module):
    def __init__(self, K):
        super().__init__()
        self.rotary = RotaryEmbedding(K)


def make_module(K):
    return Attention(K)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(t, freqs):
    return t * freqs.cos() + rotate_half(t) * freqs.sin()


def prologue(q, k, module):
    with torch.autocast(q.device.type, enabled=False):
        freqs = module.rotary(torch.arange(q.shape[1], device=q.device))[:, None, :]
        return apply_rotary(q, freqs), apply_rotary(k, freqs)
