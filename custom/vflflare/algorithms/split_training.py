"""Split-NN training over the per-batch channel: vanilla VFL, FedBCD (cfg.local_steps = Q) and the
few-shot "+finetune" rounds. One round trip per batch: each request carries the previous batch's
gradient and the next batch's rows, each reply the next batch's representations."""
from __future__ import annotations

from typing import Any

import numpy as np

from vflflare.algorithms.transport import Transport
from vflflare.config import VFLConfig
from vflflare.seeding import derive_seed
from vflflare.tracking import Tracker


def reps_of(replies: dict[str, dict], part: str) -> dict[str, np.ndarray]:
    return {site: reply[part] for site, reply in replies.items()}


def _train_epoch(net: Transport, label: Any, order: np.ndarray, batch_size: int) -> float:
    pending: dict[str, np.ndarray] = {}
    losses = []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        with net.ledger.timed_step():
            replies = net.step("split", {s: {"rows": rows, **({"grad": pending[s]} if pending else {})} for s in net.sites})
        pending, loss = label.split_step(rows, reps_of(replies, "h"))
        losses.append(float(loss))
    net.step("split", {s: {"grad": pending[s]} for s in net.sites})
    return float(np.mean(losses))


def _validate(net: Transport, label: Any) -> tuple[str, float]:
    """Validation metric of the current weights, which every party keeps as its candidate best."""
    label.keep_candidate()
    val_reps = net.step("represent", {s: {"parts": ["val"], "keep_candidate": True} for s in net.sites})
    (metric, score), = label.evaluate("val", reps_of(val_reps, "val")).items()
    return metric, score


def _commit(net: Transport, label: Any) -> None:
    label.commit_candidate()
    net.step("commit", {s: {} for s in net.sites})


def _test_curve_point(net: Transport, label: Any, epoch: int) -> dict[str, float]:
    """Test metric of the current weights and the training payload spent so far. The test
    representations travel in their own ledger phase, so they never count as training traffic."""
    spent = net.ledger.per_phase[net.ledger.current]["payload_bytes"]  # the training phase this runs in
    with net.ledger.phase("test_curve"):
        replies = net.step("represent", {s: {"parts": ["test"]} for s in net.sites})
        scored = label.evaluate("test", reps_of(replies, "test"))  # a relay to a label-owning site counts here too
    return {"epoch": epoch + 1, "training_payload_bytes": spent, **scored}


def train_split_nn(
    net: Transport, label: Any, cfg: VFLConfig, n_rows: int, epochs: int, keep_classifier: bool, tracker: Tracker,
    info: dict[str, Any],
) -> dict[str, float]:
    """Early stopping on the validation metric; returns 'val_*' and 'test_*' of the best state. Writes
    the number of epochs run to info['split_epochs'] and, with cfg.test_curve, the per-epoch test
    metric against training payload to info['test_curve']."""
    rng = np.random.default_rng(derive_seed(cfg.seed, "split-order"))
    best, since_best = -np.inf, 0
    label.split_begin(keep_classifier)
    with net.ledger.phase("split_training"):
        if keep_classifier:
            # finetuning must beat the model it starts from: on credit default its first epoch at lr 0.01
            # can be worse on validation than the few-shot model, and would otherwise be kept
            _, best = _validate(net, label)
            _commit(net, label)
        for epoch in range(epochs):
            loss = _train_epoch(net, label, rng.permutation(n_rows), cfg.batch_size)
            metric, score = _validate(net, label)
            tracker.scalar("split/train_loss", loss, epoch)
            tracker.scalar(f"split/{metric}", score, epoch)
            if cfg.test_curve:
                point = _test_curve_point(net, label, epoch)
                info.setdefault("test_curve", []).append(point)
                test_metric = "test_" + metric.removeprefix("val_")
                tracker.scalar(f"split/{test_metric}", point[test_metric], epoch)
            if score > best:
                best, since_best = score, 0
                _commit(net, label)
            else:
                since_best += 1
                if since_best >= cfg.split_patience:
                    break
        tracker.info(f"split-NN stopped after {epoch + 1} epochs, best {metric} {best:.4f}")
    with net.ledger.phase("evaluation"):
        label.restore_best()
        net.step("restore", {s: {} for s in net.sites})
        replies = net.exchange("represent", {s: {"parts": ["val", "test"]} for s in net.sites})
        metrics = {**label.evaluate("val", reps_of(replies, "val")), **label.evaluate("test", reps_of(replies, "test"))}
    info["split_epochs"] = epoch + 1
    return metrics
