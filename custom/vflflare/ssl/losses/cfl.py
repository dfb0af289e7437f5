"""CFL's silo objective (Ginanjar et al., paper 003, Eq. 1-3), L_t = L_r + L_c + L_d on the decoded
views x'^a = D(E(x^a)), x'^b = D(E(x^b)) of a tuple pair:

- L_r, reconstruction: mean squared error of each decoded view against the clean row x. The paper writes
  MSE(x'^a, x'^b), which a constant decoder minimises; we reconstruct x, as SubTab (the code base the
  paper says it builds on) does.
- L_c, contrastive: the paper's dot product x'^a . x'^b, taken as the similarity of an in-batch NT-Xent
  (a bare dot product is unbounded below); temperature `temperature`.
- L_d, distance: mean Euclidean distance |x'^a - x'^b|_2 per row (the paper's C(.)).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vflflare.ssl.losses.ntxent import NTXentLoss


class CFLLoss(nn.Module):
    def __init__(self, temperature: float = 0.5) -> None:
        super().__init__()
        self.contrastive = NTXentLoss(temperature)

    def parts(self, decoded_a: torch.Tensor, decoded_b: torch.Tensor, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "reconstruction": 0.5 * (F.mse_loss(decoded_a, x) + F.mse_loss(decoded_b, x)),
            "contrastive": self.contrastive(decoded_a, decoded_b),
            "distance": (decoded_a - decoded_b).norm(dim=1).mean(),
        }

    def forward(self, decoded_a: torch.Tensor, decoded_b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return sum(self.parts(decoded_a, decoded_b, x).values())
