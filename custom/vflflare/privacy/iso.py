"""Isotropic Gaussian noise (ISO), the label-leakage defense FedHSSL evaluates (He et al., Eq. 7, after
Li et al., "Label Leakage and Protection in Two-party Split Learning"):

    ISO(d) = d + eps,  eps ~ N(0, sigma^2),  sigma = lambda * ||d_max||_2 / sqrt(m)

for a batch d in R^{b x m}, ||d_max||_2 the largest row 2-norm of the batch. The party that owns the
labels applies it to what the others see: its cross-party representations and shared weights during
pretraining (lambda_p), the gradients it sends back during finetuning (lambda_f)."""

from __future__ import annotations

import math

import torch


def iso_sigma(d: torch.Tensor, strength: float) -> float:
    rows = d.reshape(d.shape[0], -1) if d.ndim > 1 else d.reshape(1, -1)
    return strength * float(rows.norm(dim=1).max()) / math.sqrt(rows.shape[1])


def iso(d: torch.Tensor, strength: float, generator: torch.Generator) -> torch.Tensor:
    """d plus ISO noise of strength lambda = `strength`; d itself when strength is 0 (no draw is made)."""
    if strength < 0:
        raise ValueError(f"ISO strength must be >= 0, got {strength}")
    if strength == 0 or d.numel() == 0:
        return d
    noise = torch.randn(d.shape, generator=generator, dtype=torch.float32).to(d.device, d.dtype)
    return d + iso_sigma(d, strength) * noise
