"""The model-completion (MC) label inference attack and the CAP trade-off score, as FedHSSL evaluates
them (He et al., Section VI; Fu et al., "Label Inference Attacks Against Vertical Federated Learning").

MC: after training, a party without labels completes its own trained bottom model with an inference head
fitted on a few auxiliary labeled rows (80 in the paper), then labels rows it sees at inference. The
auxiliary rows are a random class-stratified draw from the aligned rows (`auxiliary_rows`): an attacker that
knows a few labels knows some of each class, and the first rows in the canonical order may hold one class only. Its
label recovery accuracy, against that of the same attack on a plain locally pretrained model (the
adversary's prior), measures what federated training leaked. Here the head is a logistic regression on
the frozen representations.

CAP (Eq. 8): the mean over protection strengths lambda of U(model_lambda) * E(recovered_lambda, true),
with U the main task metric and E the label recovery error (1 - MC accuracy): high when a defense keeps
utility while the attack fails.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

AUX_ROWS = 80  # the paper's auxiliary labeled rows

CHANNEL = None  # no message: the site's own trained bottom model, so every algorithm whose sites train one


def auxiliary_rows(labels: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Positions of `count` rows drawn without replacement, each class's share as in `labels` and at least one
    row of every class present (a class with fewer rows than its share gives all it has); every row when
    count >= len(labels)."""
    labels = np.asarray(labels, dtype=np.int64)
    if count >= len(labels):
        return np.arange(len(labels))
    classes, sizes = np.unique(labels, return_counts=True)
    quota = np.minimum(np.maximum(1, np.round(count * sizes / len(labels)).astype(np.int64)), sizes)
    picked = [rng.choice(np.flatnonzero(labels == c), size=q, replace=False) for c, q in zip(classes, quota)]
    return np.sort(np.concatenate(picked))


def model_completion_attack(
    aux_reps: np.ndarray,
    aux_labels: np.ndarray,
    inference_reps: np.ndarray,
    inference_labels: np.ndarray,
    seed: int = 0,
) -> dict[str, float]:
    """Label recovery of an inference head fitted on the adversary's own representations: its accuracy (the
    paper's measure) and, for two classes, its AUC (on a skewed table, accuracy alone can sit below the
    majority-class rate even when the head ranks rows well)."""
    aux_labels = np.asarray(aux_labels)
    if len(np.unique(aux_labels)) < 2:
        raise ValueError(f"the MC attack needs auxiliary rows of at least 2 classes, got {np.unique(aux_labels)}")
    if len(aux_reps) != len(aux_labels) or len(inference_reps) != len(inference_labels):
        raise ValueError("representations and labels must have the same number of rows")
    head = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=seed))
    head.fit(aux_reps, aux_labels)
    inference_labels = np.asarray(inference_labels)
    out = {"accuracy": float((head.predict(inference_reps) == inference_labels).mean())}
    if len(head.classes_) == 2 and len(np.unique(inference_labels)) == 2:
        out["auc"] = float(roc_auc_score(inference_labels, head.predict_proba(inference_reps)[:, 1]))
    return out


def cap(utilities: Sequence[float], attack_accuracies: Sequence[float]) -> float:
    """Eq. 8 over the protection strengths tried: mean of utility x (1 - label recovery accuracy)."""
    if len(utilities) != len(attack_accuracies) or not utilities:
        raise ValueError("CAP needs one utility and one attack accuracy per protection strength")
    return float(np.mean([u * (1.0 - a) for u, a in zip(utilities, attack_accuracies)]))
