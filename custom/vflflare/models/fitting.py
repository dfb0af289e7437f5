"""Supervised training of a head on fixed representations (Alg. 1 lines 22-27 and the auxiliary
classifiers of Alg. 2), with early stopping on a validation split."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vflflare.config import JobConfig
from vflflare.metrics import score
from vflflare.tracking import Tracker


@dataclass
class HeadFit:
    epochs: int  # epochs run
    best_epoch: int  # epoch whose weights the head now holds (0-based)
    val_metric: float | None  # validation metric at best_epoch; None without validation data


def predict_proba(head: nn.Module, reps: torch.Tensor) -> np.ndarray:
    head.eval()
    with torch.no_grad():
        return F.softmax(head(reps), dim=1).numpy()


def fit_head(
    head: nn.Module,
    reps: torch.Tensor,
    labels: torch.Tensor,
    *,
    cfg: JobConfig,
    num_classes: int,
    generator: torch.Generator,
    tracker: Tracker,
    tag: str,
    val: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> HeadFit:
    """Adam (lr cfg.lr), shuffled batches of cfg.batch_size, up to cfg.classifier_epochs epochs.

    With `val`, stops after cfg.classifier_patience epochs without improvement and leaves the best
    weights in `head`. Improvement = higher metric, or the same metric with lower validation loss:
    on small validation sets the AUC saturates early and would otherwise freeze an early model.
    """
    optimizer = torch.optim.Adam(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    n = len(labels)
    best_key: tuple[float, float] | None = None
    best_state, best_epoch, best_metric, waited = None, 0, None, 0
    epoch = 0
    for epoch in range(cfg.classifier_epochs):
        head.train()
        order = torch.randperm(n, generator=generator)
        total = 0.0
        for start in range(0, n, cfg.batch_size):
            rows = order[start : start + cfg.batch_size]
            loss = F.cross_entropy(head(reps[rows]), labels[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(rows)
        tracker.scalar(f"{tag}/train_loss", total / n, epoch)
        if val is None:
            continue
        probs = predict_proba(head, val[0])
        name, metric = score(probs, val[1].numpy(), num_classes)
        val_loss = float(F.nll_loss(torch.log(torch.as_tensor(probs).clamp_min(1e-12)), val[1]))
        tracker.scalar(f"{tag}/val_{name}", metric, epoch)
        key = (metric, -val_loss)
        if best_key is None or key > best_key:
            best_key, best_epoch, best_metric, waited = key, epoch, metric, 0
            best_state = copy.deepcopy(head.state_dict())
        else:
            waited += 1
            if waited >= cfg.classifier_patience:
                break
    if best_state is None:
        return HeadFit(epochs=epoch + 1, best_epoch=epoch, val_metric=None)
    head.load_state_dict(best_state)
    tracker.info(f"{tag}: best val {best_metric:.4f} at epoch {best_epoch + 1} of {epoch + 1}")
    return HeadFit(epochs=epoch + 1, best_epoch=best_epoch, val_metric=best_metric)
