"""Reading a party's tables through Arrow: CSV (pyarrow.csv) and Parquet (pyarrow.parquet).

Both give the `CsvTable` the Python reader (table.py) gives, so every check downstream is the same and
names the same file, line and column. Parquet has no lines: its rows are numbered from 1 and messages say
"row N" instead.

CSV takes Arrow's streaming reader only where it provably reads what the Python reader reads:
- the file is one record per line under its header (no blank line, no line break inside a quoted value),
  so row i is on line i + 2: the line breaks read are counted and checked against the rows read;
- a number is what Arrow's float parser accepts. Arrow accepts a subset of what Python's float() does,
  and both round correctly, so the numbers are identical. A column holding a cell Arrow rejects (a typo, a
  missing-value marker it does not know, "1_000"), or a value that is missing or not finite, is read
  again as text and parsed by `parse_numbers`, which finds the same first bad or missing cell as before;
- anything else Arrow refuses (a row with too few fields, a bad quote, bytes that are not UTF-8) sends the
  whole file to the Python reader, whose error names the line.
A large file is cut at line starts into one span per core, each read by its own streaming reader (one
reader parses on one core). A quoted value could hold a line break where the file was cut, so a file with
a quote character in its rows is read again by a single reader. The numeric columns go to a temporary
file as they are parsed (spill.py) and are read back one at a time, as a Parquet file's are.
"""

from __future__ import annotations

import csv
import io
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from vflflare.data.errors import VALUE, DataError
from vflflare.data.spill import SpilledColumns
from vflflare.data.strings import StringColumn
from vflflare.data.table import (
    MISSING_NUMBERS,
    ColumnPlan,
    CsvTable,
    LazyNumbers,
    NumberColumn,
    check_header,
    parse_numbers,
    read_csv,
)

PARQUET_SUFFIX = ".parquet"
_MAX_TEXT_RETRIES = 8  # numeric columns found to need Python's parsing one Arrow pass at a time; then Python
_GROUP_BYTES = 8 << 20  # Parquet: numeric columns read at once (as float64): 1 at 1M rows, 16 at 62.5k
_BLOCK_BYTES = 1 << 20  # measured at 1M x 50: 1 MiB blocks read as fast as 16 MiB ones, in half the memory
_SPAN_BYTES = 32 << 20  # a CSV file is read in spans of at least this many bytes, one per core
_FAILED_COLUMN = re.compile(r"In CSV column #(\d+)")
# Arrow matches null markers exactly; these cover the common spellings of MISSING_NUMBERS. A cell it does
# not list (" NA") fails conversion instead and its column is parsed by Python, which strips and folds case.
_NULL_MARKERS = sorted({form for word in MISSING_NUMBERS if word for form in (word, word.upper(), word.title())})


def parquet_twin(path: Path) -> Path:
    return path.with_suffix(PARQUET_SUFFIX)


def table_path(owner: str, folder: Path, name: str) -> Path:
    """`folder/name` (a .csv file name) or its Parquet twin, whichever exists; the CSV path when neither
    does, so that "file not found" names the usual file. Both at once is an error: reading one would
    silently ignore the other."""
    path = folder / name
    twin = parquet_twin(path)
    if twin.is_file():
        if path.is_file():
            raise DataError.at(owner, folder, f"both {name} and {twin.name}: keep one of them")
        return twin
    return path


def read_table(owner: str, path: Path, id_column: str | None = None, plan: ColumnPlan | None = None) -> CsvTable:
    """Read a table file, CSV or Parquet by its suffix. Without a plan every cell is kept as text (small
    files: labels); with one, as the plan says (table.py, ColumnPlan)."""
    if path.suffix == PARQUET_SUFFIX:
        table = _read_parquet(owner, path, plan)
    else:
        fast = _read_csv_arrow(owner, path, plan) if plan is not None and path.is_file() else None
        if fast is None:
            return read_csv(owner, path, id_column, plan=plan)
        table = fast
    if id_column is not None:
        table.check_ids(id_column)
    return table


def _kinds(header: list[str], plan: ColumnPlan | None) -> dict[str, str]:
    """Column -> "text" or "number", for the columns kept; without a plan every column is text."""
    if plan is None:
        return dict.fromkeys(header, "text")
    return {name: kind for name in header if (kind := plan.kind(name)) is not None}


# ---------------------------------------------------------------------------------------------- CSV
def _read_csv_arrow(owner: str, path: Path, plan: ColumnPlan) -> CsvTable | None:
    """The table Arrow reads, or None where only the Python reader gives the right answer or message."""
    header = _first_line_fields(path)
    if not header:
        return None
    check_header(owner, str(path), header, 1)
    kinds = _kinds(header, plan)
    as_text = {name for name, kind in kinds.items() if kind == "text"}
    spans = _spans(path)
    for _ in range(_MAX_TEXT_RETRIES):
        try:
            read = _read_spans(path, spans, header, kinds, as_text)
        except pa.ArrowInvalid as exc:
            failed = _FAILED_COLUMN.search(str(exc))
            name = header[int(failed.group(1))] if failed and int(failed.group(1)) < len(header) else None
            if name is None or kinds.get(name) != "number" or name in as_text:
                return None  # not a cell Python parses differently: the Python reader says what is wrong
            as_text.add(name)
            continue
        except _QuotedSpans:  # a quoted value may hold a line break where the file was cut: one reader
            spans = [(0, path.stat().st_size)]
            continue
        except _LinesDiffer:  # a blank line or a line break inside a value: lines are not rows + 2
            return None
        break
    else:
        return None
    text, flagged = read.text, read.numbers.flagged
    if flagged:  # a missing or non-finite value: Python's parsing finds and keeps its row and text
        text.update(_read_spans(path, spans, header, dict.fromkeys(flagged, "text"), set(flagged)).text)
    parsed: dict[str, StringColumn | NumberColumn | LazyNumbers] = {}
    for name, kind in kinds.items():
        if kind == "text":
            parsed[name] = StringColumn(text[name])
        elif name in text:
            parsed[name] = parse_numbers(text[name].to_pylist())
        else:
            parsed[name] = LazyNumbers(partial(_spilled_numbers, read.numbers, name))
    return CsvTable(owner, str(path), header, [], range(2, read.rows + 2), None, parsed)


class _LinesDiffer(Exception):
    pass


class _QuotedSpans(Exception):
    pass


@dataclass
class _CsvRead:
    rows: int
    text: dict[str, pa.ChunkedArray]  # the columns read as text
    numbers: SpilledColumns  # the others, as float64


def _spans(path: Path) -> list[tuple[int, int]]:
    """Byte ranges of the file read at once, one per core for a large file: Arrow's streaming reader parses
    on one. The first starts at 0 (the header, skipped), or after the header line when the rows are cut
    into several ranges at line starts."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        start = len(handle.readline())
        parts = max(1, min(_cores(), (size - start) // _SPAN_BYTES))
        if parts == 1:
            return [(0, size)]
        bounds = [start]
        for k in range(1, parts):
            handle.seek(start + (size - start) * k // parts)
            handle.readline()
            bounds.append(handle.tell())
    bounds.append(size)
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _read_spans(
    path: Path, spans: list[tuple[int, int]], header: list[str], kinds: dict[str, str], as_text: set[str]
) -> _CsvRead:
    """The kept columns, `as_text` ones as text and the others as float64 in a temporary file, each span read
    by its own streaming reader (1 MiB blocks: Arrow's own memory stays a few MB). Rows are lines: the line
    breaks seen are counted, and a quote seen with several spans may hide one."""
    numbers = SpilledColumns([name for name in kinds if name not in as_text])
    stop = threading.Event()

    def read(part: int) -> tuple[int, _SpanFile, dict[str, list[pa.Array]]]:
        start, end = spans[part]
        text: dict[str, list[pa.Array]] = {name: [] for name in kinds if name in as_text}
        writer, rows = numbers.writer(part), 0
        with _SpanFile(path, start, end, note_quotes=len(spans) > 1) as source:
            reader = pa_csv.open_csv(
                source,
                read_options=pa_csv.ReadOptions(
                    column_names=header, skip_rows=1 if start == 0 else 0, block_size=_BLOCK_BYTES
                ),
                convert_options=pa_csv.ConvertOptions(
                    column_types={name: pa.string() if name in as_text else pa.float64() for name in kinds},
                    include_columns=list(kinds),
                    null_values=_NULL_MARKERS,
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
            try:
                for batch in reader:
                    if stop.is_set():
                        break
                    rows += batch.num_rows
                    for name, arrays in text.items():
                        arrays.append(batch.column(name))
                    writer.add([batch.column(name).to_numpy(zero_copy_only=False) for name in numbers.names])
            except BaseException:
                stop.set()
                raise
        writer.flush()
        return rows, source, text

    with ThreadPoolExecutor(len(spans)) as pool:
        parts = list(pool.map(read, range(len(spans))))
    pa.default_memory_pool().release_unused()
    if len(spans) > 1 and any(source.quoted for _, source, _ in parts):
        raise _QuotedSpans
    rows = sum(part_rows for part_rows, _, _ in parts)
    lines = sum(source.breaks for _, source, _ in parts) + (spans[0][0] > 0) + _unbroken_last_line(path)
    if rows != lines - 1:
        raise _LinesDiffer
    text = {name: pa.chunked_array([a for _, _, t in parts for a in t[name]], pa.string()) for name in parts[0][2]}
    return _CsvRead(rows, text, numbers)


class _SpanFile(io.RawIOBase):
    """Bytes [start, end) of a file, as Arrow asks for them, counting line breaks (and noting quotes). Each
    block is read into a buffer of Arrow's own pool: blocks are freed by other threads than the one that
    read them, and glibc's per-thread heaps kept about 80 MB of such blocks after a 1M-row load."""

    def __init__(self, path: Path, start: int, end: int, note_quotes: bool) -> None:
        self._handle = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by close())
        self._handle.seek(start)
        self._left = end - start
        self._note_quotes = note_quotes
        self._matches = np.empty(0, dtype=bool)
        self.breaks, self.quoted = 0, False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> pa.Buffer:
        size = self._left if size < 0 else min(size, self._left)
        block = pa.allocate_buffer(size)
        got = self._handle.readinto(memoryview(block)) or 0
        self._left -= got
        view = np.frombuffer(block, dtype=np.uint8, count=got)
        if len(self._matches) < got:
            self._matches = np.empty(got, dtype=bool)
        matches = self._matches[:got]
        self.breaks += int(np.count_nonzero(np.equal(view, ord("\n"), out=matches)))
        if self._note_quotes and not self.quoted:
            self.quoted = bool(np.equal(view, ord('"'), out=matches).any())
        return block if got == size else block.slice(0, got)

    def close(self) -> None:
        self._handle.close()
        super().close()


def _unbroken_last_line(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def _spilled_numbers(numbers: SpilledColumns, name: str) -> NumberColumn:
    return NumberColumn(numbers.column(name))


def _first_line_fields(path: Path) -> list[str] | None:
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            line = handle.readline()
    except UnicodeDecodeError:
        return None
    return next(csv.reader([line]), None) if line.strip() else None


# ------------------------------------------------------------------------------------------ Parquet
def _read_parquet(owner: str, path: Path, plan: ColumnPlan | None) -> CsvTable:
    """A Parquet file's kept columns: text ones read now, numeric ones whenever used (LazyNumbers). Numeric
    columns may be stored as numbers or text; a null is a missing cell, NaN too. Text columns take any
    type, written as Arrow casts it to text."""
    if not path.is_file():
        raise DataError.at(owner, path, "file not found")
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError.at(owner, path, f"not a readable Parquet file: {exc}") from exc
    header = parquet.schema_arrow.names
    check_header(owner, str(path), header, None)
    rows = parquet.metadata.num_rows
    kinds = _kinds(header, plan)
    groups = _ColumnGroups(parquet, [name for name, kind in kinds.items() if kind != "text"])
    columns: dict[str, StringColumn | NumberColumn] = {}
    for name, kind in kinds.items():
        if kind == "text":
            columns[name] = _parquet_text(owner, path, name, _parquet_column(parquet, name))
        else:  # read while used (table.py, LazyNumbers)
            columns[name] = LazyNumbers(partial(groups.numbers, name))
    return CsvTable(owner, str(path), header, [], range(1, rows + 1), None, columns, unit="row")


def _parquet_column(parquet: pq.ParquetFile, name: str) -> pa.ChunkedArray:
    return parquet.read(columns=[name], use_threads=False).column(0)  # one column: threads cost more than they give


class _ColumnGroups:
    """A Parquet file's numeric columns, read a group of neighbours at a time, each held as an Arrow array
    until it is asked for. One read of a wide file costs about 0.5 ms whatever the rows (1500 columns: most of
    loading 62.5k rows when each column was read alone). A group holds at most _GROUP_BYTES of values: larger
    reads grow Arrow's memory pool (at 1M x 50, peak over the float32 table: 1.65x one column a read, 1.8x with
    8 MB groups, 2.2x with 32 MB), so a tall table still reads few columns at a time."""

    def __init__(self, parquet: pq.ParquetFile, names: list[str]) -> None:
        self._parquet, self._names = parquet, names
        self._position = {name: i for i, name in enumerate(names)}
        self._width = max(1, _GROUP_BYTES // (8 * max(1, parquet.metadata.num_rows)))
        self._group: dict[str, pa.ChunkedArray] = {}

    def numbers(self, name: str) -> NumberColumn:
        if name not in self._group:
            start = self._position[name]
            names = self._names[start : start + self._width]
            self._group = {}
            table = self._parquet.read(columns=names, use_threads=False)
            self._group = dict(zip(names, table.columns))
        return _parquet_numbers(self._group.pop(name))  # held until asked for, not after


def _parquet_text(owner: str, path: Path, name: str, values: pa.ChunkedArray) -> StringColumn:
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        try:
            values = pc.cast(values, pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise DataError.at(
                owner, path, f"Parquet type {VALUE} cannot be read as text", column=name, value=values.type
            ) from exc
    return StringColumn(pc.fill_null(values, ""))  # a null is an empty cell, as in a CSV file


def _parquet_numbers(values: pa.ChunkedArray) -> NumberColumn:
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return parse_numbers(pc.fill_null(values, "").to_pylist())
    if pa.types.is_dictionary(values.type):
        return parse_numbers(pc.fill_null(pc.cast(values, pa.string()), "").to_pylist())
    try:
        array = np.require(pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False), requirements="W")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # dates, lists...: shown as text, which is an error
        return parse_numbers(pc.cast(values, pa.string(), safe=False).to_pylist())
    null = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None
    missing = np.flatnonzero(np.isnan(array) if null is None else np.isnan(array) | null)
    first_missing = (int(missing[0]), "" if null is not None and null[missing[0]] else "nan") if len(missing) else None
    infinite = np.flatnonzero(np.isinf(array))
    if len(infinite):  # as parse_numbers: the first bad cell, and a missing one only if it came before
        row = int(infinite[0])
        before = first_missing if first_missing is not None and first_missing[0] < row else None
        return NumberColumn(np.empty(0), bad=(row, str(float(array[row]))), missing=before)
    if null is not None:
        array[null] = np.nan
    return NumberColumn(array, missing=first_missing)
