"""Seed case 5 (README.md) as the model's own code: VAR-style attention scales its normalized q
and k per head by exp(scale_mul), an fp32 parameter, before the kernel. Written for lav after
the public report; var_python.toml runs it (head_last tensors, so the scale is [1, 1, H, 1])."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, H):
        super().__init__()
        # a learned log-scale per head, kept in fp32 by mixed precision
        self.scale_mul = nn.Parameter(torch.full((1, 1, H, 1), math.log(4.0)))


class Block(nn.Module):
    def __init__(self, H):
        super().__init__()
        self.attn = SelfAttention(H)


class Model(nn.Module):
    def __init__(self, H, layers):
        super().__init__()
        self.blocks = nn.ModuleList(Block(H) for _ in range(layers))


def make_module(H):
    return Model(H, layers=2)


def prologue(q, k, module):
    attn = module.blocks[1].attn
    scale = attn.scale_mul.exp()
    q = F.normalize(q, dim=-1) * scale
    k = F.normalize(k, dim=-1) * scale
    return q, k
