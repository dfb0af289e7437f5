"""SCARF's contrastive loss as VFLHLP writes it (Li et al., "Vertical Federated Learning Hybrid Local
Pre-training", Eq. 5-6), for a passive party's local pretraining:

    s_ij = z_i . z~_j / (|z_i| |z~_j|)
    L = 1/N sum_i -log( exp(s_ii / tau) / (1/N sum_j exp(s_ij / tau)) )

z = h(x) of the clean rows, z~ = h(x~) of their SCARF corruptions; each clean row's positive is its own
corruption and its negatives the other rows' corruptions (one direction, N candidates, no clean-clean
pairs: unlike NT-Xent's 2N - 1). The 1/N inside the log makes L = cross-entropy - log N.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class ScarfInfoNCELoss(nn.Module):
    def __init__(self, temperature: float = 1.0) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature

    def forward(self, z: torch.Tensor, z_corrupted: torch.Tensor) -> torch.Tensor:
        if z.shape != z_corrupted.shape or z.dim() != 2:
            raise ValueError(
                f"z and z_corrupted must both be [n, d], got {tuple(z.shape)} and {tuple(z_corrupted.shape)}"
            )
        similarity = F.normalize(z, dim=1) @ F.normalize(z_corrupted, dim=1).T
        targets = torch.arange(len(z), device=z.device)
        return F.cross_entropy(similarity / self.temperature, targets) - math.log(len(z))
