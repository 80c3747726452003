"""Seed case 2 (README.md) as the model's own code: an RWKV-7 time-mix step in fp16 whose key
update `k.addcmul(k * (iclr - 1), k_a)` meets the fp32 parameter `k_a`. Written for lav after
the public report; rwkv7_python.toml runs it."""

import torch
from torch import nn


class TimeMix(nn.Module):
    def __init__(self, K):
        super().__init__()
        # RWKV-7 keeps its small per-channel parameters in fp32 under mixed precision
        self.k_a = nn.Parameter(0.5 * torch.randn(K))


class Block(nn.Module):
    def __init__(self, K):
        super().__init__()
        self.attn = TimeMix(K)


class Model(nn.Module):
    def __init__(self, K, layers):
        super().__init__()
        self.blocks = nn.ModuleList(Block(K) for _ in range(layers))


def make_module(K):
    return Model(K, layers=4)


def prologue(k, iclr, module):
    attn = module.blocks[3].attn
    # the in-context learning rate scales k per channel
    k = k.addcmul(k * (iclr - 1), attn.k_a)
    return {"k": k}
