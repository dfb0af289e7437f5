"""The two small JSON side files of a party's data folder: ``schema.json`` and ``labels.json``.

Both are optional and both are read strictly (unknown keys are errors), because a misspelt key
would otherwise fall back to a default silently, e.g. a categorical column read as numeric.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vflflare.data.errors import DataError

SCHEMA_FILE = "schema.json"
LABELS_FILE = "labels.json"
DEFAULT_ID_COLUMN = "id"
DEFAULT_LABEL_COLUMN = "label"


@dataclass(frozen=True)
class TableSchema:
    """How to read a site's feature tables."""

    id_column: str = DEFAULT_ID_COLUMN
    categorical_columns: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"id_column": self.id_column, "categorical_columns": list(self.categorical_columns)}


@dataclass(frozen=True)
class LabelSpec:
    """How to read the label files; num_classes None means "infer it from the labels"."""

    num_classes: int | None = None
    id_column: str = DEFAULT_ID_COLUMN
    label_column: str = DEFAULT_LABEL_COLUMN

    def to_dict(self) -> dict[str, Any]:
        return {"num_classes": self.num_classes, "id_column": self.id_column, "label_column": self.label_column}


def read_table_schema(owner: str, path: Path) -> TableSchema:
    """``schema.json`` of a site folder, or the defaults when the file is absent."""
    values = _read_json_object(owner, path, {"id_column", "categorical_columns"})
    if values is None:
        return TableSchema()
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
    return TableSchema(id_column, tuple(categorical))


def read_label_spec(owner: str, path: Path) -> LabelSpec:
    """``labels.json`` of the label party's folder, or the defaults (C inferred) when absent."""
    values = _read_json_object(owner, path, {"num_classes", "id_column", "label_column"})
    if values is None:
        return LabelSpec()
    num_classes = values.get("num_classes")
    if num_classes is not None and (
        isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2
    ):
        raise DataError.at(owner, path, f"'num_classes' must be an integer >= 2, got {num_classes!r}")
    id_column = values.get("id_column", DEFAULT_ID_COLUMN)
    label_column = values.get("label_column", DEFAULT_LABEL_COLUMN)
    _check_name(owner, path, "id_column", id_column)
    _check_name(owner, path, "label_column", label_column)
    if id_column == label_column:
        raise DataError.at(owner, path, f"'id_column' and 'label_column' are both {id_column!r}")
    return LabelSpec(num_classes, id_column, label_column)


def _read_json_object(owner: str, path: Path, allowed: set[str]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError.at(owner, path, f"not valid JSON: {exc}") from exc
    if not isinstance(values, dict):
        raise DataError.at(owner, path, f"expected a JSON object, got {type(values).__name__}")
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise DataError.at(owner, path, f"unknown keys {unknown}; allowed keys: {sorted(allowed)}")
    return values


def _check_name(owner: str, path: Path, key: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise DataError.at(owner, path, f"{key!r} must hold non-empty column names, got {value!r}")
