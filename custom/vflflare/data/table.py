"""Reading a party's CSV tables into validated columns.

CSV is parsed with the standard `csv` module rather than pandas so that every row keeps the line
it started on (header = line 1): a bad cell is then reported as "line 18 (id '4411'), column
'PAY_0'", which is what a site operator needs to fix it. Values are kept exactly as written:
no row is dropped, no string is stripped, and a missing cell is filled only as the site's schema.json
says (counted in the data checks) or is an error.

A site's feature tables can be large (a million rows of 50 columns is 50 million cells, gigabytes as
Python strings), so they are read with a `ColumnPlan`: chunk by chunk, numeric columns go straight
to float64 and only the text columns (ID, categories, labels) stay strings. A bad numeric cell is
remembered as its row and text, so the message is the one a table of strings would give, and it is
raised at the same point: when the column is asked for as numbers. A missing numeric cell (empty, NA,
NaN, ...: MISSING_NUMBERS) is read as NaN and its first row remembered: the site's schema.json `missing`
policy decides whether it is filled (preprocess.py) or an error. Small files (labels, source
datasets) are read without a plan and keep every cell as text.
"""

from __future__ import annotations

import csv
import math
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vflflare.data.errors import VALUE, DataError
from vflflare.data.schema import LABELS_FILE, SCHEMA_FILE, LabelSpec, TableSchema
from vflflare.data.strings import StringColumn

_CATEGORICAL_HINT = " (if the column is categorical, list it in schema.json 'categorical_columns')"
_MISSING_HINT = "; schema.json 'missing' can fill missing cells instead (see docs: data format)"
MISSING_NUMBERS = frozenset({"", "na", "n/a", "nan", "null", "none"})  # after strip(), any case
MISSING_CATEGORY = "(missing)"  # the category an empty categorical cell becomes under missing.categorical: category
CHUNK_ROWS = 8192  # rows held as strings at a time when reading with a ColumnPlan


@dataclass(frozen=True)
class ColumnPlan:
    """Which columns of a CSV file to keep, and how: `text` columns as str; every other column as
    float64 when `numbers`, else not at all. `skip` columns are never kept."""

    text: frozenset[str] = frozenset()
    numbers: bool = True
    skip: frozenset[str] = frozenset()

    @classmethod
    def features(cls, schema: TableSchema) -> ColumnPlan:
        """A site's train/test table: ID and categorical columns as text, the label column (never a
        feature, read separately by the label owner) not at all, every other column as numbers."""
        text = frozenset({schema.id_column, *schema.categorical_columns})
        skip = frozenset({schema.label_column} - text - {None})
        return cls(text=text, numbers=True, skip=skip)

    @classmethod
    def only(cls, names: Collection[str]) -> ColumnPlan:
        """Just these columns, as text (e.g. the ID and label columns of a site's own table)."""
        return cls(text=frozenset(names), numbers=False)

    def kind(self, name: str) -> str | None:
        if name in self.text:
            return "text"
        return "number" if self.numbers and name not in self.skip else None


@dataclass
class NumberColumn:
    """A column parsed as float64 while reading, NaN where a cell is missing. `bad`: the first cell (row,
    text) that is non-numeric or infinite; the column then has no usable values and asking for them raises
    the error that cell gives (CsvTable.floats). `missing`: the first missing cell (row, text)."""

    values: np.ndarray
    bad: tuple[int, str] | None = None
    missing: tuple[int, str] | None = None


@dataclass(frozen=True)
class LazyNumbers:
    """A numeric column left in its file until asked for (a Parquet column: read again on each use, so a
    large table's float64 columns need never be in memory together)."""

    read: Callable[[], NumberColumn]


@dataclass
class CsvTable:
    """Header and rows of one CSV file, each row with the line it starts on.

    Read without a plan, `rows` holds every cell as text. Read with a ColumnPlan, `rows` is empty and
    the kept columns are stored column-wise (text as list[str], numbers as NumberColumn)."""

    owner: str
    source: str
    header: list[str]
    rows: list[list[str]]
    lines: Sequence[int]
    ids: Sequence[str] | None = None  # a list, or a StringColumn (read through Arrow)
    _columns: dict[str, Sequence[str] | NumberColumn] | None = field(default=None, repr=False)
    unit: str = "line"  # what `lines` counts: "row" in a Parquet file, which has no lines
    _last: tuple[str, NumberColumn] | None = field(default=None, repr=False)  # the LazyNumbers column last read

    @property
    def num_rows(self) -> int:
        return len(self.lines)

    def error(
        self, problem: str, *, row: int | None = None, column: str | None = None, value: object = None
    ) -> DataError:
        """A DataError pointing at a row (index into the table) and/or column of this file; `value` fills
        the problem's `{value}` (DataError.at)."""
        line = self.lines[row] if row is not None else None
        row_id = self.ids[row] if row is not None and self.ids is not None else None
        return DataError.at(
            self.owner, self.source, problem, line=line, row_id=row_id, column=column, value=value, unit=self.unit
        )

    def _stored(self, name: str) -> Sequence[str] | NumberColumn:
        if name not in self.header:
            raise self.error(f"missing column {name!r}; the header has {VALUE}", value=self.header)
        if self._columns is None:  # read without a plan: transpose the rows once
            transposed = list(zip(*self.rows)) if self.rows else [() for _ in self.header]
            self._columns = dict(zip(self.header, transposed))
        if name not in self._columns:  # a caller bug, not bad data
            raise KeyError(f"{self.source}: column {name!r} was not kept when reading the file")
        stored = self._columns[name]
        if isinstance(stored, LazyNumbers):  # one column at a time: a loop over columns reads each once
            if self._last is None or self._last[0] != name:
                self._last = None
                self._last = (name, stored.read())
            return self._last[1]
        return stored

    def column(self, name: str) -> Sequence[str]:
        values = self._stored(name)
        if isinstance(values, NumberColumn):  # a caller bug: its text was not kept
            raise TypeError(f"{self.source}: column {name!r} was read as numbers; its text was not kept")
        return values

    def release(self, name: str) -> None:
        """Forget a column's values once they have been used, so their memory can go. A table read
        without a plan keeps its rows, so there is nothing to gain and the column stays readable."""
        if self._columns is not None and not self.rows:
            self._columns.pop(name, None)
            if self._last is not None and self._last[0] == name:
                self._last = None

    def check_ids(self, id_column: str) -> None:
        """Fill `ids` from `id_column`, which must exist, be non-empty and unique (rows are joined by it)."""
        if id_column not in self.header:
            raise self.error(f"missing ID column {id_column!r}; the header has {VALUE}", value=self.header)
        values = self.column(id_column)
        if isinstance(values, StringColumn) and values.distinct_and_non_empty():
            self.ids = values
            return
        seen: set[str] = set()  # not a dict to the first row: less memory on large tables; found again on error
        for row, value in enumerate(values):
            if value == "":
                raise self.error("empty ID", row=row, column=id_column)
            if value in seen:
                first = list(values).index(value)
                raise DataError.at(
                    self.owner,
                    self.source,
                    f"duplicate ID {VALUE}, first seen on {self.unit} {self.lines[first]}",
                    line=self.lines[row],
                    row_id=value,
                    column=id_column,
                    value=repr(value),
                    unit=self.unit,
                )
            seen.add(value)
        self.ids = values if isinstance(values, (list, StringColumn)) else list(values)

    def subset(self, rows: Sequence[int]) -> CsvTable:
        """The same file restricted to some rows, each keeping its line and ID for messages."""
        ids = [self.ids[row] for row in rows] if self.ids is not None else None
        lines_kept = [self.lines[row] for row in rows]
        if self._columns is None or self.rows:
            rows_kept = [self.rows[row] for row in rows]
            return CsvTable(self.owner, self.source, self.header, rows_kept, lines_kept, ids, unit=self.unit)
        columns: dict[str, Sequence[str] | NumberColumn] = {}
        for name, values in self._columns.items():
            if isinstance(values, (NumberColumn, LazyNumbers)):  # not needed so far: subsets are of label tables
                raise TypeError(f"{self.source}: subset of column {name!r}, which was read as numbers")
            columns[name] = [values[row] for row in rows]
        return CsvTable(self.owner, self.source, self.header, [], lines_kept, ids, columns, self.unit)

    def floats(self, name: str, hint: str = "", missing_ok: bool = False) -> np.ndarray:
        """float64 values of a numeric column; non-numeric and infinite cells are errors, and so are missing
        ones unless `missing_ok` (then NaN)."""
        stored = self._stored(name)
        column = stored if isinstance(stored, NumberColumn) else parse_numbers(stored)
        problems = [
            (cell, hint)
            for cell, hint in ((column.bad, hint), (None if missing_ok else column.missing, _MISSING_HINT))
            if cell is not None
        ]
        if problems:  # the first in row order
            (row, text), problem_hint = min(problems, key=lambda problem: problem[0][0])
            raise self.error(_number_problem(text, problem_hint), row=row, column=name, value=repr(text))
        return column.values

    def integers(self, name: str, what: str = "value") -> np.ndarray:
        """int64 values of a column; anything `int()` rejects (including '1.0') is an error."""
        values = self.column(name)
        parsed = np.empty(len(values), dtype=np.int64)
        for row, text in enumerate(values):
            try:
                parsed[row] = int(text)
            except (ValueError, OverflowError):
                raise self.error(f"non-integer {what} {VALUE}", row=row, column=name, value=repr(text)) from None
        return parsed


def parse_numbers(texts: Sequence[str]) -> NumberColumn:
    """float64 values of `texts` (NaN where missing), or the first cell that is neither a finite number nor
    missing. numpy parses the whole sequence at once (as Python's float() does); only a sequence it
    rejects is gone through cell by cell."""
    try:
        array_ = np.array(texts, dtype=np.float64)
    except ValueError:
        array_ = None
    if array_ is not None and np.isfinite(array_).all():
        return NumberColumn(array_)
    parsed = np.empty(len(texts), dtype=np.float64)
    missing = None
    for row, text in enumerate(texts):
        if text.strip().lower() in MISSING_NUMBERS:
            parsed[row] = np.nan
            missing = missing or (row, text)
            continue
        number = _finite_float(text)
        if number is None:
            return NumberColumn(parsed[:row], bad=(row, text), missing=missing)
        parsed[row] = number
    return NumberColumn(parsed, missing=missing)


def _finite_float(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _number_problem(text: str, hint: str) -> str:
    """What is wrong with a cell of a numeric column, as the error says it."""
    if text.strip() == "":
        return f"empty value in a numeric column{hint}"
    try:
        number = float(text)
    except ValueError:
        return f"non-numeric value {VALUE}{hint}"
    if math.isnan(number) or text.strip().lower() in MISSING_NUMBERS:
        return f"missing value {VALUE}{hint}"
    return f"infinite value {VALUE}"


class _Numbers:
    """One numeric column of a file read with a ColumnPlan, parsed a chunk at a time into one buffer.

    The buffer is sized from the file's line count, an upper bound on its rows, so each chunk is copied
    in once and freed at once. (Chunks kept in a list and concatenated at the end would leave the freed
    chunks, interleaved across columns, in the heap as a second copy of the table's numbers.)"""

    def __init__(self, capacity: int) -> None:
        self.buffer = np.empty(capacity, dtype=np.float64)
        self.size = 0
        self.bad: tuple[int, str] | None = None
        self.missing: tuple[int, str] | None = None

    def add(self, texts: Sequence[str]) -> None:
        if self.bad is not None:  # after a bad cell the column is an error; its values are not needed
            self.size += len(texts)
            return
        parsed = parse_numbers(texts)
        if parsed.missing is not None and self.missing is None:
            self.missing = (self.size + parsed.missing[0], parsed.missing[1])
        if parsed.bad is not None:
            row, text = parsed.bad
            self.bad, self.buffer = (self.size + row, text), np.empty(0, dtype=np.float64)
            self.size += len(texts)
            return
        end = self.size + len(texts)
        if end > len(self.buffer):  # more rows than expected (no line count given): grow by doubling
            grown = np.empty(max(end, 2 * len(self.buffer)), dtype=np.float64)
            grown[: self.size] = self.buffer[: self.size]
            self.buffer = grown
        self.buffer[self.size : end] = parsed.values
        self.size = end

    def finish(self) -> NumberColumn:
        values = self.buffer[: self.size] if self.bad is None else self.buffer
        return NumberColumn(values, self.bad, self.missing)


class _ColumnStore:
    """The columns of a file read with a ColumnPlan, filled one chunk of rows at a time."""

    def __init__(self, header: list[str], plan: ColumnPlan, capacity: int) -> None:
        kinds = [plan.kind(name) for name in header]
        self.header = header
        self.text: dict[int, list[str]] = {i: [] for i, kind in enumerate(kinds) if kind == "text"}
        self.numbers = {i: _Numbers(capacity) for i, kind in enumerate(kinds) if kind == "number"}

    def add(self, rows: list[list[str]]) -> None:
        if not rows:
            return
        for position, values in enumerate(zip(*rows)):
            if position in self.text:
                self.text[position].extend(values)
            elif position in self.numbers:
                self.numbers[position].add(values)

    def finish(self) -> dict[str, Sequence[str] | NumberColumn]:
        columns: dict[str, Sequence[str] | NumberColumn] = {}
        for position, name in enumerate(self.header):
            if position in self.text:
                columns[name] = self.text[position]
            elif position in self.numbers:
                columns[name] = self.numbers[position].finish()
        return columns


class FeatureColumns(Mapping[str, np.ndarray]):
    """A feature table's columns in file order: the categorical ones held, the numeric ones (validated
    already) taken from the file's table when asked for, so a column left in its file (LazyNumbers) is
    read only while it is used."""

    def __init__(self, table: CsvTable, names: list[str], held: dict[str, np.ndarray], missing_ok: bool) -> None:
        self._table, self._names, self._held, self._missing_ok = table, list(names), held, missing_ok

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._held:
            return self._held[name]
        if name not in self._names:
            raise KeyError(name)
        return self._table.floats(name, missing_ok=self._missing_ok)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def pop(self, name: str, default: object = None) -> object:
        if name not in self._names:
            return default
        self._names.remove(name)
        return self._held.pop(name, default)


@dataclass
class FeatureTable:
    """A site's validated feature table before preprocessing.

    columns: feature columns in file order (ID excluded); float64 arrays for numeric columns,
    object arrays of str for categorical ones.
    """

    csv: CsvTable
    columns: Mapping[str, np.ndarray]
    categorical: list[str]

    @property
    def ids(self) -> Sequence[str]:
        assert self.csv.ids is not None
        return self.csv.ids

    def release(self, name: str) -> None:
        """Drop a column once preprocessed: here and in the CSV table, the two places that hold it."""
        self.columns.pop(name, None)  # type: ignore[attr-defined]
        self.csv.release(name)


def read_csv(
    owner: str, path: Path, id_column: str | None = None, preamble: int = 0, plan: ColumnPlan | None = None
) -> CsvTable:
    """Read a CSV file; with `id_column`, also validate its IDs. `preamble` lines before the header are
    skipped. `plan`: keep the columns column-wise as it says (large tables) rather than every cell as text."""
    if not path.is_file():
        raise DataError.at(owner, path, "file not found")
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            return parse_csv(
                owner,
                str(path),
                handle,
                id_column,
                preamble,
                plan,
                expected_rows=_line_bound(path) if plan is not None else None,
            )
    except UnicodeDecodeError as exc:
        raise DataError.at(owner, path, f"not UTF-8 text: {exc}") from exc


def _line_bound(path: Path) -> int:
    """At least the number of rows of a CSV file: a row ends at a line break (\\n, \\r\\n or \\r) or at
    the end of the file. Counted on the bytes, in 1 MiB blocks: cheap next to parsing."""
    breaks = 1
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            breaks += block.count(b"\n") + block.count(b"\r")
    return breaks


def parse_csv(
    owner: str,
    source: str,
    text_lines: Iterable[str],
    id_column: str | None = None,
    preamble: int = 0,
    plan: ColumnPlan | None = None,
    expected_rows: int | None = None,
) -> CsvTable:
    """Parse CSV text whose first non-blank line after `preamble` lines is the header. Blank lines hold
    no values and are skipped; every other row must have as many fields as the header.

    With a `plan`, rows are turned into columns every CHUNK_ROWS rows, so only one chunk of them exists
    as strings at a time (the ID column is always kept as text). `expected_rows`: an upper bound on the
    rows, to size the numeric columns once (read_csv counts the file's lines)."""
    if plan is not None and id_column is not None:
        plan = ColumnPlan(plan.text | {id_column}, plan.numbers, plan.skip - {id_column})
    reader = csv.reader(text_lines)
    header: list[str] | None = None
    store: _ColumnStore | None = None
    rows: list[list[str]] = []
    lines = array("q") if plan is not None else []  # 8 bytes a row rather than a Python int's 36
    previous_end = 0
    try:
        for record in reader:
            start, previous_end = previous_end + 1, reader.line_num
            if not record or start <= preamble:
                continue
            if header is None:
                header = record
                check_header(owner, source, header, start)
                store = _ColumnStore(header, plan, expected_rows or CHUNK_ROWS) if plan is not None else None
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
            if store is not None and len(rows) == CHUNK_ROWS:
                store.add(rows)
                rows = []
    except csv.Error as exc:
        raise DataError.at(owner, source, f"malformed CSV: {exc}", line=reader.line_num) from exc
    if header is None:
        raise DataError.at(owner, source, "empty file; expected a header line")
    if store is None:
        table = CsvTable(owner, source, header, rows, lines)
    else:
        store.add(rows)
        table = CsvTable(owner, source, header, [], lines, None, store.finish())
    if id_column is not None:
        table.check_ids(id_column)
    return table


def parse_features(table: CsvTable, schema: TableSchema) -> FeatureTable:
    """Validate a feature table against its schema and type its columns."""
    if table.ids is None:
        table.check_ids(schema.id_column)
    if schema.label_column is not None and schema.label_column not in table.header:
        raise table.error(f"declared the label column in schema.json but not in the header {VALUE}", value=table.header,
                          column=schema.label_column)  # fmt: skip
    # The label column is never a feature, whichever site declares it (see TableSchema).
    names = [name for name in table.header if name not in (schema.id_column, schema.label_column)]
    if not names:
        kept = f"the ID column {schema.id_column!r}"
        if schema.label_column is not None:
            kept += f" and the label column {schema.label_column!r}"
        raise table.error(f"no feature columns; the header has only {kept}")
    if not table.num_rows:
        raise table.error("no data rows")
    for name in schema.categorical_columns:
        if name not in names:
            raise table.error(
                f"declared categorical in schema.json but not in the header {VALUE}", column=name, value=table.header
            )
    categorical: dict[str, np.ndarray] = {}
    fill_categories, missing_ok = schema.missing.categorical != "error", schema.missing.numeric != "error"
    for name in names:
        if name in schema.categorical_columns:
            values = np.array(table.column(name), dtype=object)
            empty = np.flatnonzero(values == "")
            if len(empty) and not fill_categories:
                raise table.error(f"empty value in a categorical column{_MISSING_HINT}", row=int(empty[0]), column=name)
            values[empty] = MISSING_CATEGORY
            categorical[name] = values
        else:
            table.floats(name, hint=_CATEGORICAL_HINT, missing_ok=missing_ok)  # the error, if any, now
    columns = FeatureColumns(table, names, categorical, missing_ok)
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
    if isinstance(train.ids, StringColumn) and isinstance(test.ids, StringColumn) and train.ids.disjoint(test.ids):
        return
    test_rows = {row_id: row for row, row_id in enumerate(test.ids)}
    for row, row_id in enumerate(train.ids):
        if row_id in test_rows:
            raise test.error(
                f"ID also in the training table {train.source} {train.unit} {train.lines[row]}", row=test_rows[row_id]
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
    if table.num_rows and not labeled.num_rows:
        raise table.error("no labeled rows: every cell of the label column is empty", column=spec.label_column)
    return labeled, _label_values(labeled, spec, SCHEMA_FILE)


def _label_values(table: CsvTable, spec: LabelSpec, declared_in: str) -> np.ndarray:
    if not table.num_rows:
        raise table.error("no data rows")
    if spec.classes is not None:  # the user's values, mapped to class ids by their place in "classes"
        return class_ids(table, spec, declared_in)
    labels = table.integers(spec.label_column, what="label")
    if spec.num_classes is not None:
        check_label_range(table, labels, spec.num_classes, spec.label_column, f"from {declared_in}")
    return labels


def class_ids(table: CsvTable, spec: LabelSpec, declared_in: str) -> np.ndarray:
    """int64 class ids of the label column's values by `spec.classes` (class id = position); a value not in
    it is an error naming the file, the row and the value."""
    assert spec.classes is not None
    index = {name: c for c, name in enumerate(spec.classes)}
    values = table.column(spec.label_column)
    labels = np.empty(len(values), dtype=np.int64)
    for row, text in enumerate(values):
        if text not in index:
            raise table.error(
                f"label {VALUE} is not one of the classes {list(spec.classes)} that {declared_in} "
                f'declares ("classes", class id = position); add it there or fix the value',
                row=row,
                column=spec.label_column,
                value=repr(text),
            )
        labels[row] = index[text]
    return labels


def class_counts(labels: np.ndarray) -> dict[int, int]:
    """Rows per label value, in label order: what a message about the classes shows."""
    values, counts = np.unique(labels, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


def check_label_range(table: CsvTable, labels: np.ndarray, num_classes: int, column: str, why: str) -> None:
    """Labels index the classifier's outputs, so each must lie in 0..C-1. The message gives the file's rows
    per class, so that the user sees how many classes the labels imply."""
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if bad.size:
        row = int(bad[0])
        raise table.error(
            f"label {int(labels[row])} outside 0..{num_classes - 1} (C = {num_classes} {why}); rows per class in this "
            f"file: {class_counts(labels)}",
            row=row,
            column=column,
        )


def check_header(owner: str, source: str, header: list[str], line: int | None) -> None:
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
