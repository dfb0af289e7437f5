"""Direction scoring (Li et al., "Label Leakage and Protection in Two-party Split Learning", ICLR 2022,
Sec. 3.2): for a binary cross-entropy loss the gradients of two rows point the same way when the rows share
a label and opposite ways otherwise. Without any known label the site takes, in each message, the row with
the largest gradient norm as its reference (likely of the rare class, see gradient_norm.py) and scores every
row of the message by the cosine of its gradient with the reference's."""

from __future__ import annotations

import numpy as np

from vflflare.attacks.leak import leak_auc
from vflflare.attacks.observed import GradientRound

CHANNEL = "gradients"
BINARY_ONLY = True


def cosine_scores(grads: np.ndarray, message: np.ndarray) -> np.ndarray:
    """Per row, the cosine with the largest-norm gradient of its own message."""
    flat = grads.reshape(len(grads), -1).astype(np.float64)
    norms = np.linalg.norm(flat, axis=1)
    unit = flat / np.maximum(norms, 1e-12)[:, None]
    scores = np.empty(len(flat))
    for m in np.unique(message):
        rows = np.flatnonzero(message == m)
        reference = unit[rows[np.argmax(norms[rows])]]
        scores[rows] = unit[rows] @ reference
    return scores


def direction_leak(rounds: list[GradientRound], labels: np.ndarray) -> float:
    """Mean over passes of the leak AUC of the cosine scores against the rows' true binary labels."""
    return float(np.mean([leak_auc(cosine_scores(r.grads, r.message), labels[r.positions]) for r in rounds]))
