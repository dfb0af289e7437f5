"""Large site tables are read column-wise in chunks of rows (data/table.py ColumnPlan) and preprocessed
column by column (Preprocessor.transform(release=True)); issue 10 item 10. Small chunks here put chunk
boundaries inside small tables: the values, the IDs and every bad-cell message must be those of the
plain all-text read."""

from __future__ import annotations

import io

import numpy as np
import pytest

from vflflare.data import table as table_module
from vflflare.data.errors import DataError
from vflflare.data.preprocess import Preprocessor
from vflflare.data.schema import MissingPolicy, TableSchema
from vflflare.data.table import ColumnPlan, parse_csv, parse_features

SCHEMA = TableSchema(categorical_columns=("city",))
STRICT = TableSchema(categorical_columns=("city",), missing=MissingPolicy("error", "error"))  # missing cells refused


def csv_text(rows: int, bad: dict[tuple[int, str], str] | None = None) -> str:
    """id, two numeric columns, one categorical; `bad` overrides cells by (data row, column)."""
    rng = np.random.default_rng(0)
    lines = ["id,a,city,b"]
    for row in range(rows):
        cells = {
            "id": f"r{row}",
            "a": repr(float(rng.normal())),
            "city": ["x", "y", "z"][row % 3],
            "b": repr(float(rng.normal() * 1e3)),
        }
        cells.update({column: value for (at, column), value in (bad or {}).items() if at == row})
        lines.append(",".join(cells[name] for name in ("id", "a", "city", "b")))
    return "\n".join(lines) + "\n"


def read(text: str, plan: ColumnPlan | None):
    return parse_csv("site 's'", "s/train.csv", io.StringIO(text), "id", plan=plan)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(table_module, "CHUNK_ROWS", 4)


def test_chunked_columns_equal_the_text_read(small_chunks):
    text = csv_text(11)
    plain, chunked = read(text, None), read(text, ColumnPlan.features(SCHEMA))
    assert chunked.rows == [] and chunked.num_rows == plain.num_rows == 11
    assert chunked.ids == plain.ids and list(chunked.lines) == list(plain.lines)
    for name in ("a", "b"):
        assert np.array_equal(chunked.floats(name), plain.floats(name))
    assert list(chunked.column("city")) == list(plain.column("city"))


@pytest.mark.parametrize(
    "value, problem",
    [
        ("", "empty value in a numeric column; schema.json 'missing' can fill"),
        ("abc", "non-numeric value 'abc'"),
        ("nan", "missing value 'nan'; schema.json 'missing' can fill"),
        ("-inf", "infinite value '-inf'"),
    ],
)
@pytest.mark.parametrize("row", [0, 3, 4, 9])  # first row, last of a chunk, first of the next, the last chunk
def test_bad_cell_in_any_chunk_names_its_line_id_and_column(small_chunks, value, problem, row):
    text = csv_text(10, {(row, "b"): value, (row + 1, "b"): "also bad"})  # the first bad cell is reported
    messages = []
    for plan in (None, ColumnPlan.features(STRICT)):
        with pytest.raises(DataError) as error:
            parse_features(read(text, plan), STRICT)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    assert messages[1].startswith(f"site 's': s/train.csv line {row + 2} (id 'r{row}'), column 'b': {problem}")


def test_duplicate_id_across_chunks_names_both_lines(small_chunks):
    text = csv_text(9).replace("\nr6,", "\nr1,")
    with pytest.raises(DataError, match=r"line 8 \(id 'r1'\), column 'id': duplicate ID 'r1', first seen on line 3"):
        read(text, ColumnPlan.features(SCHEMA))


def test_column_by_column_transform_gives_the_same_block(small_chunks):
    text = csv_text(13)
    reference = parse_features(read(text, None), SCHEMA)
    features = parse_features(read(text, ColumnPlan.features(SCHEMA)), SCHEMA)
    preprocessor = Preprocessor.fit(reference)
    expected = preprocessor.transform(reference)
    block = preprocessor.transform(features, release=True)
    assert block.numeric.flags.c_contiguous and block.numeric.dtype == np.float32
    assert np.array_equal(block.numeric, expected.numeric)
    assert features.columns == {}  # every column was dropped once transformed


def test_label_column_is_not_kept_with_the_features(small_chunks):
    text = csv_text(5).replace("id,a,city,b", "id,a,city,label")
    schema = TableSchema(categorical_columns=("city",), label_column="label")
    table = read(text, ColumnPlan.features(schema))
    assert set(parse_features(table, schema).columns) == {"a", "city"}
    with pytest.raises(KeyError, match="not kept"):
        table.column("label")


def test_missing_test_file_fails_before_train_is_parsed(split_root):
    """The train table is preprocessed before the test table is read (loading.py), but a missing
    test.csv is still reported at once, even when train.csv is bad too."""
    from vflflare.data.loading import DataRequest, load_site_tables

    train = split_root / "site-1" / "train.csv"
    lines = train.read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0] + ",abc"
    train.write_text("\n".join(lines) + "\n")
    (split_root / "site-1" / "test.csv").unlink()
    with pytest.raises(DataError, match="test.csv: file not found"):
        load_site_tables("site-1", DataRequest(["site-1", "site-2"], str(split_root)))
