"""How much of the labels one-shot VFL discloses to a feature party.

The party clusters the partial gradients it receives (k-means, Alg. 1 line 28); the clusters are its
temporary labels. Measured here: the share of rows whose cluster, under the best one-to-one renaming of
clusters to classes, equals the true label. With a linear head on two classes every row's gradient is
a signed multiple of one vector, so the clusters are the labels up to renaming.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


def cluster_label_agreement(clusters: np.ndarray, labels: np.ndarray) -> float:
    """Accuracy of clusters as label predictions under the best cluster->label assignment (Hungarian)."""
    clusters = np.asarray(clusters, dtype=np.int64)
    labels = np.asarray(labels, dtype=np.int64)
    if clusters.shape != labels.shape or clusters.ndim != 1 or len(labels) == 0:
        raise ValueError(
            f"clusters and labels must be equal-length non-empty 1-D arrays: {clusters.shape} vs {labels.shape}"
        )
    if clusters.min() < 0 or labels.min() < 0:
        raise ValueError("clusters and labels must be non-negative indices")
    counts = np.zeros((clusters.max() + 1, labels.max() + 1), dtype=np.int64)
    np.add.at(counts, (clusters, labels), 1)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    return float(counts[rows, cols].sum() / len(labels))
