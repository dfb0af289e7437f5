"""The SSL methods FedHSSL runs with, as Table II of the paper (He et al.) tells them apart: the target
encoder (the online one for SimSiam, an EMA copy for BYOL and MoCo), the predictor (an MLP, or the
identity for MoCo) and the pair loss L_SSL(p, z). Projector widths are Appendix B's."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vflflare.ssl.losses.byol import BYOL_MOMENTUM, normalized_mse
from vflflare.ssl.losses.hybrid import PairLoss, negative_cosine
from vflflare.ssl.losses.moco import MOCO_MOMENTUM, MoCoLoss


@dataclass(frozen=True)
class SSLMethod:
    name: str
    target_momentum: float | None  # None: the target encoder is the online encoder itself
    mlp_predictor: bool  # False: identity predictor (p = z)
    projector: tuple[int, ...]
    contrastive: bool = False  # a queue of negatives (MoCo)


SSL_METHODS = {
    "simsiam": SSLMethod("simsiam", None, True, (512, 512, 512)),
    "byol": SSLMethod("byol", BYOL_MOMENTUM, True, (512, 512, 512)),
    "moco": SSLMethod("moco", MOCO_MOMENTUM, False, (512, 512, 128), contrastive=True),
}


def byol_pair_loss(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return normalized_mse(p, z).mean()


def make_pair_loss(method: SSLMethod, dim: int, temperature: float, queue_size: int, seed: int) -> PairLoss:
    """L_SSL(p, z) of `method` on `dim`-wide outputs. MoCo's is a MoCoLoss holding its own queue of keys:
    call its `enqueue(z)` after the optimiser step."""
    if method.contrastive:
        return MoCoLoss(temperature=temperature, queue_size=queue_size, dim=dim, seed=seed)
    return negative_cosine if method.name == "simsiam" else byol_pair_loss
