"""The utility metric of the papers: AUC for binary tasks (credit default), accuracy otherwise."""

from __future__ import annotations

import numpy as np


def metric_name(num_classes: int) -> str:
    return "auc" if num_classes == 2 else "accuracy"


def score(probs: np.ndarray, labels: np.ndarray, num_classes: int) -> tuple[str, float]:
    """(name, value) of the metric for class probabilities probs [n, C] against integer labels [n]."""
    probs = np.asarray(probs)
    labels = np.asarray(labels)
    if probs.ndim != 2 or probs.shape != (len(labels), num_classes):
        raise ValueError(f"probs must have shape ({len(labels)}, {num_classes}), got {probs.shape}")
    name = metric_name(num_classes)
    if name == "auc":
        from sklearn.metrics import roc_auc_score  # scikit-learn takes ~1 s to import; sites never score

        if len(np.unique(labels)) < 2:
            raise ValueError(f"AUC needs rows of both classes; got {len(labels)} rows all labeled {labels[:1]}")
        return name, float(roc_auc_score(labels, probs[:, 1]))
    return name, float(np.mean(probs.argmax(axis=1) == labels))
