"""BYOL (Grill et al., NeurIPS 2020) as in FedHSSL (He et al.), Eq. 3, symmetrised as in the BYOL paper:

    L = ||p1/||p1|| - st(z~2)/||st(z~2)||||^2 + (the same with the views swapped)
      = (2 - 2 cos(p1, st(z~2))) + (2 - 2 cos(p2, st(z~1)))

averaged over the batch (so L lies in [0, 8]). p_i = h(f(v_i)) comes from the online encoder and its
predictor h, z~_i = f~(v_i) from the target encoder, a momentum copy of f updated with momentum 0.995
(FedHSSL's BYOL setting, BYOL_MOMENTUM; use moco.momentum_update).

The predictor is a model piece; `Predictor` is here (and SimSiam uses it too).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BYOL_MOMENTUM = 0.995


def normalized_mse(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Per-row 2 - 2 cos(p, st(z))."""
    return 2.0 - 2.0 * F.cosine_similarity(p, z.detach(), dim=1)


class BYOLLoss(nn.Module):
    def forward(self, p1: torch.Tensor, z2: torch.Tensor, p2: torch.Tensor, z1: torch.Tensor) -> torch.Tensor:
        return (normalized_mse(p1, z2) + normalized_mse(p2, z1)).mean()


class Predictor(nn.Module):
    """h: Linear(dim, hidden) -> BatchNorm -> ReLU -> Linear(hidden, dim), the BYOL/SimSiam predictor
    (FedHSSL: a 2-FC predictor). `batch_norm=False` drops the BatchNorm (batches of one row)."""

    def __init__(self, dim: int, hidden: int, batch_norm: bool = True) -> None:
        super().__init__()
        norm: nn.Module = nn.BatchNorm1d(hidden) if batch_norm else nn.Identity()
        self.net = nn.Sequential(nn.Linear(dim, hidden), norm, nn.ReLU(), nn.Linear(hidden, dim))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)
