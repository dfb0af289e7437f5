"""The two small JSON side files of a party's data folder: ``schema.json`` and ``labels.json``.

A label owner keeps its labels either in label files (train_labels.csv, test_labels.csv, labels.json)
or in a label column of its own tables declared in schema.json -- never both (see loading.py).

Both are optional and both are read strictly (unknown keys are errors), because a misspelt key
would otherwise fall back to a default silently, e.g. a categorical column read as numeric.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vflflare.data.errors import DataError

SCHEMA_FILE = "schema.json"
LABELS_FILE = "labels.json"
# a split's folders (vflflare split): the root's manifest and overlap IDs, each party's tables
MANIFEST_FILE = "manifest.json"
OVERLAP_IDS_FILE = "overlap_ids.csv"
TRAIN_FILE = "train.csv"
TEST_FILE = "test.csv"
TRAIN_LABELS_FILE = "train_labels.csv"
TEST_LABELS_FILE = "test_labels.csv"
DEFAULT_ID_COLUMN = "id"
DEFAULT_LABEL_COLUMN = "label"
DEFAULT_PATH_COLUMN = "path"
MODALITIES = ("table", "image")
# Per-column transform of numeric columns before standardisation (see preprocess.py):
# standard = standardise only; signed_log = sign(x) * log1p(|x|), then standardise;
# auto = signed_log for the columns whose training values look heavy-tailed, standard for the rest;
# quantile = normal scores of the ranks; ple = piecewise-linear encoding over quantile bins.
NUMERIC_TRANSFORMS = ("standard", "signed_log", "auto", "quantile", "ple")
NUMERIC_FILLS = ("median", "mean", "zero", "error")
CATEGORICAL_FILLS = ("category", "error")


@dataclass(frozen=True)
class MissingPolicy:
    """What a site does with missing cells (schema.json `missing`): a numeric cell is missing when empty or
    NA, N/A, NaN, null, None (any case); a categorical cell when empty. Numeric cells are filled with a
    statistic of the site's own training rows (or 0), with a 0/1 indicator column for every column that
    had missing training cells; categorical ones become their own category. "error" refuses them."""

    numeric: str = "median"
    categorical: str = "category"
    indicator: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"numeric": self.numeric, "categorical": self.categorical, "indicator": self.indicator}


@dataclass(frozen=True)
class LabelSpec:
    """How to read the label files; num_classes None means "infer it from the labels". classes: the user's
    label values, class id = position (`{"classes": ["No", "Yes"]}`: "No" is 0, "Yes" 1); None: the labels
    are the class ids themselves."""

    num_classes: int | None = None
    id_column: str = DEFAULT_ID_COLUMN
    label_column: str = DEFAULT_LABEL_COLUMN
    classes: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        values = {"num_classes": self.num_classes, "id_column": self.id_column, "label_column": self.label_column}
        return {**values, "classes": list(self.classes)} if self.classes is not None else values


@dataclass(frozen=True)
class TableSchema:
    """How to read a site's tables: an ID column, feature columns and optionally a label column.

    label_column: a column of train.csv / test.csv holding the label (an empty train cell = an
    unlabeled row; every test row needs one). It is never a feature: it is dropped before
    preprocessing on every site that declares it, the label owner or not, because the user declared
    it a label and a label must not leave the site as a feature. Only the label owner reads its
    values (`load_label_tables`); num_classes (C) may go with it, as labels.json's does.
    """

    id_column: str = DEFAULT_ID_COLUMN
    categorical_columns: tuple[str, ...] = ()
    label_column: str | None = None
    num_classes: int | None = None
    numeric_transform: str | None = None
    # "image": train.csv / test.csv index image files (`path_column`, relative to the CSV), read with
    # MONAI and resized to `image_size` [height, width] when given (data/images.py)
    modality: str = "table"
    image_size: tuple[int, int] | None = None
    path_column: str = DEFAULT_PATH_COLUMN
    missing: MissingPolicy = MissingPolicy()
    classes: tuple[str, ...] | None = None  # the label column's values by class id, as labels.json's "classes"

    def to_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = {"id_column": self.id_column, "categorical_columns": list(self.categorical_columns)}
        # Written only when set, so a features-only schema.json stays exactly as before.
        if self.label_column is not None:
            values["label_column"] = self.label_column
        if self.num_classes is not None:
            values["num_classes"] = self.num_classes
        if self.classes is not None:
            values["classes"] = list(self.classes)
        if self.numeric_transform is not None:
            values["numeric_transform"] = self.numeric_transform
        if self.modality != "table":
            values.update(modality=self.modality, path_column=self.path_column)
            del values["categorical_columns"]
        if self.image_size is not None:
            values["image_size"] = list(self.image_size)
        if self.missing != MissingPolicy():
            values["missing"] = self.missing.to_dict()
        return values

    def label_spec(self) -> LabelSpec:
        """The label column read like a label file, so both go through the same validation."""
        assert self.label_column is not None
        return LabelSpec(self.num_classes, self.id_column, self.label_column, self.classes)


def read_table_schema(owner: str, path: Path) -> TableSchema:
    """``schema.json`` of a site folder, or the defaults when the file is absent."""
    values = _read_json_object(
        owner,
        path,
        {
            "id_column",
            "categorical_columns",
            "label_column",
            "num_classes",
            "numeric_transform",
            "modality",
            "image_size",
            "path_column",
            "missing",
            "classes",
        },
    )
    if values is None:
        return TableSchema()
    modality = values.get("modality", "table")
    if modality not in MODALITIES:
        raise DataError.at(owner, path, f"'modality' must be one of {list(MODALITIES)}, got {modality!r}")
    kind_keys = {
        "table": {"categorical_columns", "numeric_transform", "missing"},
        "image": {"image_size", "path_column"},
    }
    foreign = sorted(set(values) & set().union(*(keys for kind, keys in kind_keys.items() if kind != modality)))
    if foreign:
        raise DataError.at(owner, path, f"{foreign} do not apply to modality {modality!r}")
    id_column = values.get("id_column", DEFAULT_ID_COLUMN)
    _check_name(owner, path, "id_column", id_column)
    categorical = values.get("categorical_columns", [])
    if not isinstance(categorical, list):
        raise DataError.at(owner, path, f"'categorical_columns' must be a list of column names, got {categorical!r}")
    for name in categorical:
        _check_name(owner, path, "categorical_columns", name)
    duplicates = sorted({name for name in categorical if categorical.count(name) > 1})
    if duplicates:
        raise DataError.at(owner, path, f"'categorical_columns' lists {duplicates} more than once")
    if id_column in categorical:
        raise DataError.at(owner, path, f"the ID column {id_column!r} cannot also be categorical")
    label_column = values.get("label_column")
    if label_column is not None:
        _check_name(owner, path, "label_column", label_column)
        if label_column == id_column:
            raise DataError.at(owner, path, f"'id_column' and 'label_column' are both {id_column!r}")
        if label_column in categorical:
            raise DataError.at(owner, path, f"the label column {label_column!r} cannot also be a categorical feature")
    num_classes, classes = _classes(owner, path, values)
    for key in ("num_classes", "classes"):
        if values.get(key) is not None and label_column is None:
            # C without a label column would be read by nobody: refuse rather than ignore it.
            raise DataError.at(owner, path, f"{key!r} needs 'label_column' (it describes that column's labels)")
    numeric_transform = values.get("numeric_transform")
    if numeric_transform is not None and numeric_transform not in NUMERIC_TRANSFORMS:
        raise DataError.at(
            owner, path, f"'numeric_transform' must be one of {list(NUMERIC_TRANSFORMS)}, got {numeric_transform!r}"
        )
    path_column = values.get("path_column", DEFAULT_PATH_COLUMN)
    _check_name(owner, path, "path_column", path_column)
    if path_column in (id_column, label_column):
        raise DataError.at(owner, path, f"'path_column' {path_column!r} is also the ID or label column")
    return TableSchema(
        id_column,
        tuple(categorical),
        label_column,
        num_classes,
        numeric_transform,
        modality,
        _image_size(owner, path, values.get("image_size")),
        path_column,
        _missing(owner, path, values.get("missing")),
        classes,
    )


def _missing(owner: str, path: Path, value: Any) -> MissingPolicy:
    if value is None:
        return MissingPolicy()
    if not isinstance(value, dict) or set(value) - {"numeric", "categorical", "indicator"}:
        raise DataError.at(
            owner, path, f"'missing' must be an object with keys numeric, categorical, indicator; got {value!r}"
        )
    policy = MissingPolicy(**value)
    if policy.numeric not in NUMERIC_FILLS:
        raise DataError.at(
            owner, path, f"'missing.numeric' must be one of {list(NUMERIC_FILLS)}, got {policy.numeric!r}"
        )
    if policy.categorical not in CATEGORICAL_FILLS:
        raise DataError.at(
            owner, path, f"'missing.categorical' must be one of {list(CATEGORICAL_FILLS)}, got {policy.categorical!r}"
        )
    if not isinstance(policy.indicator, bool):
        raise DataError.at(owner, path, f"'missing.indicator' must be true or false, got {policy.indicator!r}")
    return policy


def _image_size(owner: str, path: Path, value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
    ):
        raise DataError.at(owner, path, f"'image_size' must be [height, width] in pixels, got {value!r}")
    return value[0], value[1]


def read_label_spec(owner: str, path: Path) -> LabelSpec:
    """``labels.json`` of the label party's folder, or the defaults (C inferred) when absent."""
    values = _read_json_object(owner, path, {"num_classes", "id_column", "label_column", "classes"})
    if values is None:
        return LabelSpec()
    num_classes, classes = _classes(owner, path, values)
    id_column = values.get("id_column", DEFAULT_ID_COLUMN)
    label_column = values.get("label_column", DEFAULT_LABEL_COLUMN)
    _check_name(owner, path, "id_column", id_column)
    _check_name(owner, path, "label_column", label_column)
    if id_column == label_column:
        raise DataError.at(owner, path, f"'id_column' and 'label_column' are both {id_column!r}")
    return LabelSpec(num_classes, id_column, label_column, classes)


def _classes(owner: str, path: Path, values: dict[str, Any]) -> tuple[int | None, tuple[str, ...] | None]:
    """num_classes and classes: "classes" lists the user's label values, class id = position, each once,
    at least 2; it sets num_classes, which, if also given, must agree."""
    num_classes = _num_classes(owner, path, values)
    classes = values.get("classes")
    if classes is None:
        return num_classes, None
    if not isinstance(classes, list) or len(classes) < 2 or not all(isinstance(c, str) and c != "" for c in classes):
        raise DataError.at(
            owner,
            path,
            f"'classes' must list at least 2 label values as non-empty strings, class id "
            f'= position (e.g. ["No", "Yes"]), got {classes!r}',
        )
    repeated = sorted({c for c in classes if classes.count(c) > 1})
    if repeated:
        raise DataError.at(owner, path, f"'classes' lists {repeated} more than once")
    if num_classes is not None and num_classes != len(classes):
        raise DataError.at(
            owner,
            path,
            f"'num_classes' {num_classes} but 'classes' names {len(classes)}: "
            f"{classes}; give one of them, or make them agree",
        )
    return len(classes), tuple(classes)


def _num_classes(owner: str, path: Path, values: dict[str, Any]) -> int | None:
    num_classes = values.get("num_classes")
    if num_classes is not None and (
        isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2
    ):
        raise DataError.at(owner, path, f"'num_classes' must be an integer >= 2, got {num_classes!r}")
    return num_classes


def _read_json_object(owner: str, path: Path, allowed: set[str]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        # utf-8-sig: editors that save UTF-8 with a byte-order mark are accepted, as for the CSV files.
        values = json.loads(path.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError.at(owner, path, f"not valid JSON: {exc}") from exc
    # Past its own limits json gives up with a bare ValueError or RecursionError instead.
    except RecursionError as exc:
        raise DataError.at(owner, path, "not valid JSON: arrays or objects nested too deeply") from exc
    except ValueError as exc:
        raise DataError.at(
            owner, path, f"not valid JSON: an integer has more than {sys.get_int_max_str_digits()} digits"
        ) from exc
    if not isinstance(values, dict):
        raise DataError.at(owner, path, f"expected a JSON object, got {type(values).__name__}")
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise DataError.at(owner, path, f"unknown keys {unknown}; allowed keys: {sorted(allowed)}")
    return values


def _check_name(owner: str, path: Path, key: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise DataError.at(owner, path, f"{key!r} must hold non-empty column names, got {value!r}")
