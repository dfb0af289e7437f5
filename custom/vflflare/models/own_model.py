"""The label party's model of its own columns alone: what it could do without joining (issue 40).

Two candidates, both fitted on the label site's own columns of all its labeled rows except the validation
rows, and both judged on those validation rows only:
- "trees": scikit-learn's HistGradientBoostingClassifier, early-stopped on the validation rows (tables only);
- "neural": the site's own bottom network (its f_k architecture, freshly initialised) under a head, trained
  end to end by `fit_head` as the federated heads are.
The one with the better validation metric is the model alone. `blend_weight` picks, on validation only, how
much of it to mix into the federated model's probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from vflflare.config import JobConfig
from vflflare.metrics import score
from vflflare.models.fitting import fit_head
from vflflare.models.heads import MLPHead
from vflflare.tracking import Tracker

BLEND_GRID = np.linspace(0.0, 1.0, 11)  # the federated model's share in a blend, in steps of 0.1


def as_matrix(batch: Any) -> np.ndarray:
    """A table batch (numeric, categorical) as one float matrix for the trees; categorical indices as numbers."""
    return np.concatenate([np.asarray(t, dtype=np.float32).reshape(len(t), -1) for t in batch], axis=1)


class _OwnNet(nn.Module):
    """f_k's architecture under a head: batch -> logits."""

    def __init__(self, encoder: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.encoder, self.head = encoder, head

    def forward(self, batch: Any) -> torch.Tensor:
        return self.head(self.encoder(*batch))


class _RowsOf(nn.Module):
    """`fit_head` trains a module on a tensor it indexes by row: here the rows are positions in the view's train
    table, so the batch is looked up at each step."""

    def __init__(self, view: Any, net: _OwnNet) -> None:
        super().__init__()
        self.view, self.net = view, net

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.net(self.view.batch("train", positions))


@dataclass
class OwnModel:
    kind: str  # "trees" | "neural"
    model: Any  # the fitted classifier (scikit-learn) or network (_OwnNet)
    val_metric: float | None

    def predict_proba(self, batch: Any) -> np.ndarray:
        if self.kind == "trees":
            return self.model.predict_proba(as_matrix(batch)).astype(np.float64)
        self.model.eval()
        with torch.no_grad():
            return torch.softmax(self.model(batch), dim=1).double().numpy()


def fit_trees(view: Any, rows: np.ndarray, labels: np.ndarray, val: tuple[np.ndarray, np.ndarray], seed: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: PLC0415 - scikit-learn imports slowly

    train_x = as_matrix(view.batch("train", torch.as_tensor(rows)))
    val_rows, val_labels = val
    early = len(val_rows) > 0 and len(np.unique(val_labels)) > 1
    trees = HistGradientBoostingClassifier(early_stopping=early, random_state=seed % 2**32)
    if early:
        val_x = as_matrix(view.batch("train", torch.as_tensor(val_rows)))
        return trees.fit(train_x, labels, X_val=val_x, y_val=val_labels)
    return trees.fit(train_x, labels)


def fit_neural(
    view: Any,
    rows: np.ndarray,
    labels: np.ndarray,
    val: tuple[np.ndarray, np.ndarray],
    *,
    cfg: JobConfig,
    num_classes: int,
    seed: int,
    tracker: Tracker,
) -> _OwnNet:
    spec = cfg.image_model if view.modality == "image" else cfg.model
    net = _OwnNet(view.encoder(spec, cfg.rep_dim), MLPHead(cfg.rep_dim, num_classes, cfg.classifier_hidden))
    val_rows, val_labels = val
    fit_head(
        _RowsOf(view, net),
        torch.as_tensor(rows),
        torch.as_tensor(labels),
        cfg=cfg,
        num_classes=num_classes,
        generator=torch.Generator().manual_seed(seed),
        tracker=tracker,
        tag="own_model",
        val=(torch.as_tensor(val_rows), torch.as_tensor(val_labels)) if len(val_rows) else None,
    )
    return net


def fit_own_model(
    view: Any,
    rows: np.ndarray,
    labels: np.ndarray,
    val: tuple[np.ndarray, np.ndarray],
    *,
    cfg: JobConfig,
    num_classes: int,
    seed: int,
    tracker: Tracker,
) -> tuple[OwnModel, list[OwnModel]]:
    """The better on validation of the trees (tables) and the neural model, and every candidate. `rows`,
    `val[0]`: positions in the view's train table. Runs under its own torch RNG, so nothing the job draws
    afterwards changes."""
    val_rows, val_labels = val
    candidates: list[OwnModel] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if view.modality == "table":
            candidates.append(OwnModel("trees", fit_trees(view, rows, labels, val, seed), None))
        net = fit_neural(view, rows, labels, val, cfg=cfg, num_classes=num_classes, seed=seed, tracker=tracker)
        candidates.append(OwnModel("neural", net, None))
    if len(val_rows) and len(np.unique(val_labels)) > 1:
        val_batch = view.batch("train", torch.as_tensor(val_rows))
        for candidate in candidates:
            candidate.val_metric = score(candidate.predict_proba(val_batch), val_labels, num_classes)[1]
    # the first (trees) on a tie; without validation rows, the first
    best = max(candidates, key=lambda c: -np.inf if c.val_metric is None else c.val_metric)
    return best, candidates


def blend(federated: np.ndarray, own: np.ndarray, weight: float) -> np.ndarray:
    """weight * the federated model's probabilities + (1 - weight) * the own model's."""
    return weight * np.asarray(federated, dtype=np.float64) + (1.0 - weight) * np.asarray(own, dtype=np.float64)


def blend_weight(federated: np.ndarray, own: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    """The federated model's share in BLEND_GRID with the best validation metric; ties go to the larger share
    (the federated model as trained)."""
    scores = [score(blend(federated, own, w), labels, num_classes)[1] for w in BLEND_GRID]
    best = max(scores)
    return float(max(w for w, s in zip(BLEND_GRID, scores) if s == best))


def prior(labels: np.ndarray, num_classes: int, rows: int) -> np.ndarray:
    """The class frequencies of `labels` for every one of `rows` rows: a model of no columns at all."""
    freq = np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes) / max(len(labels), 1)
    return np.tile(freq, (rows, 1))
