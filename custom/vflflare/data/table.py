"""Reading a party's CSV tables into validated columns.

CSV is parsed with the standard `csv` module rather than pandas so that every row keeps the line
it started on (header = line 1): a bad cell is then reported as "line 18 (id '4411'), column
'PAY_0'", which is what a site operator needs to fix it. Values are kept exactly as written:
no row is dropped, no string is stripped, NaN is an error rather than a missing value.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vflflare.data.errors import DataError
from vflflare.data.schema import LABELS_FILE, SCHEMA_FILE, LabelSpec, TableSchema

_CATEGORICAL_HINT = " (if the column is categorical, list it in schema.json 'categorical_columns')"


@dataclass
class CsvTable:
    """Header and rows of one CSV file, each row with the line it starts on."""

    owner: str
    source: str
    header: list[str]
    rows: list[list[str]]
    lines: list[int]
    ids: list[str] | None = None
    _columns: list[tuple[str, ...]] | None = field(default=None, repr=False)

    def error(self, problem: str, *, row: int | None = None, column: str | None = None) -> DataError:
        """A DataError pointing at a row (index into `rows`) and/or column of this file."""
        line = self.lines[row] if row is not None else None
        row_id = self.ids[row] if row is not None and self.ids is not None else None
        return DataError.at(self.owner, self.source, problem, line=line, row_id=row_id, column=column)

    def column(self, name: str) -> tuple[str, ...]:
        if name not in self.header:
            raise self.error(f"missing column {name!r}; the header has {self.header}")
        if self._columns is None:
            self._columns = list(zip(*self.rows)) if self.rows else [() for _ in self.header]
        return self._columns[self.header.index(name)]

    def check_ids(self, id_column: str) -> None:
        """Fill `ids` from `id_column`, which must exist, be non-empty and unique (rows are joined by it)."""
        if id_column not in self.header:
            raise self.error(f"missing ID column {id_column!r}; the header has {self.header}")
        values = self.column(id_column)
        first_row: dict[str, int] = {}
        for row, value in enumerate(values):
            if value == "":
                raise self.error("empty ID", row=row, column=id_column)
            if value in first_row:
                raise DataError.at(
                    self.owner,
                    self.source,
                    f"duplicate ID {value!r}, first seen on line {self.lines[first_row[value]]}",
                    line=self.lines[row],
                    row_id=value,
                    column=id_column,
                )
            first_row[value] = row
        self.ids = list(values)

    def subset(self, rows: Sequence[int]) -> "CsvTable":
        """The same file restricted to some rows, each keeping its line and ID for messages."""
        ids = [self.ids[row] for row in rows] if self.ids is not None else None
        rows_kept, lines_kept = [self.rows[row] for row in rows], [self.lines[row] for row in rows]
        return CsvTable(self.owner, self.source, self.header, rows_kept, lines_kept, ids)

    def floats(self, name: str, hint: str = "") -> np.ndarray:
        """float64 values of a numeric column; empty, non-numeric, NaN and infinite cells are errors."""
        values = self.column(name)
        try:
            array = np.array(values, dtype=np.float64)
        except ValueError:
            array = None
        if array is not None and np.isfinite(array).all():
            return array
        parsed = np.empty(len(values), dtype=np.float64)
        for row, text in enumerate(values):
            if text.strip() == "":
                raise self.error(f"empty value in a numeric column{hint}", row=row, column=name)
            try:
                number = float(text)
            except ValueError:
                raise self.error(f"non-numeric value {text!r}{hint}", row=row, column=name) from None
            if math.isnan(number):
                raise self.error(f"NaN value {text!r}; missing values are not allowed", row=row, column=name)
            if math.isinf(number):
                raise self.error(f"infinite value {text!r}", row=row, column=name)
            parsed[row] = number
        return parsed

    def integers(self, name: str, what: str = "value") -> np.ndarray:
        """int64 values of a column; anything `int()` rejects (including '1.0') is an error."""
        values = self.column(name)
        parsed = np.empty(len(values), dtype=np.int64)
        for row, text in enumerate(values):
            try:
                parsed[row] = int(text)
            except (ValueError, OverflowError):
                raise self.error(f"non-integer {what} {text!r}", row=row, column=name) from None
        return parsed


@dataclass
class FeatureTable:
    """A site's validated feature table before preprocessing.

    columns: feature columns in file order (ID excluded); float64 arrays for numeric columns,
    object arrays of str for categorical ones.
    """

    csv: CsvTable
    columns: dict[str, np.ndarray]
    categorical: list[str]

    @property
    def ids(self) -> list[str]:
        assert self.csv.ids is not None
        return self.csv.ids


def read_csv(owner: str, path: Path, id_column: str | None = None, preamble: int = 0) -> CsvTable:
    """Read a CSV file; with `id_column`, also validate its IDs. `preamble` lines before the header are skipped."""
    if not path.is_file():
        raise DataError.at(owner, path, "file not found")
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            return parse_csv(owner, str(path), handle, id_column, preamble)
    except UnicodeDecodeError as exc:
        raise DataError.at(owner, path, f"not UTF-8 text: {exc}") from exc


def parse_csv(
    owner: str, source: str, text_lines: Iterable[str], id_column: str | None = None, preamble: int = 0
) -> CsvTable:
    """Parse CSV text whose first non-blank line after `preamble` lines is the header. Blank lines hold
    no values and are skipped; every other row must have as many fields as the header."""
    reader = csv.reader(text_lines)
    header: list[str] | None = None
    rows: list[list[str]] = []
    lines: list[int] = []
    previous_end = 0
    try:
        for record in reader:
            start, previous_end = previous_end + 1, reader.line_num
            if not record or start <= preamble:
                continue
            if header is None:
                header = record
                _check_header(owner, source, header, start)
                continue
            if len(record) != len(header):
                row_id = _field(record, header, id_column)
                raise DataError.at(
                    owner,
                    source,
                    f"{len(record)} fields but the header has {len(header)}",
                    line=start,
                    row_id=row_id,
                )
            rows.append(record)
            lines.append(start)
    except csv.Error as exc:
        raise DataError.at(owner, source, f"malformed CSV: {exc}", line=reader.line_num) from exc
    if header is None:
        raise DataError.at(owner, source, "empty file; expected a header line")
    table = CsvTable(owner, source, header, rows, lines)
    if id_column is not None:
        table.check_ids(id_column)
    return table


def parse_features(table: CsvTable, schema: TableSchema) -> FeatureTable:
    """Validate a feature table against its schema and type its columns."""
    if table.ids is None:
        table.check_ids(schema.id_column)
    if schema.label_column is not None and schema.label_column not in table.header:
        raise table.error(f"declared the label column in schema.json but not in the header {table.header}",
                          column=schema.label_column)  # fmt: skip
    # The label column is never a feature, whichever site declares it (see TableSchema).
    names = [name for name in table.header if name not in (schema.id_column, schema.label_column)]
    if not names:
        kept = f"the ID column {schema.id_column!r}"
        if schema.label_column is not None:
            kept += f" and the label column {schema.label_column!r}"
        raise table.error(f"no feature columns; the header has only {kept}")
    if not table.rows:
        raise table.error("no data rows")
    for name in schema.categorical_columns:
        if name not in names:
            raise table.error(f"declared categorical in schema.json but not in the header {table.header}", column=name)
    columns: dict[str, np.ndarray] = {}
    for name in names:
        if name in schema.categorical_columns:
            values = table.column(name)
            for row, value in enumerate(values):
                if value == "":
                    raise table.error("empty value in a categorical column", row=row, column=name)
            columns[name] = np.array(values, dtype=object)
        else:
            columns[name] = table.floats(name, hint=_CATEGORICAL_HINT)
    return FeatureTable(table, columns, [name for name in names if name in schema.categorical_columns])


def check_same_columns(train: CsvTable, test: CsvTable) -> None:
    """Test rows go through the preprocessing fitted on train, so both need the same columns (any order)."""
    missing = [name for name in train.header if name not in test.header]
    extra = [name for name in test.header if name not in train.header]
    if missing or extra:
        raise test.error(f"columns differ from {train.source}: missing {missing}, extra {extra}")


def check_disjoint(train: CsvTable, test: CsvTable) -> None:
    """A row in both tables would leak test data into training. Both tables must have their IDs checked."""
    assert train.ids is not None and test.ids is not None
    test_rows = {row_id: row for row, row_id in enumerate(test.ids)}
    for row, row_id in enumerate(train.ids):
        if row_id in test_rows:
            raise test.error(
                f"ID also in the training table {train.source} line {train.lines[row]}", row=test_rows[row_id]
            )


def parse_labels(table: CsvTable, spec: LabelSpec, declared_in: str = LABELS_FILE) -> np.ndarray:
    """int64 labels of a label file (ID column + label column, nothing else), range-checked when C is known.

    `declared_in` names the file num_classes came from, for the range message."""
    if table.ids is None:
        table.check_ids(spec.id_column)
    extra = [name for name in table.header if name not in (spec.id_column, spec.label_column)]
    if extra:
        raise table.error(f"unexpected columns {extra}; a label file has only {[spec.id_column, spec.label_column]}")
    return _label_values(table, spec, declared_in)


def parse_column_labels(table: CsvTable, spec: LabelSpec, every_row: bool) -> tuple[CsvTable, np.ndarray]:
    """The labeled rows of a site table and their int64 labels, read from its label column.

    An empty cell marks an unlabeled training row (features but no label); with `every_row` (test
    tables, which are scored) it is an error. Validation is that of a label file."""
    if table.ids is None:
        table.check_ids(spec.id_column)
    values = table.column(spec.label_column)
    if every_row:
        for row, value in enumerate(values):
            if value == "":
                raise table.error("empty label; every test row needs a label", row=row, column=spec.label_column)
    labeled = table.subset([row for row, value in enumerate(values) if value != ""])
    if table.rows and not labeled.rows:
        raise table.error("no labeled rows: every cell of the label column is empty", column=spec.label_column)
    return labeled, _label_values(labeled, spec, SCHEMA_FILE)


def _label_values(table: CsvTable, spec: LabelSpec, declared_in: str) -> np.ndarray:
    if not table.rows:
        raise table.error("no data rows")
    labels = table.integers(spec.label_column, what="label")
    if spec.num_classes is not None:
        check_label_range(table, labels, spec.num_classes, spec.label_column, f"from {declared_in}")
    return labels


def check_label_range(table: CsvTable, labels: np.ndarray, num_classes: int, column: str, why: str) -> None:
    """Labels index the classifier's outputs, so each must lie in 0..C-1."""
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if bad.size:
        row = int(bad[0])
        raise table.error(
            f"label {int(labels[row])} outside 0..{num_classes - 1} (C = {num_classes} {why})", row=row, column=column
        )


def _check_header(owner: str, source: str, header: list[str], line: int) -> None:
    for position, name in enumerate(header, start=1):
        if name == "":
            raise DataError.at(owner, source, f"empty column name at position {position} of the header", line=line)
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise DataError.at(owner, source, f"duplicate column names {duplicates} in the header", line=line)


def _field(record: list[str], header: list[str], name: str | None) -> str | None:
    if name is None or name not in header:
        return None
    position = header.index(name)
    return record[position] if position < len(record) else None
