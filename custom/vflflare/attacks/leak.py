"""How much of the labels an attack recovered, in one number per attack: for two classes the leak AUC,
max(AUC, 1 - AUC) of the attack's score against the true labels (the attacker need not know which end of
its score is the positive class: 0.5 is chance, 1 is every label); for more classes the recovery accuracy
under the best renaming of the attacker's groups to classes, to be read beside the majority-class rate."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import roc_auc_score


def leak_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """max(AUC, 1 - AUC) of `scores` for binary `labels`; 0.5 when a class is missing (nothing to rank)."""
    labels = np.asarray(labels)
    if len(np.unique(labels)) < 2:
        return 0.5
    auc = float(roc_auc_score(labels, np.asarray(scores, dtype=np.float64)))
    return max(auc, 1.0 - auc)


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


def majority_rate(labels: np.ndarray) -> float:
    """The recovery accuracy of guessing the most frequent class for every row: what 'learned nothing' scores."""
    return float(np.bincount(np.asarray(labels, dtype=np.int64)).max() / len(labels))
