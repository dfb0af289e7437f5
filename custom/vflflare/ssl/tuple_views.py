"""CFL's tuple representation (Ginanjar et al., paper 003, Sec. 4.2 and Algorithm 1): a batch of a silo's
rows x is cloned into two pairs, (x_i^a, x_i^b) and (x_j^a, x_j^b). Every clone gets binomial masking
noise (each entry zeroed with probability `rate`), at rate z for the i pair and 1 - z for the j pair;
the b clones also get additive Gaussian noise. The whole row is kept in every view (no subsetting),
which is what distinguishes it from SubTab's partial views."""

from __future__ import annotations

import torch


def binomial_mask(x: torch.Tensor, rate: float, generator: torch.Generator) -> torch.Tensor:
    return x * (torch.rand(x.shape, generator=generator) >= rate)


def tuple_views(
    x: torch.Tensor, z: float, gaussian_std: float, generator: torch.Generator
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """[(x_i^a, x_i^b), (x_j^a, x_j^b)] for a batch x [n, d]."""
    if not 0.0 <= z <= 1.0:
        raise ValueError(f"noise rate z must be in [0, 1], got {z}")
    pairs = []
    for rate in (z, 1.0 - z):
        a = binomial_mask(x, rate, generator)
        b = binomial_mask(x, rate, generator) + gaussian_std * torch.randn(x.shape, generator=generator)
        pairs.append((a, b))
    return pairs
