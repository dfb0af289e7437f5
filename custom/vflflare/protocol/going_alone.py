"""Does joining pay? The label party's federated model against what it could do alone (issue 40).

At the final evaluation the label party compares its federated model's test predictions with a model of no
other party's data, on the same test rows:
- a label party at a site: its own model (models/own_model.py), fitted on its own columns of all its labeled
  rows except the validation rows, and chosen on the validation rows;
- a label party at the coordinator, which holds no columns: the prior (the labeled rows' class frequencies).
The gain is the federated metric minus the alone one, with a paired bootstrap 95 % interval over the test rows.
Everything is computed inside the label party: no message is added, and only these summary numbers go to the
coordinator, inside the reply of the evaluation it asked for.

With `blend_own_model`, the delivered model is w * federated + (1 - w) * own, with w chosen on the validation
rows; it is saved with both parts and scored so by the vertical inference job.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vflflare.metrics import gain_interval, score
from vflflare.models.own_model import OwnModel, blend, blend_weight, fit_own_model, prior
from vflflare.seeding import derive_seed

GOING_ALONE = "going_alone"  # the key of the comparison in the final evaluation's reply, and in the results
RESAMPLES = 1000


def own_rows(label: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """Positions in the hosting site's train table of the label party's labeled rows that are not validation
    rows, their true labels, and how many labeled IDs the site has no row of."""
    view = label.colocated.view
    where = {row_id: i for i, row_id in enumerate(view.train_ids)}
    found = [(where.get(row_id, -1), y) for row_id, y in zip(label.tables.train_ids, label.tables.train_labels)]
    val = set(label.colocated.rows_of("val").tolist())
    kept = [(i, y) for i, y in found if i >= 0 and i not in val]
    rows = np.array([i for i, _ in kept], dtype=np.int64)
    labels = np.array([y for _, y in kept], dtype=np.int64)
    return rows, labels, sum(i < 0 for i, _ in found)


def fit_alone(label: Any) -> tuple[OwnModel, dict[str, Any], np.ndarray]:
    """The label site's own model, what the record says of it (every candidate's validation and test metric;
    the choice among them used validation only) and its test probabilities."""
    party = label.colocated
    rows, labels, unmatched = own_rows(label)
    val = (party.rows_of("val").numpy(), label.part_labels("val").numpy())
    model, candidates = fit_own_model(
        party.view,
        rows,
        labels,
        val,
        cfg=label.cfg,
        num_classes=label.num_classes,
        seed=derive_seed(label.seed, "own_model"),
        tracker=label.tracker,
    )
    test_batch, test_labels, name = party.part("test"), label.part_labels("test").numpy(), label.metric_name
    test_probs = {c.kind: c.predict_proba(test_batch) for c in candidates}
    about = {
        "model": model.kind,
        "columns_of": party.site,
        "rows": len(rows),
        **({"labeled_ids_without_row": unmatched} if unmatched else {}),
        "candidates": {
            c.kind: {
                "val_" + name: c.val_metric,
                "test_" + name: score(test_probs[c.kind], test_labels, label.num_classes)[1],
            }
            for c in candidates
        },
    }
    return model, about, test_probs[model.kind]


def compare(label: Any, val_probs: np.ndarray | None, test_probs: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """(the delivered test probabilities, the comparison record). With a blend, the label party keeps the own
    model and the federated share (`label.blend`) for its saved model."""
    name = label.metric_name
    test_labels = label.part_labels("test").numpy()
    if label.colocated is None:
        alone_test = prior(label.part_labels("aligned").numpy(), label.num_classes, len(test_labels))
        about: dict[str, Any] = {"model": "prior", "why": "the label party holds no columns of its own"}
        own, alone_val = None, None
    else:
        if label.own_model is None:  # fitted once: few-shot's classifier and its finetuning both end evaluated
            label.own_model = fit_alone(label)
        own, about, alone_test = label.own_model
        alone_val = own.predict_proba(label.colocated.part("val")) if val_probs is not None else None
    federated = score(test_probs, test_labels, label.num_classes)[1]
    gain, low, high = gain_interval(
        test_labels,
        test_probs,
        alone_test,
        label.num_classes,
        seed=derive_seed(label.seed, "gain_bootstrap"),
        resamples=RESAMPLES,
    )
    record: dict[str, Any] = {
        "metric": name,
        "federated": federated,
        "alone": {**about, "test_" + name: score(alone_test, test_labels, label.num_classes)[1]},
        "gain": gain,
        "interval": [low, high],
        "level": 0.95,
        "resamples": RESAMPLES,
    }
    delivered = test_probs
    if label.cfg.blend_own_model and own is not None and alone_val is not None:
        val_labels = label.part_labels("val").numpy()
        weight = blend_weight(val_probs, alone_val, val_labels, label.num_classes)
        delivered = blend(test_probs, alone_test, weight)
        record["blend"] = {
            "federated_share": weight,
            "val_" + name: score(blend(val_probs, alone_val, weight), val_labels, label.num_classes)[1],
            "test_" + name: score(delivered, test_labels, label.num_classes)[1],
        }
        label.blend = (own, weight)
    return delivered, record


def describe(record: dict[str, Any]) -> list[str]:
    """The results table's lines."""
    name, alone = record["metric"], record["alone"]
    kind = (
        "the prior: it holds no columns"
        if alone["model"] == "prior"
        else f"{alone['model']} on {alone['columns_of']}'s columns, {alone['rows']} labeled rows"
    )
    low, high = record["interval"]
    lines = [
        f"  {'label party alone':<28} {alone['test_' + name]:.4f}  ({kind})",
        f"  {'gain from joining':<28} {record['gain']:+.4f}  (95% interval {low:+.4f} to {high:+.4f}, "
        f"bootstrap over the test rows)",
    ]
    if "blend" in record:
        blended = record["blend"]
        lines.append(
            f"  {'delivered: blend':<28} {blended['test_' + name]:.4f}  ({blended['federated_share']:.1f} x the "
            f"federated model ({record['federated']:.4f}) + the rest own model, share chosen on validation)"
        )
    return lines


def keep_comparison(info: dict[str, Any], metrics: dict[str, Any]) -> dict[str, float]:
    """The final evaluation's metrics without the comparison, which goes to the run's info (the last one
    wins: a finetuned model replaces the one before it)."""
    if GOING_ALONE in metrics:
        info[GOING_ALONE] = metrics.pop(GOING_ALONE)
    return metrics
