"""Self-supervised losses, one small module per method (lightly's loss style):

- NTXentLoss: SimCLR / SS-VFL's LocalCL objective (in-batch InfoNCE, Eq. 2 of SS-VFL).
- MoCoLoss (+ momentum_update): InfoNCE against a queue of momentum-encoder keys (FedHSSL Eq. 2).
- BYOLLoss (+ Predictor): symmetric 2 - 2 cos between predictions and stop-gradient targets (FedHSSL Eq. 3).
- SimSiamLoss: symmetric negative cosine with stop-gradient, no momentum encoder (FedHSSL Eq. 4).
- ScarfInfoNCELoss: VFLHLP's passive-party objective (SCARF, one-directional InfoNCE, Eq. 5-6).
- hybrid: FedHSSL's cross-party loss (Eq. 5) and cross-party-guided local loss (Eq. 6) over a method's
  pair loss L_SSL(p, z).

Projectors / predictors are model pieces: Predictor lives in byol.py and serves SimSiam too.
"""

from vflflare.ssl.losses.byol import BYOL_MOMENTUM, BYOLLoss, Predictor
from vflflare.ssl.losses.moco import MOCO_MOMENTUM, MoCoLoss, momentum_update, target_copy
from vflflare.ssl.losses.ntxent import NTXentLoss
from vflflare.ssl.losses.scarf import ScarfInfoNCELoss
from vflflare.ssl.losses.simsiam import SimSiamLoss

__all__ = [
    "BYOL_MOMENTUM",
    "BYOLLoss",
    "MOCO_MOMENTUM",
    "MoCoLoss",
    "NTXentLoss",
    "Predictor",
    "ScarfInfoNCELoss",
    "SimSiamLoss",
    "momentum_update",
    "target_copy",
]
