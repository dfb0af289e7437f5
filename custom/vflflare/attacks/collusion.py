"""Colluding sites (the coalition threat of VFL label inference, e.g. Fu et al., "Label Inference Attacks
Against Vertical Federated Learning", USENIX Security 2022, and the K-party setting of VFLAIR): with K >= 3
parties, the sites without labels pool what they received. For a row, each site's gradient is its own
block of dL/dH: side by side they are the row's gradient on the concatenated representation, with every
site's independent defense noise, so the pooled row carries every site's evidence at once. The pooled
rounds are then scored by the single-site attacks (norm, direction, clusters, multi-pass, known head)."""

from __future__ import annotations

import numpy as np

from vflflare.attacks.observed import GradientRound

CHANNEL = "gradients"
NAME = "colluding sites"  # its entry in leak_by_site


def pooled_rounds(rounds_by_site: list[list[GradientRound]]) -> list[GradientRound]:
    """Each pass's gradients of every colluding site side by side, per row (the sites get the same rows in
    the same batches, so their rounds line up)."""
    if len({len(rounds) for rounds in rounds_by_site}) != 1:
        raise ValueError(f"colluding sites received different numbers of passes: {[len(r) for r in rounds_by_site]}")
    pooled = []
    for passes in zip(*rounds_by_site):
        first = passes[0]
        if any(not np.array_equal(p.positions, first.positions) for p in passes[1:]):
            raise ValueError("colluding sites received gradients of different rows in one pass")
        flat = [p.grads.reshape(len(p.grads), -1) for p in passes]
        pooled.append(GradientRound(first.positions, np.concatenate(flat, axis=1), first.message))
    return pooled
