"""Few-shot VFL's server-side estimation (Alg. 2 InferProb): the missing representations of a party's
unaligned rows (Eq. 10, scaled dot product attention over the aligned rows) and the probability that a
row gets a pseudo-label (Eq. 8-9)."""

from __future__ import annotations

import numpy as np


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def estimate_missing_representations(h_u_own: np.ndarray, h_o_own: np.ndarray, h_o_other: np.ndarray) -> np.ndarray:
    """Eq. 10: softmax(H_u^A H_o^A^T / sqrt(d)) H_o^B, d = width of the own representations.

    h_u_own [n_u, d], h_o_own [n_o, d], h_o_other [n_o, d_other] -> float32 [n_u, d_other].
    """
    h_u_own = np.asarray(h_u_own, dtype=np.float64)
    h_o_own = np.asarray(h_o_own, dtype=np.float64)
    h_o_other = np.asarray(h_o_other, dtype=np.float64)
    if h_u_own.shape[1] != h_o_own.shape[1]:
        raise ValueError(f"own representations differ in width: unaligned {h_u_own.shape}, aligned {h_o_own.shape}")
    if h_o_own.shape[0] != h_o_other.shape[0]:
        raise ValueError(f"aligned representations differ in rows: own {h_o_own.shape}, other {h_o_other.shape}")
    weights = _softmax(h_u_own @ h_o_own.T / np.sqrt(h_o_own.shape[1]))
    return (weights @ h_o_other).astype(np.float32)


def estimate_joint_representations(own_index: int, h_u_own: np.ndarray, aligned: list[np.ndarray]) -> np.ndarray:
    """H_u^k with every other party's representation estimated by Eq. 10, concatenated in party order.

    One attention over the concatenated other parties equals one per party: the weights depend only
    on party k's own representations.
    """
    others = [h for j, h in enumerate(aligned) if j != own_index]
    estimated = estimate_missing_representations(h_u_own, aligned[own_index], np.concatenate(others, axis=1))
    widths = [h.shape[1] for h in others]
    pieces = np.split(estimated, np.cumsum(widths)[:-1], axis=1)
    pieces.insert(own_index, np.asarray(h_u_own, dtype=np.float32))
    return np.concatenate(pieces, axis=1)


FEWSHOT_THRESHOLD_MODES = ("global", "prior_relative")


def class_thresholds(
    threshold: float, num_classes: int, mode: str = "global", class_prior: np.ndarray | None = None
) -> np.ndarray:
    """Per-class thresholds t_c for Eq. 9.

    "global" (the paper): t_c = t for every class.
    "prior_relative" (ours): t_c = pi_c + (1 - pi_c) s, s = (t - 1/C) / (1 - 1/C), i.e. a prediction of
    class c must be the same share of the way from that class's base rate pi_c to certainty as t is from
    chance on a balanced task; equals "global" when every pi_c = 1/C. On an imbalanced table one global
    t below the majority rate passes nearly every majority prediction and few minority ones.
    """
    if mode not in FEWSHOT_THRESHOLD_MODES:
        raise ValueError(f"few-shot threshold mode must be one of {FEWSHOT_THRESHOLD_MODES}, got {mode!r}")
    if mode == "global":
        return np.full(num_classes, float(threshold))
    if class_prior is None:
        raise ValueError("prior_relative thresholds need the class prior of the aligned labeled rows")
    prior = np.asarray(class_prior, dtype=np.float64)
    if prior.shape != (num_classes,) or np.any(prior < 0) or not np.isclose(prior.sum(), 1.0):
        raise ValueError(f"class prior must be {num_classes} non-negative shares summing to 1, got {prior}")
    share = (threshold - 1.0 / num_classes) / (1.0 - 1.0 / num_classes)
    return prior + (1.0 - prior) * share


def pseudo_label_probabilities(
    local_probs: np.ndarray, global_probs: np.ndarray, threshold: float | np.ndarray
) -> np.ndarray:
    """Eq. 8-9: p^ = 1[argmax local = argmax global] 1[max local > t] 1[max global > t] max global.

    local_probs: f_c^k on the party's own representations; global_probs: f_c on own + estimated ones.
    threshold: t, or one t_c per class (the class both classifiers agree on picks the threshold).
    """
    local_probs = np.asarray(local_probs)
    global_probs = np.asarray(global_probs)
    if local_probs.shape != global_probs.shape:
        raise ValueError(f"local and global probabilities differ in shape: {local_probs.shape} vs {global_probs.shape}")
    thresholds = np.broadcast_to(np.asarray(threshold, dtype=np.float64), (global_probs.shape[1],))
    local_conf, global_conf = local_probs.max(axis=1), global_probs.max(axis=1)
    predicted = global_probs.argmax(axis=1)
    agree = local_probs.argmax(axis=1) == predicted
    keep = agree & (local_conf > thresholds[predicted]) & (global_conf > thresholds[predicted])
    return np.where(keep, global_conf, 0.0).astype(np.float32)
