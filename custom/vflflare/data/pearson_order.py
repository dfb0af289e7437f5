"""CFL's Pearson reordering (Ginanjar et al., paper 003, Sec. 4.3, Fig. 5): a silo orders its own columns
by their Pearson correlation with its first column, highest first, on its own training rows only, to
give neighbouring inputs related meaning. Constant columns (zero variance, e.g. padding) correlate 0."""

from __future__ import annotations

import numpy as np


def pearson_order(x: np.ndarray) -> np.ndarray:
    """Column permutation of x [n, d] by correlation with column 0, descending (stable: ties keep order)."""
    centred = x - x.mean(axis=0)
    norms = np.sqrt((centred**2).sum(axis=0))
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = np.where(norms * norms[0] > 0, centred.T @ centred[:, 0] / (norms * norms[0]), 0.0)
    corr[0] = np.inf if norms[0] > 0 else corr[0]  # the first column stays first
    return np.argsort(-corr, kind="stable")
