"""Marvell: optimized, label-dependent Gaussian noise on the per-row gradients of a binary task (Li et al.,
"Label Leakage and Protection in Two-party Split Learning", ICLR 2022, Sec. 4).

Per batch, the gradients of each class are modelled as Gaussians: means mu_1, mu_0, and covariances
summarised by their variance along Delta = mu_1 - mu_0 and their mean variance across it. Noise
N(0, Sigma_c) is added to the rows of class c, Sigma_c = u_c e e^T + v_c (I - e e^T) with e = Delta/|Delta|
(the paper shows the optimum has this form), and (u_1, u_0, v_1, v_0) >= 0 minimise the symmetrised KL
divergence between the two classes' noised gradient distributions, which bounds the AUC of every label
attack on them, under the power budget p (u_1 + (d-1) v_1) + (1-p) (u_0 + (d-1) v_0) <= s |Delta|^2
(p: the batch's share of class 1; s: the strength, the paper's "scale", 0.1-4 in its experiments).

Choices the paper leaves open, written down here: a batch with rows of one class only is sent as it is
(there is no Delta to hide inside it; at batch 32 and 22 % positives that is 3 batches in 10,000); the
four variables are found by SLSQP from scipy, starting from the whole budget along e.
"""

from __future__ import annotations

import numpy as np
import torch


def class_statistics(rows: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, dict[int, tuple[float, float]]]:
    """Delta = mean of class 1 - mean of class 0, and per class (variance along Delta, mean variance
    across it)."""
    means = {c: rows[labels == c].mean(axis=0) for c in (0, 1)}
    delta = means[1] - means[0]
    e = delta / max(np.linalg.norm(delta), 1e-30)
    width = rows.shape[1]
    spread = {}
    for c in (0, 1):
        centered = rows[labels == c] - means[c]
        along = float(np.mean((centered @ e) ** 2))
        total = float(np.mean(np.sum(centered**2, axis=1)))
        spread[c] = (along, max(total - along, 0.0) / (width - 1) if width > 1 else 0.0)
    return delta, spread


def symmetric_kl(noise: np.ndarray, gap: float, spread: dict[int, tuple[float, float]], width: int) -> float:
    """2 x (KL(P_1 || P_0) + KL(P_0 || P_1)) for the noised class Gaussians; noise = (u_1, u_0, v_1, v_0)."""
    u1, u0, v1, v0 = noise
    a1, a0 = spread[1][0] + u1, spread[0][0] + u0
    b1, b0 = spread[1][1] + v1, spread[0][1] + v0
    floor = 1e-12
    a1, a0, b1, b0 = max(a1, floor), max(a0, floor), max(b1, floor), max(b0, floor)
    return a1 / a0 + a0 / a1 - 2 + (width - 1) * (b1 / b0 + b0 / b1 - 2) + gap * (1 / a0 + 1 / a1)


def optimal_noise(
    gap: float, spread: dict[int, tuple[float, float]], width: int, share: float, budget: float
) -> np.ndarray:
    """(u_1, u_0, v_1, v_0) minimising the symmetrised KL under the power budget."""
    if budget <= 0:
        return np.zeros(4)
    from scipy.optimize import minimize  # imported here: every job's processes import this module

    cost = np.array([share, 1 - share, share * (width - 1), (1 - share) * (width - 1)])
    scale = budget  # the variables in units of the budget keep SLSQP well conditioned
    result = minimize(
        lambda x: symmetric_kl(x * scale, gap, spread, width),
        x0=np.array([1.0, 1.0, 0.0, 0.0]),
        method="SLSQP",
        bounds=[(0, None)] * 4,
        constraints=[{"type": "ineq", "fun": lambda x: 1.0 - cost @ x}],
    )
    return np.clip(result.x, 0, None) * scale


def marvell(grads: torch.Tensor, labels: torch.Tensor, strength: float, generator: torch.Generator) -> torch.Tensor:
    """The gradients with Marvell noise of power budget strength x |Delta|^2 (binary labels 0/1)."""
    labels_np = np.asarray(labels, dtype=np.int64).reshape(-1)
    if strength <= 0 or len(np.unique(labels_np)) < 2:
        return grads
    rows = grads.detach().reshape(len(grads), -1).double().numpy()
    delta, spread = class_statistics(rows, labels_np)
    gap = float(delta @ delta)
    width = rows.shape[1]
    u1, u0, v1, v0 = optimal_noise(gap, spread, width, float(labels_np.mean()), strength * gap)
    e = torch.as_tensor(delta / np.sqrt(gap) if gap > 0 else delta)
    z = torch.randn(rows.shape, generator=generator, dtype=torch.float64)
    along = (z @ e)[:, None] * e[None, :]
    positive = torch.as_tensor(labels_np == 1)[:, None]
    u = torch.where(positive, np.sqrt(u1), np.sqrt(u0))
    v = torch.where(positive, np.sqrt(v1), np.sqrt(v0))
    noise = u * along + v * (z - along)
    return (grads.reshape(len(grads), -1) + noise.to(grads.dtype)).reshape(grads.shape)
