"""Norm scoring (Li et al., "Label Leakage and Protection in Two-party Split Learning", ICLR 2022, Sec. 3.1):
with a skewed binary task, the rows of the rare class get larger cross-entropy gradients, so a site without
labels ranks the rows of each pass by the L2 norm of the gradient it received for them."""

from __future__ import annotations

import numpy as np

from vflflare.attacks.leak import leak_auc
from vflflare.attacks.observed import GradientRound

CHANNEL = "gradients"  # the per-row gradients a site without labels receives
BINARY_ONLY = True


def norm_scores(grads: np.ndarray) -> np.ndarray:
    return np.linalg.norm(grads.reshape(len(grads), -1), axis=1)


def norm_leak(rounds: list[GradientRound], labels: np.ndarray) -> float:
    """Mean over passes of the leak AUC of the gradient norms against the rows' true binary labels."""
    return float(np.mean([leak_auc(norm_scores(r.grads), labels[r.positions]) for r in rounds]))
