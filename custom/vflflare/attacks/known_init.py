"""Known-initialisation projection (Kerckhoffs' principle applied to the head: the label party's fresh head
is code plus public configuration). For the logits z = W h + b of a linear head, the cross-entropy
gradient a site receives for its block of h is W_k^T (p - y), with W_k the head's columns of that site:
every row lies in the span of W_k's rows, at a point fixed by p - y, whose most negative entry is the true
class. For two classes that is (p_1 - y_1)(W_1 - W_0)_k: the sign of the projection on d = (W_1 - W_0)_k
is the label. A site that re-creates W from the job seed projects the received rows onto that span, which
throws away every noise component outside it (all but C - 1 of rep_dim dimensions), and reads the label off.

This only works while the head is the one derived from the public seed; a head initialised from the label
party's private randomness (the fix) leaves the attacker a random W, and the projection scores chance.
With a hidden layer the input gradient depends on each row's hidden activations: it does not apply."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vflflare.attacks.leak import cluster_label_agreement, leak_auc
from vflflare.models.heads import MLPHead
from vflflare.seeding import derive_seed, seeded_init

CHANNEL = "gradients"
BINARY_ONLY = False

# the purpose each fresh head was built under (LabelParty.new_head's public derivation, before defenses
# made it private): one-shot's single partial-gradient message, and split NN's top model
ONESHOT_PURPOSE = "partial_gradients"
SPLIT_PURPOSE = "split_classifier"


def public_head_weight(seed: int, purpose: str, in_dim: int, num_classes: int, hidden: int) -> np.ndarray | None:
    """The first-layer weight [num_classes, in_dim] of the head the label party builds from the public job
    seed for `purpose`; None with a hidden layer (the projection does not apply)."""
    if hidden:
        return None
    with seeded_init(derive_seed(derive_seed(seed, "label"), purpose)):
        head = MLPHead(in_dim, num_classes, hidden)
    return head.net.weight.detach().double().numpy()


def site_columns(positions: Sequence[int], width: int) -> np.ndarray:
    """The head's input columns of the sites at these positions in the job's site order, side by side."""
    return np.concatenate([np.arange(p * width, (p + 1) * width) for p in positions])


def decoded_label_error(grads: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per row, the least-squares p - y [n, C] with W_k^T (p - y) = g and sum(p - y) = 0: the projection of
    the row onto W_k's row span, in the coordinates that name the classes."""
    grads = np.asarray(grads, dtype=np.float64).reshape(len(grads), -1)
    classes = weight.shape[0]
    # the sum-zero constraint appended as one more equation, weighted like the rows of W_k^T
    scale = np.linalg.norm(weight) / np.sqrt(classes)
    system = np.vstack([weight.T, scale * np.ones((1, classes))])
    target = np.hstack([grads, np.zeros((len(grads), 1))])
    solution, *_ = np.linalg.lstsq(system, target.T, rcond=None)
    return solution.T


def projection_scores(grads: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Two classes: each row's projection on d = W_1 - W_0 (positive for class 0, negative for class 1)."""
    direction = weight[1] - weight[0]
    flat = np.asarray(grads, dtype=np.float64).reshape(len(grads), -1)
    return flat @ direction / max(float(np.linalg.norm(direction)), 1e-12)


def projection_leak(grads: np.ndarray, labels: np.ndarray, weight: np.ndarray, num_classes: int) -> float:
    """Leak AUC of the projection (two classes) or recovery accuracy of the decoded classes (more)."""
    if num_classes == 2:
        return leak_auc(projection_scores(grads, weight), labels)
    return cluster_label_agreement(decoded_label_error(grads, weight).argmin(axis=1), labels)


def decoded_labels(grads: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The class each row's gradient points to under the known head (the labels the head was trained on)."""
    if weight.shape[0] == 2:
        return (projection_scores(grads, weight) < 0).astype(np.int64)
    return decoded_label_error(grads, weight).argmin(axis=1).astype(np.int64)


def public_site_weight(
    seed: int, purpose: str, width: int, num_sites: int, positions: Sequence[int], num_classes: int, hidden: int
) -> np.ndarray | None:
    """W_k: the public head's columns of the sites at `positions`; None with a hidden layer."""
    weight = public_head_weight(seed, purpose, width * num_sites, num_classes, hidden)
    return None if weight is None else weight[:, site_columns(positions, width)]
