"""Whole (not yet split) datasets that `vflflare split` and the embedded default start from.

Each loader returns the same five things so the splitter never needs to know the dataset:
(features, int64 labels, row IDs, categorical column names, default 2-party column split or None).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from vflflare.data.errors import DataError, dataset_owner
from vflflare.data.table import CsvTable, read_csv

Source = tuple[pd.DataFrame, np.ndarray, list[str], list[str], list[list[str]] | None]

CREDIT_FILE = Path("credit_default") / "default_of_credit_card_clients.csv"
CREDIT_ID = "ID"
CREDIT_LABEL = "default payment next month"
CREDIT_FIRST_PARTY_COLUMNS = 10  # one-shot VFL / FATE: the first 10 attributes vs the other 13

ADULT_FILES = (Path("adult") / "adult.data", Path("adult") / "adult.test")
ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
]  # fmt: skip
ADULT_CATEGORICAL = [
    "workclass", "education", "marital-status", "occupation", "relationship", "race", "sex", "native-country",
]  # fmt: skip
ADULT_LABEL = "income"
ADULT_CLASSES = {"<=50K": 0, ">50K": 1}


def load_source(name: str, data_dir: str | os.PathLike[str] | None, **opts: int) -> Source:
    """Load dataset `name`; `data_dir` is the folder holding the dataset folders (unused by the
    no-file datasets). `opts` go to the dataset's loader (synthetic: rows, features, classes, seed)."""
    if name not in SOURCES:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(SOURCES)}")
    return SOURCES[name](Path(data_dir) if data_dir is not None else None, **opts)


def source_files(name: str, data_dir: str | os.PathLike[str] | None) -> list[Path]:
    """The files dataset `name` is read from (for checksums in the split manifest); none for built-ins."""
    relative = {"credit_default": [CREDIT_FILE], "adult": list(ADULT_FILES)}.get(name, [])
    if relative and data_dir is None:
        raise ValueError(f"dataset {name!r} needs a data folder")
    return [Path(data_dir) / path for path in relative] if data_dir is not None else []


def _breast_cancer(data_dir: Path | None) -> Source:
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    frame = pd.DataFrame(bunch.data, columns=list(bunch.feature_names))
    ids = [f"bc-{i:05d}" for i in range(len(frame))]
    return frame, bunch.target.astype(np.int64), ids, [], None


def _credit_default(data_dir: Path | None) -> Source:
    path = _data_file("credit_default", data_dir, CREDIT_FILE)
    owner = dataset_owner("credit_default")
    with open(path, newline="", encoding="utf-8-sig") as handle:
        first_line = next(csv.reader(handle), [])
    # The UCI spreadsheet export carries an extra first line of generic names (X1..X23, Y).
    table = read_csv(owner, path, CREDIT_ID, preamble=0 if CREDIT_ID in first_line else 1)
    labels = table.integers(CREDIT_LABEL, what="label")
    features = [name for name in table.header if name not in (CREDIT_ID, CREDIT_LABEL)]
    frame = pd.DataFrame({name: _integral_as_int(table.floats(name)) for name in features})
    assert table.ids is not None
    split = [features[:CREDIT_FIRST_PARTY_COLUMNS], features[CREDIT_FIRST_PARTY_COLUMNS:]]
    return frame, labels, list(table.ids), [], split


def _adult(data_dir: Path | None) -> Source:
    tables = [_read_adult_file(_data_file("adult", data_dir, relative)) for relative in ADULT_FILES]
    columns: dict[str, np.ndarray] = {}
    for name in ADULT_COLUMNS:
        if name in ADULT_CATEGORICAL:
            columns[name] = np.concatenate([np.array(table.column(name), dtype=object) for table in tables])
        else:
            columns[name] = _integral_as_int(np.concatenate([table.floats(name) for table in tables]))
    labels = np.concatenate([_adult_labels(table) for table in tables])
    ids = [f"adult-{i:05d}" for i in range(len(labels))]
    return pd.DataFrame(columns), labels, ids, list(ADULT_CATEGORICAL), None


def _read_adult_file(path: Path) -> CsvTable:
    """The original UCI files: no header, ", "-separated, and adult.test opens with a '|1x3 Cross
    validator' line; '?' (unknown) is kept as an ordinary category."""
    owner = dataset_owner("adult")
    header = ADULT_COLUMNS + [ADULT_LABEL]
    rows: list[list[str]] = []
    lines: list[int] = []
    with open(path, newline="", encoding="utf-8") as handle:
        for line, record in enumerate(csv.reader(handle), start=1):
            if not record or record[0].startswith("|"):
                continue
            if len(record) != len(header):
                raise DataError.at(owner, path, f"{len(record)} fields, expected {len(header)}", line=line)
            rows.append([value.strip() for value in record])
            lines.append(line)
    return CsvTable(owner, str(path), header, rows, lines)


def _adult_labels(table: CsvTable) -> np.ndarray:
    labels = np.empty(len(table.rows), dtype=np.int64)
    for row, value in enumerate(table.column(ADULT_LABEL)):
        label = ADULT_CLASSES.get(value.rstrip("."))
        if label is None:
            raise table.error(f"unknown income class {value!r}; expected one of {sorted(ADULT_CLASSES)}", row=row)
        labels[row] = label
    return labels


def _synthetic(
    data_dir: Path | None, *, rows: int = 10000, features: int = 20, classes: int = 2, seed: int = 0
) -> Source:
    """make_classification data for scale tests; half the features informative, enough for `classes`."""
    from sklearn.datasets import make_classification

    if rows < 2 or features < 2 or classes < 2:
        raise ValueError(f"synthetic data needs rows, features, classes >= 2; got {rows}, {features}, {classes}")
    informative = min(features, max(2, features // 2, math.ceil(math.log2(2 * classes))))
    if 2**informative < 2 * classes:
        raise ValueError(f"synthetic data: {features} features are too few for {classes} classes")
    data, labels = make_classification(
        n_samples=rows,
        n_features=features,
        n_informative=informative,
        n_redundant=0,
        n_classes=classes,
        random_state=seed,
    )
    width = max(5, len(str(rows - 1)))
    frame = pd.DataFrame(data, columns=[f"x{i}" for i in range(features)])
    return frame, labels.astype(np.int64), [f"syn-{i:0{width}d}" for i in range(rows)], [], None


def _data_file(name: str, data_dir: Path | None, relative: Path) -> Path:
    if data_dir is None:
        raise ValueError(f"dataset {name!r} is read from files; give the data folder (--data-dir)")
    path = data_dir / relative
    if not path.is_file():
        raise DataError.at(dataset_owner(name), path, f"file not found (expected under --data-dir {data_dir})")
    return path


def _integral_as_int(values: np.ndarray) -> np.ndarray:
    """Whole-number columns stay integers so the split files show them as written in the source."""
    if np.all(values == np.round(values)) and np.all(np.abs(values) < 2**53):
        return values.astype(np.int64)
    return values


SOURCES: dict[str, Callable[..., Source]] = {
    "breast_cancer": _breast_cancer,
    "credit_default": _credit_default,
    "adult": _adult,
    "synthetic": _synthetic,
}
