"""Local preprocessing of a site's features into a FeatureBlock.

Statistics come from the site's own training table only: raw features never leave a site, so
neither may anything fitted on another party's rows or on the test rows. Categorical columns with
few categories are one-hot encoded into the numeric block (cheap, no embedding to learn); wider
ones become an embedding index with 0 reserved for categories never seen in training.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflflare.data.table import FeatureTable
from vflflare.data.types import FeatureBlock

MAX_ONE_HOT = 16


@dataclass(frozen=True)
class Preprocessor:
    """Fitted transform from a FeatureTable's columns to a FeatureBlock.

    scales: numeric column -> (mean, divisor); one_hot / embedded: categorical column -> the training
    categories in sorted order (one-hot position, or embedding index - 1).
    """

    columns: tuple[str, ...]
    scales: dict[str, tuple[float, float]]
    one_hot: dict[str, list[str]]
    embedded: dict[str, list[str]]

    @classmethod
    def fit(cls, train: FeatureTable, max_one_hot: int = MAX_ONE_HOT) -> "Preprocessor":
        scales: dict[str, tuple[float, float]] = {}
        one_hot: dict[str, list[str]] = {}
        embedded: dict[str, list[str]] = {}
        for name, values in train.columns.items():
            if name in train.categorical:
                categories = sorted(set(values.tolist()))
                (one_hot if len(categories) <= max_one_hot else embedded)[name] = categories
            else:
                std = float(values.std())
                scales[name] = (float(values.mean()), std if std > 0 else 1.0)
        return cls(tuple(train.columns), scales, one_hot, embedded)

    @property
    def numeric_names(self) -> list[str]:
        names: list[str] = []
        for name in self.columns:
            if name in self.scales:
                names.append(name)
            elif name in self.one_hot:
                names.extend(f"{name}={category}" for category in self.one_hot[name])
        return names

    @property
    def categorical_names(self) -> list[str]:
        return [name for name in self.columns if name in self.embedded]

    @property
    def feature_names(self) -> list[str]:
        """Numeric-block column names, then categorical-block column names."""
        return self.numeric_names + self.categorical_names

    def transform(self, table: FeatureTable) -> FeatureBlock:
        if set(table.columns) != set(self.columns):
            raise ValueError(f"columns {sorted(table.columns)} differ from the fitted {sorted(self.columns)}")
        numeric: list[np.ndarray] = []
        for name in self.columns:
            values = table.columns[name]
            if name in self.scales:
                mean, divisor = self.scales[name]
                numeric.append(((values - mean) / divisor)[:, None])
            elif name in self.one_hot:
                position = {category: i for i, category in enumerate(self.one_hot[name])}
                block = np.zeros((len(values), len(position)))
                for row, value in enumerate(values):
                    if value in position:
                        block[row, position[value]] = 1.0
                numeric.append(block)
        categorical: list[np.ndarray] = []
        for name in self.categorical_names:
            index = {category: i + 1 for i, category in enumerate(self.embedded[name])}
            categorical.append(np.array([index.get(value, 0) for value in table.columns[name]], dtype=np.int64))
        rows = len(table.ids)
        return FeatureBlock(
            numeric=np.concatenate(numeric, axis=1).astype(np.float32) if numeric else np.zeros((rows, 0), np.float32),
            categorical=np.stack(categorical, axis=1) if categorical else np.zeros((rows, 0), np.int64),
            cardinalities=[len(self.embedded[name]) + 1 for name in self.categorical_names],
        )
