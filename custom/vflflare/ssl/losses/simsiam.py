"""SimSiam (Chen & He, CVPR 2021) as in FedHSSL (He et al.), Eq. 4, symmetrised as in the SimSiam paper:

    L = 1/2 D(p1, st(z2)) + 1/2 D(p2, st(z1)),   D(p, z) = -cos(p, z)

averaged over the batch (L lies in [-1, 1]). One encoder f for both views (no momentum copy),
p_i = h(z_i) with a predictor h (byol.Predictor); the stop-gradient on z is what prevents collapse.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SimSiamLoss(nn.Module):
    def forward(self, p1: torch.Tensor, z2: torch.Tensor, p2: torch.Tensor, z1: torch.Tensor) -> torch.Tensor:
        return -0.5 * (F.cosine_similarity(p1, z2.detach(), dim=1) + F.cosine_similarity(p2, z1.detach(), dim=1)).mean()
