"""The defenses a job can switch on (DefenseSettings in config.py), as pure functions of what is about to
leave a party. The shared blocks call them where data crosses: the label party on the aligned training
labels and on every per-row gradient it sends a site without labels, a site on every representation it
uploads.

- Randomized response (Warner 1965; as label DP: Ghazi et al., "Deep Learning with Label Differential
  Privacy", NeurIPS 2021): each label is kept with probability e^eps / (e^eps + K - 1), else replaced by one
  of the other K - 1 classes uniformly. Everything computed from the noised labels (gradients, pseudo-label
  probabilities, the heads) is eps-label-DP by post-processing.
- Gradient clipping and Gaussian noise (the Gaussian mechanism per row, as DP-SGD applies it; against
  label leakage: Li et al., "Label Leakage and Protection in Two-party Split Learning", ICLR 2022, the
  isotropic-noise baseline) and gradient sparsification (Fu et al., "Label Inference Attacks Against
  Vertical Federated Learning", USENIX Security 2022, Sec. 7): keep the largest entries of each row.
- Marvell (Li et al. 2022; marvell.py): label-dependent noise, optimised per batch, for binary labels.
- Representation noise: Gaussian noise scaled to the uploaded values' root mean square, against the
  label party reconstructing a site's columns from its representations.
"""

from __future__ import annotations

import math

import torch

from vflflare.privacy.marvell import marvell


def keep_probability(epsilon: float, num_classes: int) -> float:
    """P(randomized response reports the true label) = e^eps / (e^eps + K - 1)."""
    return 1.0 / (1.0 + (num_classes - 1) * math.exp(-epsilon))


def randomized_response(
    labels: torch.Tensor, num_classes: int, epsilon: float, generator: torch.Generator
) -> torch.Tensor:
    """K-ary randomized response with privacy budget epsilon > 0."""
    if epsilon <= 0:
        raise ValueError(f"randomized response needs epsilon > 0, got {epsilon}")
    labels = torch.as_tensor(labels, dtype=torch.int64)
    keep = torch.rand(labels.shape, generator=generator) < keep_probability(epsilon, num_classes)
    # another class, uniformly: shift by 1..K-1
    shift = (
        torch.randint(1, num_classes, labels.shape, generator=generator)
        if num_classes > 1
        else torch.zeros_like(labels)
    )
    return torch.where(keep, labels, (labels + shift) % num_classes)


def clip_rows(grads: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Every row scaled down to L2 norm <= max_norm (rows already inside are unchanged)."""
    rows = grads.reshape(len(grads), -1)
    scale = torch.clamp(max_norm / rows.norm(dim=1).clamp_min(1e-12), max=1.0)
    return (rows * scale[:, None]).reshape(grads.shape)


def normalize_rows(grads: torch.Tensor, norm: float) -> torch.Tensor:
    """Every row scaled to L2 norm exactly `norm` (a zero row stays zero): automatic clipping (Bu et al.,
    "Automatic Clipping: Differentially Private Deep Learning Made Easier and Stronger", NeurIPS 2023), so no
    row's length tells its label and C is a scale, not a statistic of the data to choose first."""
    rows = grads.reshape(len(grads), -1)
    norms = rows.norm(dim=1, keepdim=True)
    return torch.where(norms > 0, rows * (norm / norms.clamp_min(1e-30)), rows).reshape(grads.shape)


def keep_largest(grads: torch.Tensor, share: float) -> torch.Tensor:
    """Each row with all but its ceil(share x width) largest-magnitude entries set to 0."""
    rows = grads.reshape(len(grads), -1)
    k = max(1, math.ceil(share * rows.shape[1]))
    if k >= rows.shape[1]:
        return grads
    threshold = rows.abs().topk(k, dim=1).values[:, -1:]
    return torch.where(rows.abs() >= threshold, rows, torch.zeros_like(rows)).reshape(grads.shape)


def defend_gradients(
    grads: torch.Tensor,
    clip: float,
    noise: float,
    keep: float,
    generator: torch.Generator,
    marvell_strength: float = 0.0,
    labels: torch.Tensor | None = None,
    normalize: bool = False,
) -> torch.Tensor:
    """Clip each row to `clip` (0 = no clipping; `normalize`: scale every row to exactly `clip`), add
    N(0, (noise x clip)^2), add Marvell's noise of strength `marvell_strength` given the rows' binary `labels`,
    keep the `keep` share of each row's largest entries. With every setting off the gradients are returned as
    they are."""
    if clip > 0:
        grads = normalize_rows(grads, clip) if normalize else clip_rows(grads, clip)
    if noise > 0:
        if clip <= 0:
            raise ValueError("gradient noise needs a clipping norm: its std is noise x clip")
        grads = grads + noise * clip * torch.randn(grads.shape, generator=generator, dtype=grads.dtype)
    if marvell_strength > 0:
        grads = marvell(grads, labels, marvell_strength, generator)
    if keep < 1:
        grads = keep_largest(grads, keep)
    return grads


def noisy_representations(reps: torch.Tensor, strength: float, generator: torch.Generator) -> torch.Tensor:
    """reps + N(0, (strength x RMS(reps))^2); reps itself for strength 0 or no rows."""
    if strength <= 0 or reps.numel() == 0:
        return reps
    rms = float(reps.detach().float().pow(2).mean().sqrt())
    noise = torch.randn(reps.shape, generator=generator, dtype=torch.float32).to(reps.device, reps.dtype)
    return reps + strength * rms * noise
