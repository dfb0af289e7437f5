"""Clustering what a site receives into classes: one-shot's own ClientUpdate (Sun et al., ICCV 2023, Alg. 1
line 28: k-means on the directions of the partial gradients, which become the site's temporary labels) used
as an attack on every gradient pass, and few-shot's pseudo-label probabilities p^ (Alg. 2), read as a score. With a
linear head on two classes every gradient row is a signed
multiple of one vector, so the clusters are the labels up to renaming."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from vflflare.algorithms.blocks.kmeans import kmeans_on_gradients
from vflflare.attacks.leak import cluster_label_agreement, leak_auc
from vflflare.attacks.observed import GradientRound

# each attack by name and the channel it reads (any number of classes)
CHANNELS = {"gradient_clusters": "gradients", "probability_clusters": "probabilities"}


def clusters_of(grads: np.ndarray, num_classes: int, seed: int = 0) -> np.ndarray:
    """One-shot's k-means on the gradient directions, on one thread: an attack runs it once per pass, and on
    shared cores the OpenMP threads of scikit-learn and torch wait on each other (seconds per call, not ms)."""
    with threadpool_limits(1):
        return kmeans_on_gradients(np.asarray(grads).reshape(len(grads), -1), num_classes, seed)


def recovered(groups: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    """Leak AUC of the groups for two classes (a hard 0/1 score), else recovery accuracy."""
    return leak_auc(groups, labels) if num_classes == 2 else cluster_label_agreement(groups, labels)


def gradient_cluster_leak(rounds: list[GradientRound], labels: np.ndarray, num_classes: int, seed: int = 0) -> float:
    """Mean over passes of what k-means on the gradient directions recovers."""
    return float(
        np.mean([recovered(clusters_of(r.grads, num_classes, seed), labels[r.positions], num_classes) for r in rounds])
    )


def probability_leak(probs: np.ndarray, labels: np.ndarray, num_classes: int) -> float | None:
    """Few-shot's p^ is one number per unaligned row, the chance the row gets a pseudo-label (Eq. 8-9): the
    label party's confidence, not a class. For two classes its leak AUC against the labels (confidence
    differs between the classes); for more classes it names no class, so there is nothing to recover (None)."""
    probs = np.asarray(probs, dtype=np.float64).reshape(len(labels), -1)
    if probs.shape[1] > 1:  # class probabilities, should a plug-in send them
        return leak_auc(probs[:, 1], labels) if num_classes == 2 else cluster_label_agreement(probs.argmax(1), labels)
    return leak_auc(probs[:, 0], labels) if num_classes == 2 else None
