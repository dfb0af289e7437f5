"""FedHSSL's two pretraining objectives (He et al., "A Hybrid Self-Supervised Learning Framework for
Vertical Federated Learning", Algorithm 1), written over the pair loss L_SSL(p, z) of the SSL method in
use (Table II: SimSiam's negative cosine, BYOL's normalised MSE, MoCo's InfoNCE with an identity
predictor). A pair loss takes an online prediction p and a target z and never lets a gradient into z.

Eq. 5, cross-party SSL on the aligned rows, party i:
    L_cross^i = 1/(K-1) sum_{j=2..K} L_SSL(p_c^1, z_c^j)   for the active party (i = 1),
    L_cross^i = L_SSL(p_c^i, z_c^1)                        for a passive party,
i.e. the mean over the z_c a party received; no gradient crosses a party (the stop-gradient).

Eq. 6, cross-party-guided local SSL on all of a party's rows:
    L_local^i = 1/2 (L_SSL(p_1l, z~_2l) + L_SSL(p_2l, z~_1l)) + gamma (L_SSL(p_1l, z_1c) + L_SSL(p_2l, z_2c))
with p_kl = h_l(f_l(v_k)), z~_kl = f~_l(v_k) from the local target encoder, z_kc = f_c(v_k) from the
party's cross-party encoder, which only guides here (step 2 updates f_l and h_l alone). gamma = 0.5 in
the paper.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

PairLoss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
FEDHSSL_GAMMA = 0.5


def negative_cosine(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """SimSiam's D(p, st(z)) = -cos(p, z), batch mean: its pair loss (SimSiamLoss is its symmetrised form)."""
    return -F.cosine_similarity(p, z.detach(), dim=1).mean()


def cross_party_loss(pair_loss: PairLoss, prediction: torch.Tensor, received: Sequence[torch.Tensor]) -> torch.Tensor:
    """Eq. 5: the party's own p_c against each z_c it received (K-1 of them at the active party, the active
    party's one at a passive party), averaged."""
    if not received:
        raise ValueError("cross-party SSL needs at least one other party's representations")
    for z in received:
        if z.shape != prediction.shape:
            raise ValueError(
                f"received representations {tuple(z.shape)} do not match the prediction "
                f"{tuple(prediction.shape)}: the parties' cross-party encoders must share rep_dim"
            )
    return torch.stack([pair_loss(prediction, z.detach()) for z in received]).mean()


def guided_local_loss(
    pair_loss: PairLoss,
    predictions: tuple[torch.Tensor, torch.Tensor],
    targets: tuple[torch.Tensor, torch.Tensor],
    cross_party: tuple[torch.Tensor, torch.Tensor],
    gamma: float = FEDHSSL_GAMMA,
) -> torch.Tensor:
    """Eq. 6 for the two views: predictions (p_1l, p_2l), local targets (z~_1l, z~_2l), cross-party
    encodings (z_1c, z_2c). Each prediction is pulled to the other view's local target and to its own
    view's cross-party encoding."""
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    (p1, p2), (t1, t2), (c1, c2) = predictions, targets, cross_party
    local = 0.5 * (pair_loss(p1, t2.detach()) + pair_loss(p2, t1.detach()))
    if gamma == 0:  # plain local SSL (FedLocalSSL): no guidance term to compute
        return local
    return local + gamma * (pair_loss(p1, c1.detach()) + pair_loss(p2, c2.detach()))
