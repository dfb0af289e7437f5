"""NT-Xent (SimCLR, Chen et al. 2020), the LocalCL objective of SS-VFL (Castiglia et al.), Eq. 2:

    L_B = 1/B sum_(u, u+) -ln sim(h(u), h(u+)) / sum_(i in B minus {u}) sim(h(u), h(u_i)),
    sim(a, b) = exp(cos(a, b) / tau)

in its in-batch form: the batch holds the 2n views of n rows; each view's positive is the other view of
its row, and the denominator runs over the 2n - 1 other views (the positive and 2n - 2 negatives).
The loss is the mean over all 2n anchors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class NTXentLoss(nn.Module):
    def __init__(self, temperature: float = 0.5) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        if z1.shape != z2.shape or z1.dim() != 2:
            raise ValueError(f"z1 and z2 must both be [n, d], got {tuple(z1.shape)} and {tuple(z2.shape)}")
        n = z1.shape[0]
        z = F.normalize(torch.cat([z1, z2]), dim=1)
        logits = (z @ z.T / self.temperature).fill_diagonal_(float("-inf"))  # no self-pairs
        targets = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(z.device)
        return F.cross_entropy(logits, targets)
