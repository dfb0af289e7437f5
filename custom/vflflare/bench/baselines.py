"""The leaderboard's non-neural baselines on a vflflare split, on exactly the rows a VFL job of the same
seed trains, selects and scores on:

- `central` with `fit_xgboost` / `fit_logreg`: XGBoost and logistic regression trained centrally on the aligned
  labeled rows with every site's columns joined. No party could do this; it is the upper reference for
  what the aligned rows alone give.
- `label_local`: the label owner alone, on its own columns, either of the aligned labeled rows or of
  every row it has a label for (with `split --active-site-labels`, its unaligned rows too): the floor
  federation must beat.
- NVFlare's vertical XGBoost (`vertical_xgb.py`), with the depth and rounds the central XGBoost chose.
- `trees`: the earlier reports' subsampled trees on the raw source columns (a SourceTable), same depths.

Columns are the sites' preprocessed blocks (standardised numbers, one-hot categories, codes of
high-cardinality categories), as each site's bottom model sees them. Depth is chosen on the validation
rows' AUC, rounds by early stopping on their log-loss; the test rows are only scored. `TUNED_GRID` is the
wider grid of the fair comparison against the neural methods (LEADERBOARD.md, issue 26), chosen the same way.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from vflflare.bench.splits import SourceTable, SplitRows
from vflflare.data.loading import DataRequest, load_label_tables, load_site_tables
from vflflare.data.types import LabelTables, SiteTables
from vflflare.protocol.alignment import align, hash_ids
from vflflare.protocol.setup import alignment_salt

TREE_DEPTHS = (2, 4, 6)
ETA, MAX_ROUNDS, PATIENCE = 0.1, 300, 30  # few rounds: each costs NVFlare's vertical XGBoost ~0.5 s
DEFAULT_GRID: dict[str, tuple] = {"max_depth": TREE_DEPTHS}  # vertical XGBoost grows the same trees from these
TUNED_GRID: dict[str, tuple] = {"max_depth": (2, 3, 4, 6), "learning_rate": (0.03, 0.1), "min_child_weight": (1, 10)}


@dataclass
class AlignedSplit:
    """A split as a VFL job of `seed` sees it: each site's preprocessed tables, the label owner's labels,
    and the IDs of the aligned training, validation and test rows in the job's canonical order."""

    sites: list[str]
    owner: str
    tables: dict[str, SiteTables]
    labels: LabelTables
    train_ids: list[str]
    val_ids: list[str]
    test_ids: list[str]
    fitted: dict = field(default_factory=dict)  # baselines fitted on this split, by name

    @classmethod
    def load(
        cls,
        root: Path,
        sites: list[str],
        owner: str,
        seed: int,
        val_fraction: float,
        numeric_transform: str = "standard",
    ) -> AlignedSplit:
        request = DataRequest(sites, str(root), seed, numeric_transform)
        tables = {s: load_site_tables(s, request) for s in sites}
        labels = load_label_tables(owner, request, active_site_labels=True)
        salt = alignment_salt(seed)
        label_key = f"label:{owner}"
        train = {
            label_key: hash_ids(labels.train_ids, salt),
            **{s: hash_ids(t.train_ids, salt) for s, t in tables.items()},
        }
        test = {
            label_key: hash_ids(labels.test_ids, salt),
            **{s: hash_ids(t.test_ids, salt) for s, t in tables.items()},
        }
        by_digest = dict(zip(train[label_key], labels.train_labels.tolist()))
        rows = align(train, test, by_digest, labels.num_classes, val_fraction, seed, owner)[label_key]
        pick = lambda ids, positions: [ids[i] for i in positions]  # noqa: E731
        return cls(
            sites,
            owner,
            tables,
            labels,
            pick(labels.train_ids, rows.train),
            pick(labels.train_ids, rows.val),
            pick(labels.test_ids, rows.test),
        )

    def x(self, ids: list[str], table: str = "train", sites: list[str] | None = None) -> np.ndarray:
        """The rows `ids` of the `sites`' (default: every site's) columns side by side."""
        blocks = []
        for site in sites or self.sites:
            t = self.tables[site]
            index = {i: r for r, i in enumerate(t.train_ids if table == "train" else t.test_ids)}
            block = t.train if table == "train" else t.test
            rows = np.asarray([index[i] for i in ids], dtype=np.int64)
            blocks += [block.numeric[rows], block.categorical[rows].astype(np.float32)]
        return np.concatenate(blocks, axis=1)

    def y(self, ids: list[str], table: str = "train") -> np.ndarray:
        labels = self.labels.train_labels if table == "train" else self.labels.test_labels
        index = {i: r for r, i in enumerate(self.labels.train_ids if table == "train" else self.labels.test_ids)}
        return np.asarray([labels[index[i]] for i in ids], dtype=np.int64)

    def label_local_train_ids(self) -> list[str]:
        """Every row the label owner holds a label for and a row of its own, minus validation rows."""
        own = set(self.tables[self.owner].train_ids)
        held_out = set(self.val_ids)
        return [i for i in self.labels.train_ids if i in own and i not in held_out]


def _xgboost(seed: int, max_depth: int, learning_rate: float = ETA, min_child_weight: float = 1):
    from xgboost import XGBClassifier

    # no row or column subsampling: NVFlare's vertical XGBoost then grows the same trees from these settings
    return XGBClassifier(
        n_estimators=MAX_ROUNDS,
        learning_rate=learning_rate,
        max_depth=max_depth,
        min_child_weight=min_child_weight,
        tree_method="hist",
        early_stopping_rounds=PATIENCE,
        eval_metric="logloss",
        n_jobs=1,
        random_state=seed,
    )


def _scored(val_auc: float, model, test: tuple[np.ndarray, np.ndarray], **chosen) -> dict:
    """A fitted baseline's record: validation and test AUC, what it chose, and its positive-class test
    scores (`test_scores`, for an ensemble; not kept in the bench's records)."""
    scores = model.predict_proba(test[0])[:, 1]
    return {
        "val_auc": val_auc,
        "test_auc": float(roc_auc_score(test[1], scores)),
        **chosen,
        "test_scores": scores.tolist(),
    }


def fit_xgboost(
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    seed: int,
    grid: Mapping[str, Sequence] = DEFAULT_GRID,
) -> dict:
    """Settings from `grid` (every combination) by validation AUC, rounds by early stopping on validation
    log-loss."""
    best = None
    for values in itertools.product(*grid.values()):
        params = dict(zip(grid, values))
        model = _xgboost(seed, **params).fit(*train, eval_set=[val], verbose=False)
        val_auc = float(roc_auc_score(val[1], model.predict_proba(val[0])[:, 1]))
        if best is None or val_auc > best[0]:
            best = (val_auc, params, model)
    val_auc, params, model = best
    chosen = {"depth": params.pop("max_depth"), **params}  # "depth": what vertical XGBoost reads
    return _scored(val_auc, model, test, **chosen, rounds=int(model.best_iteration) + 1)


def fit_logreg(
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    seed: int,
) -> dict:
    """L2 strength from {0.01, 0.1, 1, 10} by validation AUC."""
    best = None
    for c in (0.01, 0.1, 1.0, 10.0):
        model = LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(*train)
        val_auc = float(roc_auc_score(val[1], model.predict_proba(val[0])[:, 1]))
        if best is None or val_auc > best[0]:
            best = (val_auc, c, model)
    val_auc, c, model = best
    return _scored(val_auc, model, test, C=c)


def central(split: AlignedSplit, fit, seed: int, **options) -> dict:
    return fit(
        (split.x(split.train_ids), split.y(split.train_ids)),
        (split.x(split.val_ids), split.y(split.val_ids)),
        (split.x(split.test_ids, "test"), split.y(split.test_ids, "test")),
        seed,
        **options,
    )


def label_local(split: AlignedSplit, seed: int, all_labels: bool, grid: Mapping[str, Sequence] = DEFAULT_GRID) -> dict:
    """XGBoost on the label owner's own columns: of the aligned training rows, or of every row it holds a
    label for (minus validation rows)."""
    own = [split.owner]
    ids = split.label_local_train_ids() if all_labels else split.train_ids
    result = fit_xgboost(
        (split.x(ids, sites=own), split.y(ids)),
        (split.x(split.val_ids, sites=own), split.y(split.val_ids)),
        (split.x(split.test_ids, "test", own), split.y(split.test_ids, "test")),
        seed,
        grid,
    )
    return {**result, "train_rows": len(ids)}


# The earlier reports' trees (REPORT.md, SSVFL_REPORT.md, FEDHSSL_REPORT.md): raw source columns, row and column
# subsampling, 1000 rounds at 0.05 with early stopping after 50; kept as they ran so those tables still rebuild.
def _subsampled_trees(depth: int, seed: int) -> Any:
    try:
        from xgboost import XGBClassifier
    except ImportError:
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(
            max_depth=depth, learning_rate=0.05, max_iter=1000, early_stopping=True, random_state=seed
        )
    return XGBClassifier(
        n_estimators=1000, learning_rate=0.05, max_depth=depth, subsample=0.8, colsample_bytree=0.8,
        early_stopping_rounds=50, eval_metric="logloss", n_jobs=1, random_state=seed,
    )  # fmt: skip


def trees(train_ids: list[str], rows: SplitRows, table: SourceTable, seed: int) -> dict[str, Any]:
    """Gradient-boosted trees on every party's raw columns of train_ids: depth from TREE_DEPTHS by
    validation AUC, rounds by early stopping on validation log-loss."""
    (train_x, train_y), (val_x, val_y), (test_x, test_y) = map(table.xy, (train_ids, rows.val_ids, rows.test_ids))
    best: tuple[float, int, Any] | None = None
    for depth in TREE_DEPTHS:
        model = _subsampled_trees(depth, seed)
        if hasattr(model, "early_stopping_rounds"):
            model.fit(train_x, train_y, eval_set=[(val_x, val_y)], verbose=False)
        else:  # sklearn's trees hold out their own share of the training rows for early stopping
            model.fit(train_x, train_y)
        val_auc = float(roc_auc_score(val_y, model.predict_proba(val_x)[:, 1]))
        if best is None or val_auc > best[0]:
            best = (val_auc, depth, model)
    val_auc, depth, model = best
    return {
        "metrics": {"val_auc": val_auc, "test_auc": float(roc_auc_score(test_y, model.predict_proba(test_x)[:, 1]))},
        "training": {"depth": depth, "train_rows": len(train_ids), "library": type(model).__module__.split(".")[0]},
    }
