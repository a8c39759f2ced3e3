"""A tiny model with each kind of operator the suite tunes, and some it cannot: a convolution stem
(two square convolutions and a depthwise one between them), then an attention block over the 8x8
feature map (four linears, the scores and the weighted sum as batched matmuls, softmax, layer norm)
and a linear head.  Small enough that each of its tasks builds in seconds on the CPU.

    python -m experiments.model tasks experiments/model/examples/tiny.py:build --target llvm
"""
from __future__ import annotations

import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self, dim: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.depthwise = nn.Conv2d(16, 16, 3, padding=1, groups=16)  # grouped: not tunable
        self.down = nn.Conv2d(16, dim, 3, stride=2, padding=1)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.down(torch.relu(self.depthwise(torch.relu(self.stem(x))))))
        t = x.flatten(2).transpose(1, 2).contiguous()  # (batch, tokens, dim)
        q, k, v = self.q(t), self.k(t), self.v(t)
        scores = torch.softmax(q @ k.transpose(1, 2) / t.shape[-1] ** 0.5, dim=-1)  # bmm, B stored transposed
        t = self.norm(t + self.o(scores @ v))  # bmm, both untransposed
        return self.head(t.mean(dim=1))


def build(batch: int = 2) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model with fixed random weights and a batch of 16x16 RGB images."""
    gen = torch.Generator().manual_seed(0)
    model = Tiny()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    return model.eval(), (torch.randn(batch, 3, 16, 16, generator=gen),)
