"""Tables read through Arrow (data/columnar.py): the same columns, lines and errors as the Python reader,
Parquet beside CSV for every table, and a row number where Parquet has no lines."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vflflare import cli
from vflflare.data import columnar
from vflflare.data.errors import DataError
from vflflare.data.loading import DataRequest, load_label_tables, load_site_tables
from vflflare.data.preprocess import _RowMajorFill
from vflflare.data.strings import StringColumn, pick
from vflflare.data.table import ColumnPlan, LazyNumbers, NumberColumn, read_csv
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.topology import site_folders
from vflflare.registry import make_config

PLAN = ColumnPlan(text=frozenset({"id", "colour"}), numbers=True)
CELLS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["", "NA", "nan", " 1.5", "1_0", "inf", "-Infinity", "1e500", "abc", "NULL", "+.5", "1."]),
)


def _columns(table):
    out = {}
    for name, values in table._columns.items():
        values = values.read() if isinstance(values, LazyNumbers) else values
        if isinstance(values, NumberColumn):
            out[name] = (values.values.tolist() if values.bad is None else None, values.bad, values.missing)
        else:
            out[name] = list(values)
    return out


def _same_outcome(path, plan=PLAN):
    def read(reader):
        try:
            return reader(), None
        except DataError as error:
            return None, str(error)

    python, python_error = read(lambda: read_csv("site 'site-1'", path, "id", plan=plan))
    arrow, arrow_error = read(lambda: columnar.read_table("site 'site-1'", path, "id", plan=plan))
    assert arrow_error == python_error
    if python is not None:
        assert arrow.header == python.header and list(arrow.lines) == list(python.lines)
        assert arrow.ids == python.ids
        assert json.dumps(_columns(arrow)) == json.dumps(_columns(python))  # NaN-safe, exact floats


@pytest.fixture(params=["one reader", "spans"])
def spans(request, monkeypatch):
    """Arrow's path with one reader, or with every file of more than a few bytes cut into up to 3 spans."""
    if request.param == "spans":
        monkeypatch.setattr(columnar, "_SPAN_BYTES", 8)
        monkeypatch.setattr(columnar, "_cores", lambda: 3)
    return request.param


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(CELLS, CELLS), min_size=1, max_size=12))
def test_arrow_reads_what_the_python_reader_reads(tmp_path, spans, rows):
    lines = ["id,x,colour,y"] + [f"r{i},{a},c{i % 3},{b}" for i, (a, b) in enumerate(rows)]
    path = tmp_path / "train.csv"
    path.write_text("\n".join(lines) + "\n")
    _same_outcome(path)


@pytest.mark.parametrize(
    "text",
    [
        "id,x\n1,2\n\n2,3\n",  # a blank line: lines shift, so the Python reader reads it
        'id,x\n1,"2\n"\n',  # a line break inside a quoted value
        "id,x\n1,2\n2\n",  # too few fields
        "id,x\n1,2\n1,3\n",  # a duplicate ID
        "id,x,x\n1,2,3\n",  # a duplicate column name
        "id,x\n1,2",  # no line break at the end
        "\ufeffid,x\r\n1,2\r\n2,5\r\n",  # a byte-order mark and CRLF line ends
        "id,x\n1,NA\n2, nan \n",  # missing cells Arrow knows and one it does not
        'id,x\n"a,1",2\n"b\n2",3\n',  # quotes: a span could start inside a quoted line break
        'id,x\n"a",2\n"b",3\n"c",4\n"d",5\n',  # quotes, but no line break inside them
        "id,x\n1,2\n2,3\n3,4\n4,5\n5,6\n6,7\n7,8\n",  # cut into spans (with the fixture)
    ],
)
def test_edge_cases_give_the_python_readers_outcome(tmp_path, spans, text):
    path = tmp_path / "train.csv"
    path.write_text(text, newline="")
    _same_outcome(path, ColumnPlan(text=frozenset({"id"}), numbers=True))


def test_a_large_file_is_read_in_spans_and_its_numbers_from_a_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "train.csv"
    path.write_text("id,x,colour\n" + "".join(f"r{i},{i * 0.5},c{i % 2}\n" for i in range(3000)))
    monkeypatch.setattr(columnar, "_SPAN_BYTES", 10_000)
    monkeypatch.setattr(columnar, "_cores", lambda: 4)
    assert len(columnar._spans(path)) == 4
    open_files = len(os.listdir("/proc/self/fd"))
    readers = []
    monkeypatch.setattr(columnar, "_SpanFile", lambda *a, **k: readers.append(a) or _SPAN_FILE(*a, **k))
    table = columnar.read_table("site 'site-1'", path, "id", plan=PLAN)
    assert [start for _, start, _ in readers] == [start for start, _ in columnar._spans(path)]
    assert readers[0][1] == len("id,x,colour\n") and readers[-1][2] == path.stat().st_size
    assert isinstance(table._columns["x"], LazyNumbers)  # float64 left in the temporary file until used
    assert table.floats("x").tolist() == [i * 0.5 for i in range(3000)]
    assert table.ids == [f"r{i}" for i in range(3000)] and list(table.lines) == list(range(2, 3002))
    del table
    assert len(os.listdir("/proc/self/fd")) == open_files  # the temporary file went with the table
    path.write_text('id,x,colour\n"r0",1,c\n' + "".join(f"r{i},{i},c\n" for i in range(1, 3000)))
    readers.clear()  # a quote: spans first, then one reader from the start of the file
    assert columnar.read_table("site 'site-1'", path, "id", plan=PLAN).ids[0] == "r0"
    cut = len(columnar._spans(path))
    assert cut > 1 and len(readers) == cut + 1 and readers[-1][1:3] == (0, path.stat().st_size)


_SPAN_FILE = columnar._SpanFile


def test_a_clean_file_takes_arrows_path(tmp_path, monkeypatch):
    path = tmp_path / "train.csv"
    path.write_text("id,x,colour\n" + "".join(f"r{i},{i * 0.5},c{i % 2}\n" for i in range(1000)))
    monkeypatch.setattr(columnar, "read_csv", lambda *a, **k: pytest.fail("fell back to the Python reader"))
    table = columnar.read_table("site 'site-1'", path, "id", plan=PLAN)
    assert table.floats("x")[-1] == 499.5 and table.lines[-1] == 1001 and table.ids[0] == "r0"


def _site_folder(root, fmt):
    """site-1 with a numeric, a categorical and a text-typed numeric column, in CSV or Parquet."""
    folder = root / "site-1"
    folder.mkdir(parents=True)
    for name, ids in (("train", range(0, 40)), ("test", range(40, 60))):
        table = pa.table(
            {
                "id": [f"u{i:03d}" for i in ids],
                "age": [float(20 + (i * 7) % 50) for i in ids],
                "colour": [["red", "green", "blue"][i % 3] for i in ids],
                "score": [str(i % 9 - 4) for i in ids],
            }
        )
        if fmt == "csv":
            table.to_pandas().to_csv(folder / f"{name}.csv", index=False)
        else:
            pq.write_table(table, folder / f"{name}.parquet")
    (folder / "schema.json").write_text(json.dumps({"categorical_columns": ["colour"]}))
    return folder


def test_parquet_tables_load_as_their_csv_twins(tmp_path):
    blocks = {}
    for fmt in ("csv", "parquet"):
        _site_folder(tmp_path / fmt, fmt)
        tables = load_site_tables("site-1", DataRequest([], str(tmp_path / fmt)))
        blocks[fmt] = tables
    assert blocks["csv"].train_ids == blocks["parquet"].train_ids
    assert blocks["csv"].feature_names == blocks["parquet"].feature_names
    np.testing.assert_array_equal(blocks["csv"].train.numeric, blocks["parquet"].train.numeric)
    np.testing.assert_array_equal(blocks["csv"].test.numeric, blocks["parquet"].test.numeric)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_ids_are_held_compactly_and_read_as_strings(tmp_path, fmt):
    """Arrow keeps a large table's IDs (a third of a 1M x 50 float32 table as Python strings) in two
    buffers; code that uses them sees a sequence of str."""
    _site_folder(tmp_path, fmt)
    ids = load_site_tables("site-1", DataRequest([], str(tmp_path))).train_ids
    expected = [f"u{i:03d}" for i in range(40)]
    assert isinstance(ids, StringColumn) and ids == expected and list(ids) == expected
    assert (ids[0], ids[-1], len(ids)) == ("u000", "u039", 40)
    assert list(ids[3:6]) == expected[3:6] and list(ids[::10]) == expected[::10]
    assert "u007" in ids and "u040" not in ids
    assert np.array(ids, dtype=object).tolist() == expected
    assert pick(ids, np.array([39, 0, 7])) == pick(expected, np.array([39, 0, 7])) == ["u039", "u000", "u007"]
    assert ids.nbytes < sum(sys.getsizeof(i) for i in expected) / 3
    with pytest.raises(IndexError):
        ids[40]


@pytest.mark.parametrize(
    ("train_ids", "test_ids", "message"),
    [
        (
            ["u000", "u001", "u000"],
            ["u100"],
            r"train.parquet row 3 \(id 'u000'\), column 'id': duplicate ID 'u000', first seen on row 1",
        ),
        (["u000", "", "u002"], ["u100"], r"train.parquet row 2, column 'id': empty ID"),
        (
            ["u000", "u001", "u002"],
            ["u100", "u001"],
            r"test.parquet row 2 \(id 'u001'\): ID also in the training table .*train.parquet row 2",
        ),
    ],
)
def test_id_checks_at_arrows_speed_name_the_row_they_fail_on(tmp_path, train_ids, test_ids, message):
    folder = tmp_path / "site-1"
    folder.mkdir()
    for name, ids in (("train", train_ids), ("test", test_ids)):
        pq.write_table(pa.table({"id": ids, "age": [float(i) for i in range(len(ids))]}), folder / f"{name}.parquet")
    with pytest.raises(DataError, match=message):
        load_site_tables("site-1", DataRequest([], str(tmp_path)))


def test_a_parquet_error_names_the_row_and_column(tmp_path):
    folder = _site_folder(tmp_path, "parquet")
    table = pq.read_table(folder / "train.parquet")
    scores = table.column("score").to_pylist()
    scores[6] = "n/a?"
    pq.write_table(table.set_column(3, "score", pa.array(scores)), folder / "train.parquet")
    with pytest.raises(DataError) as caught:
        load_site_tables("site-1", DataRequest([], str(tmp_path)))
    assert str(caught.value) == (
        f"site 'site-1': {folder / 'train.parquet'} row 7 (id 'u006'), column 'score': non-numeric value 'n/a?' "
        "(if the column is categorical, list it in schema.json 'categorical_columns')"
    )


def test_a_null_in_a_parquet_number_column_is_a_missing_cell(tmp_path):
    folder = _site_folder(tmp_path, "parquet")
    table = pq.read_table(folder / "train.parquet")
    ages = table.column("age").to_pylist()
    ages[3] = None
    pq.write_table(table.set_column(1, "age", pa.array(ages, pa.float64())), folder / "train.parquet")
    tables = load_site_tables("site-1", DataRequest([], str(tmp_path)))  # filled with the median, by default
    assert tables.data_checks["train_missing"] == {"age": 1}
    refuse = {"categorical_columns": ["colour"], "missing": {"numeric": "error"}}
    (folder / "schema.json").write_text(json.dumps(refuse))
    with pytest.raises(DataError, match=r"train.parquet row 4 \(id 'u003'\), column 'age': empty value"):
        load_site_tables("site-1", DataRequest([], str(tmp_path)))


def test_both_formats_at_once_is_an_error(tmp_path):
    folder = _site_folder(tmp_path, "parquet")
    (folder / "test.csv").write_text("id,age,colour,score\nu900,1,red,2\n")
    with pytest.raises(DataError, match=r"both test.csv and test.parquet: keep one of them"):
        load_site_tables("site-1", DataRequest([], str(tmp_path)))


def test_parquet_labels(tmp_path):
    server = tmp_path / "server"
    server.mkdir()
    pq.write_table(pa.table({"id": ["a", "b", "c"], "label": [0, 1, 1]}), server / "train_labels.parquet")
    pq.write_table(pa.table({"id": ["d", "e"], "label": [1, 0]}), server / "test_labels.parquet")
    labels = load_label_tables("server", DataRequest([], str(tmp_path)))
    assert list(labels.train_ids) == ["a", "b", "c"] and labels.train_labels.tolist() == [0, 1, 1]
    assert labels.test_labels.tolist() == [1, 0]


def test_a_parquet_split_trains_as_its_csv_twin(tmp_path):
    """`vflflare split --format parquet`: sites found, labels read, the same job gives the same numbers."""
    roots = {fmt: tmp_path / fmt for fmt in ("csv", "parquet")}
    for fmt, root in roots.items():
        args = ["split", "--dataset", "breast_cancer", "--overlap", "150", "--format", fmt, "--out", str(root)]
        assert cli.main([*args, "--label-owner", "site-1", "--label-in-table"]) == 0
    assert sorted(p.name for p in (roots["parquet"] / "site-1").iterdir()) == [
        "schema.json",
        "test.parquet",
        "train.parquet",
    ]
    assert site_folders(roots["parquet"]) == site_folders(roots["csv"]) == ["site-1", "site-2"]
    cfg = make_config(algorithm="vanilla", label_owner="site-1", split_epochs=3)
    runs = {fmt: run_inprocess(cfg, ["site-1", "site-2"], str(root), runs_root=str(tmp_path / f"runs_{fmt}"))
            for fmt, root in roots.items()}  # fmt: skip
    assert runs["parquet"]["metrics"] == runs["csv"]["metrics"]


def test_check_data_reads_a_parquet_root(tmp_path, capsys):
    root = tmp_path / "root"
    args = ["split", "--dataset", "breast_cancer", "--overlap", "150", "--format", "parquet", "--out", str(root)]
    assert cli.main(args) == 0
    assert cli.main(["check-data", "--data-root", str(root)]) == 0
    table = pq.read_table(root / "site-2" / "test.parquet")
    values = table.column(1).to_pylist()
    values[4] = float("inf")
    pq.write_table(table.set_column(1, table.column_names[1], pa.array(values)), root / "site-2" / "test.parquet")
    capsys.readouterr()
    assert cli.main(["check-data", "--data-root", str(root)]) == 1
    assert f"{root / 'site-2' / 'test.parquet'} row 5" in capsys.readouterr().out


def test_the_row_major_fill_writes_every_column_where_a_column_stack_would():
    """Staged columns, flushed in row tiles: rows not a multiple of a tile, more columns than a stage holds, and
    blocks of columns narrower and wider than the stage."""
    rng = np.random.default_rng(0)
    rows = 2 * _RowMajorFill.TILE + 37
    parts = [rng.normal(size=rows) for _ in range(70)] + [rng.normal(size=(rows, 100)), rng.normal(size=(rows, 3))]
    parts += [rng.normal(size=rows)]
    expected = np.column_stack(parts).astype(np.float32)
    block = np.empty_like(expected)
    fill = _RowMajorFill(block)
    for part in parts:
        fill.add(part)
    fill.flush()
    np.testing.assert_array_equal(block, expected)
