"""Step (3) of one-shot VFL (Alg. 1 line 28): temporary labels of the aligned rows = k-means clusters
of the partial gradients the label party sent down."""

from __future__ import annotations

import numpy as np


def kmeans_on_gradients(grads: np.ndarray, num_clusters: int, seed: int) -> np.ndarray:
    """Cluster index (int64) per row of grads [n, d]; same inputs and seed -> same indices.

    Rows are scaled to unit length first: the paper's intuition is that gradients of one class share a
    direction, while their length only says how wrong the fresh classifier was on that row (for a linear
    head and two classes every row is a signed multiple of one vector, so directions separate exactly).
    """
    grads = np.asarray(grads, dtype=np.float64)
    if grads.ndim != 2:
        raise ValueError(f"gradients must be a 2-D array [rows, rep_dim], got shape {grads.shape}")
    if not np.all(np.isfinite(grads)):
        raise ValueError("gradients contain NaN or infinite values")
    if num_clusters < 2 or num_clusters > len(grads):
        raise ValueError(f"need 2 <= num_clusters <= rows; got {num_clusters} clusters for {len(grads)} rows")
    norms = np.linalg.norm(grads, axis=1, keepdims=True)
    directions = grads / np.maximum(norms, np.finfo(np.float64).tiny)
    from sklearn.cluster import KMeans  # imported here: every job's processes import this module

    km = KMeans(n_clusters=num_clusters, n_init=10, random_state=seed % (2**32))
    return km.fit_predict(directions).astype(np.int64)
