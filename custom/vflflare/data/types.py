"""In-memory shapes of a party's data after loading and local preprocessing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class FeatureBlock:
    """Preprocessed features of some rows of one site.

    numeric: float32 [n, d_num] -- standardised numeric columns plus one-hot columns.
    categorical: int64 [n, d_cat] -- index per embedded categorical column, 0 = unseen category.
    cardinalities: number of indices per categorical column (including the 0 = unseen slot).
    """

    numeric: np.ndarray
    categorical: np.ndarray
    cardinalities: list[int]

    def __len__(self) -> int:
        return int(self.numeric.shape[0])

    def take(self, rows: np.ndarray) -> FeatureBlock:
        return FeatureBlock(self.numeric[rows], self.categorical[rows], list(self.cardinalities))


@dataclass
class SiteTables:
    """What one feature party holds: its train table (aligned and unaligned rows) and its test table.

    numeric_transform / log_columns: the numeric transform the site applied (preprocess.py) and the
    columns it signed-logged, for the site's own log."""

    site: str
    train_ids: Sequence[str]  # a list, or a StringColumn (data/strings.py) when read through Arrow
    train: FeatureBlock
    test_ids: Sequence[str]
    test: FeatureBlock
    feature_names: list[str]
    numeric_transform: str = "standard"
    log_columns: list[str] = field(default_factory=list)
    site_input: Any = None  # preprocess.SiteInput: how new rows become f_k's input (a saved model keeps it)
    # data/checks.py `check_rows` of the test table against the training rows (with the site-only details)
    data_checks: dict[str, Any] = field(default_factory=dict)


@dataclass
class LabelTables:
    """What the label party holds: labels of its labeled rows and of the test rows."""

    train_ids: list[str]
    train_labels: np.ndarray  # int64
    test_ids: list[str]
    test_labels: np.ndarray  # int64
    num_classes: int
    # where the training labels were read, for messages: a label file, or "column 'label' of <site>/train.csv"
    train_source: str = ""
    id_column: str = "id"  # the label files' (or label column's table's) ID column: test_predictions.csv uses it
    classes: list[str] | None = None  # labels.json "classes": the user's name of each class id, else None
