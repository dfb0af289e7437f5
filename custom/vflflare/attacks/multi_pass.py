"""Multi-pass aggregation: a split-NN site gets a gradient for every aligned row in every epoch, each with
fresh defense noise, and keeps them all. Independent noisy looks at the same label add up (the reason
DP-SGD accounts over steps), so the site combines its per-row evidence over passes instead of scoring
each pass alone (as the single-pass attacks in gradient_norm.py, gradient_direction.py and clustering.py
do, whose reported leak is the mean over passes):

- norm: each row's mean gradient norm over the passes;
- direction: each pass's cosine scores, sign-aligned to pass 0 (scores that correlate negatively with pass
  0's on the rows they share are flipped: their reference was of the other class), then averaged per row.
  The sign is set per message (each has its own reference row), so each message is aligned, in sweeps
  against the running mean;
- clusters: k-means per pass (one-shot's ClientUpdate), each pass's cluster ids renamed to pass 0's by
  Hungarian matching on their co-occurrence, then each row's share of votes per cluster."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from vflflare.attacks.clustering import clusters_of
from vflflare.attacks.gradient_direction import cosine_scores
from vflflare.attacks.gradient_norm import norm_scores
from vflflare.attacks.leak import cluster_label_agreement, leak_auc
from vflflare.attacks.observed import GradientRound

CHANNEL = "gradients"
ATTACKS = {"multi_pass_norm": True, "multi_pass_direction": True, "multi_pass_clusters": False}  # name: binary only
SWEEPS = 3  # rounds of sign alignment: enough for the signs of one pass's messages to agree through the others


def per_row_mean(rounds: list[GradientRound], scores: list[np.ndarray], n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's mean score over the passes that hold it, and the rows held by any pass."""
    total, count = np.zeros(n_rows), np.zeros(n_rows)
    for r, s in zip(rounds, scores):
        np.add.at(total, r.positions, s)
        np.add.at(count, r.positions, 1)
    seen = np.flatnonzero(count)
    return total[seen] / count[seen], seen


def mean_norm(rounds: list[GradientRound], n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    return per_row_mean(rounds, [norm_scores(r.grads) for r in rounds], n_rows)


def agrees(consensus: np.ndarray, scores: np.ndarray) -> bool:
    """Whether scores correlate non-negatively with the consensus on the same rows (NaN: rows not scored yet)."""
    known = ~np.isnan(consensus)
    if known.sum() < 2:
        return True
    a, b = consensus[known], scores[known]
    return a.std() == 0 or b.std() == 0 or np.corrcoef(a, b)[0, 1] >= 0


def aligned_direction(rounds: list[GradientRound], n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Cosine scores averaged over the passes, each message's sign aligned first. A message's reference row
    sets its sign (gradient_direction.py), so the unit to flip is a message: aligned to pass 0's scores on its
    rows, then, sweep after sweep, to the mean of every aligned message, so that pass 0's own messages, which
    share no row, come to agree through the rows they share with the later passes."""
    units = []  # (rows, scores) of every message of every pass
    for r in rounds:
        scores = cosine_scores(r.grads, r.message)
        units += [(r.positions[r.message == m], scores[r.message == m]) for m in np.unique(r.message)]
    consensus = np.full(n_rows, np.nan)
    for rows, scores in units[: sum(len(np.unique(r.message)) for r in rounds[:1])]:
        consensus[rows] = scores
    signs = np.ones(len(units))
    for _ in range(SWEEPS):
        signs = np.array([1.0 if agrees(consensus[rows], scores) else -1.0 for rows, scores in units])
        total, count = np.zeros(n_rows), np.zeros(n_rows)
        for sign, (rows, scores) in zip(signs, units):
            np.add.at(total, rows, sign * scores)
            np.add.at(count, rows, 1)
        consensus = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    seen = np.flatnonzero(~np.isnan(consensus))
    return consensus[seen], seen


def renamed_to(
    reference: np.ndarray, reference_rows: np.ndarray, clusters: np.ndarray, rows: np.ndarray, num_clusters: int
) -> np.ndarray:
    """clusters with their ids renamed to the reference's by the matching that maximises co-occurrence."""
    common, in_ref, in_clusters = np.intersect1d(reference_rows, rows, return_indices=True)
    together = np.zeros((num_clusters, num_clusters), dtype=np.int64)
    np.add.at(together, (clusters[in_clusters], reference[in_ref]), 1)
    own, theirs = linear_sum_assignment(together, maximize=True)
    rename = np.empty(num_clusters, dtype=np.int64)
    rename[own] = theirs
    return rename[clusters]


def cluster_votes(
    rounds: list[GradientRound], num_classes: int, n_rows: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's share of votes per cluster [rows seen, num_classes], and the rows seen."""
    clusters = [clusters_of(r.grads, num_classes, seed) for r in rounds]
    first = rounds[0].positions
    clusters = [clusters[0]] + [
        renamed_to(clusters[0], first, c, r.positions, num_classes) for c, r in zip(clusters[1:], rounds[1:])
    ]
    votes = np.zeros((n_rows, num_classes))
    for r, c in zip(rounds, clusters):
        np.add.at(votes, (r.positions, c), 1)
    seen = np.flatnonzero(votes.sum(axis=1))
    return votes[seen] / votes[seen].sum(axis=1, keepdims=True), seen


def multi_pass_leaks(
    rounds: list[GradientRound], labels: np.ndarray, num_classes: int, seed: int = 0
) -> dict[str, float]:
    """Each aggregated attack's leak (AUC for two classes, recovery accuracy for more) against the aligned
    rows' `labels`; empty with fewer than 2 passes (nothing to aggregate)."""
    if len(rounds) < 2:
        return {}
    n_rows = len(labels)
    share, seen = cluster_votes(rounds, num_classes, n_rows, seed)
    if num_classes != 2:
        return {"multi_pass_clusters": cluster_label_agreement(share.argmax(axis=1), labels[seen])}
    norms, norm_rows = mean_norm(rounds, n_rows)
    direction, direction_rows = aligned_direction(rounds, n_rows)
    return {
        "multi_pass_norm": leak_auc(norms, labels[norm_rows]),
        "multi_pass_direction": leak_auc(direction, labels[direction_rows]),
        "multi_pass_clusters": leak_auc(share[:, 1], labels[seen]),
    }
