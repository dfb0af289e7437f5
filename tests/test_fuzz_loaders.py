"""Property tests of the CSV/schema loaders (issue 10, item 9).

Whatever bytes a party's folder holds, `load_site_tables` / `load_label_tables` either return
well-formed tables (finite features, unique IDs, consistent shapes) or raise a DataError naming the
party and one of its files. Any other exception -- a UnicodeDecodeError, a numpy or json error, a
RuntimeWarning (turned into an error here) -- fails the test: a site operator would get a traceback
instead of a message saying which file to fix.

Examples are derandomized and the database is off, so CI runs the same examples every time.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from vflflare.data.errors import DataError
from vflflare.data.loading import DataRequest, load_label_tables, load_site_tables
from vflflare.data.schema import NUMERIC_TRANSFORMS
from vflflare.data.types import LabelTables, SiteTables

T = TypeVar("T")

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
PARTY_FILES = ("train.csv", "test.csv", "schema.json", "train_labels.csv", "test_labels.csv", "labels.json")
ENCODINGS = ("utf-8", "utf-8-sig", "utf-16", "latin-1", "cp1252")
# Letters that latin-1 and cp1252 both encode, so every encoding above can hold the same text.
NON_ASCII = "éüßñÅøçÆ"

VALID_TRAIN = "id,x,colour\na1,1.5,red\na2,-2,blue\na3,0.25,red\na4,7,green\n"
VALID_TEST = "id,x,colour\nb1,3,red\nb2,-1,violet\n"
VALID_SCHEMA = '{"id_column": "id", "categorical_columns": ["colour"]}'
VALID_TRAIN_LABELS = "id,label\na1,0\na2,1\na3,1\n"
VALID_TEST_LABELS = "id,label\nb1,1\nb2,0\n"
VALID_LABELS_JSON = '{"num_classes": 2}'


# ---------------------------------------------------------------- helpers


@contextmanager
def party_folder(name: str) -> Iterator[tuple[Path, Path]]:
    """A fresh data root holding one empty party folder (tmp_path is per test, not per example)."""
    with tempfile.TemporaryDirectory(prefix="vflflare-fuzz-") as root:
        folder = Path(root) / name
        folder.mkdir()
        yield Path(root), folder


def write_files(folder: Path, files: dict[str, bytes | str | None]) -> None:
    for name, content in files.items():
        if content is None:
            continue
        data = content.encode("utf-8") if isinstance(content, str) else content
        (folder / name).write_bytes(data)


def load_or_data_error(load: Callable[[], T], owner: str, folder: Path) -> T | None:
    """The loader's result, or None after checking that its DataError names the party and a file of
    its folder (not always the file that was broken: an edited training value can make a test value
    the one refused). Any other exception propagates and fails the test; so does any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning from numpy means an unchecked overflow/NaN
        try:
            return load()
        except DataError as error:
            message = str(error)
            assert message.startswith(f"{owner}: "), message
            assert any(str(folder / name) in message for name in PARTY_FILES), message
            return None


def load_site(root: Path, site: str, transform: str = "standard") -> SiteTables | None:
    tables = load_or_data_error(
        lambda: load_site_tables(site, DataRequest([], str(root), numeric_transform=transform)),
        f"site {site!r}",
        root / site,
    )
    if tables is not None:
        check_site_tables(tables)
    return tables


def load_labels(root: Path, owner: str) -> LabelTables | None:
    tables = load_or_data_error(
        lambda: load_label_tables(owner, DataRequest([], str(root))), f"label party {owner!r}", root / owner
    )
    if tables is not None:
        check_label_tables(tables)
    return tables


def check_site_tables(tables: SiteTables) -> None:
    """What every algorithm relies on: finite float32 features, unique IDs, one row per ID."""
    assert not set(tables.train_ids) & set(tables.test_ids)
    for ids, block in ((tables.train_ids, tables.train), (tables.test_ids, tables.test)):
        assert len(set(ids)) == len(ids) > 0
        assert block.numeric.dtype == np.float32 and np.isfinite(block.numeric).all()
        assert block.numeric.shape[0] == block.categorical.shape[0] == len(ids)
        assert block.numeric.shape[1] + block.categorical.shape[1] == len(tables.feature_names)
        assert block.categorical.shape[1] == len(block.cardinalities)
        assert ((block.categorical >= 0) & (block.categorical < np.array(block.cardinalities, dtype=np.int64))).all()


def check_label_tables(tables: LabelTables) -> None:
    assert isinstance(tables.num_classes, int) and tables.num_classes >= 2
    assert not set(tables.train_ids) & set(tables.test_ids)
    for ids, labels in ((tables.train_ids, tables.train_labels), (tables.test_ids, tables.test_labels)):
        assert len(set(ids)) == len(ids) == len(labels) > 0
        assert labels.dtype == np.int64
        assert ((labels >= 0) & (labels < tables.num_classes)).all()


def csv_text(header: list[str], rows: list[list[str]], newline: str = "\n") -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator=newline).writerows([header, *rows])
    return out.getvalue()


# ---------------------------------------------------------------- strategies

# Text without lone surrogates (a file cannot hold them as UTF-8); NUL, controls and quotes included.
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)

SPECIAL_CELLS = [
    "",
    " ",
    "\t",
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-inf",
    "Infinity",
    "1e308",
    "-1e308",
    "1.7976931348623157e308",
    "1e309",
    "5e-324",
    "-0.0",
    "0",
    "1_000",
    " 1 ",
    "0x1A",
    "١٢",
    "True",
    "false",
    "yes",
    "a,b",
    'say "hi"',
    "two\nlines",
    "\r",
    "9" * 400,
]
label_cells = st.one_of(
    st.integers(0, 2).map(str),
    st.integers(-3, 3).map(str),
    st.sampled_from(
        [
            "",
            " ",
            "1.0",
            "1e0",
            "0x1",
            "+1",
            " 0",
            "1_0",
            "١",
            "nan",
            "inf",
            "yes",
            str(2**63),
            str(-(2**63) - 1),
            "9" * 5000,
        ]
    ),
    st.integers().map(str),
    texts,
)
cell_kinds: dict[str, st.SearchStrategy[str]] = {
    "ints": st.one_of(st.integers(-10, 10), st.integers(), st.integers(-(10**30), 10**30)).map(str),
    "floats": st.floats(allow_nan=True, allow_infinity=True).map(repr),
    "finite": st.floats(allow_nan=False, allow_infinity=False).map(repr),
    "huge": st.sampled_from(["1e308", "-1e308", "1.7976931348623157e308", "3.4e38", "-3.5e38", "1e200", "0", "5e-324"]),
    "bools": st.sampled_from(["True", "False", "true", "false", "0", "1"]),
    "special": st.sampled_from(SPECIAL_CELLS),
    "text": texts,
    "labels": label_cells,
}
cell_kinds["mixed"] = st.one_of(*cell_kinds.values())
NUMERIC_KINDS = ("ints", "finite", "huge", "bools")


def mutated(data: bytes) -> st.SearchStrategy[bytes]:
    """A valid file with a few random byte-level edits: gets past the decoder far more often than
    random bytes do, so the CSV and value checks behind it are reached too."""

    def apply(edits: list[tuple[int, int, bytes]]) -> bytes:
        out = data
        for position, cut, insert in edits:
            position %= len(out) + 1
            out = out[:position] + insert + out[position + cut :]
        return out

    edit = st.tuples(st.integers(0, 10_000), st.integers(0, 3), st.binary(max_size=4))
    return st.lists(edit, min_size=1, max_size=4).map(apply)


def file_bytes(valid: str) -> st.SearchStrategy[bytes]:
    """Random bytes, or the valid file with random edits."""
    return st.one_of(st.binary(max_size=300), mutated(valid.encode("utf-8")))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)
# JSON texts that the json module itself chokes on in ways other than JSONDecodeError.
nasty_json = st.one_of(
    st.integers(900, 5000).map(lambda depth: "[" * depth + "]" * depth),  # deep nesting: RecursionError
    st.integers(4301, 6000).map(lambda digits: '{"num_classes": ' + "7" * digits + "}"),  # int too long: ValueError
    st.sampled_from(['{"num_classes": NaN}', '{"num_classes": Infinity}', '{"num_classes": 1e400}', "\ufeff{}"]),
)


@st.composite
def schema_json(draw: st.DrawFn, columns: list[str]) -> str:
    """A schema.json with random values for its keys: column names that exist or not, junk types."""
    names = st.sampled_from(columns + ["id", "missing", ""]) if columns else texts
    values: dict[str, Any] = {}
    if draw(st.booleans()):
        values["id_column"] = draw(st.one_of(st.just("id"), names, json_values))
    if draw(st.booleans()):
        values["categorical_columns"] = draw(st.one_of(st.lists(names, max_size=4), json_values))
    if draw(st.booleans()):
        values["numeric_transform"] = draw(st.one_of(st.sampled_from(NUMERIC_TRANSFORMS), json_values))
    if draw(st.integers(0, 4)) == 0:
        values["label_column"] = draw(st.one_of(names, json_values))
    if draw(st.integers(0, 3)) == 0:
        values["num_classes"] = draw(st.one_of(st.integers(-1, 5), json_values))
    if draw(st.integers(0, 9)) == 0:
        values[draw(texts)] = draw(json_values)
    return json.dumps(values)


@st.composite
def random_table(draw: st.DrawFn) -> tuple[bool, list[str], list[str], list[list[str]], list[list[str]]]:
    """(tidy, header, cell kind per column, train rows, test rows). Tidy tables have an 'id' column
    of unique IDs, unique non-empty column names and rows in both files, so they get past the
    structure checks to the values; the others are random throughout."""
    tidy = draw(st.booleans())
    names = st.one_of(st.sampled_from(["x", "y", "label", "Größe", "café", "a,b"]), texts)
    if tidy:
        header = draw(st.lists(names.filter(lambda name: name not in ("", "id")), min_size=1, max_size=4, unique=True))
    else:
        header = draw(st.lists(st.one_of(names, st.just("")), max_size=4))
    if tidy or draw(st.integers(0, 9)) > 0:
        header.insert(draw(st.integers(0, len(header))), "id")
    kinds = [draw(st.sampled_from(sorted(cell_kinds))) for _ in header]
    counts = draw(st.integers(int(tidy), 6)), draw(st.integers(int(tidy), 4))
    if tidy:
        ids = draw(
            st.lists(
                st.text(st.sampled_from("0123é"), min_size=1, max_size=3),
                min_size=sum(counts),
                max_size=sum(counts),
                unique=True,
            )
        )
    else:
        ids = [
            draw(st.one_of(st.integers(0, 3).map(str), st.sampled_from(["é1", "", " 1", "1.0"]), texts))
            for _ in range(sum(counts))
        ]

    def rows(row_ids: list[str]) -> list[list[str]]:
        return [
            [row_id if name == "id" else draw(cell_kinds[kind]) for name, kind in zip(header, kinds)]
            for row_id in row_ids
        ]

    return tidy, header, kinds, rows(ids[: counts[0]]), rows(ids[counts[0] :])


@st.composite
def fitting_schema(draw: st.DrawFn, header: list[str], kinds: list[str]) -> str:
    """A schema.json that declares the non-numeric columns categorical (and maybe a label column),
    as a careful user would: gets random tables past the schema checks to their values."""
    features = [name for name in header if name != "id"]
    label = draw(st.none() | st.sampled_from(features)) if features else None
    values: dict[str, Any] = {
        "categorical_columns": [
            name
            for name, kind in zip(header, kinds)
            if name in features and name != label and kind not in NUMERIC_KINDS
        ],
        "numeric_transform": draw(st.sampled_from(NUMERIC_TRANSFORMS)),
    }
    if label is not None:
        values["label_column"] = label
    return json.dumps(values)


@st.composite
def label_file(draw: st.DrawFn, prefix: str) -> str:
    header = draw(st.one_of(st.just(["id", "label"]), st.lists(st.sampled_from(["id", "label", "y", "x"]), max_size=3)))
    ids = [f"{prefix}{i}" for i in range(draw(st.integers(0, 5)))]
    cells = label_cells if draw(st.booleans()) else st.sampled_from(["0", "1"])  # half plausible, to get past C checks
    rows = [[row_id if name == "id" else draw(cells) for name in header] for row_id in ids]
    return csv_text(header, rows)


# ---------------------------------------------------------------- properties


def load_with_one_file_fuzzed(valid: dict[str, str], name: str, content: st.DataObject, party: str, load) -> None:
    """Every file of `valid` as written there except `name`, which gets random bytes, a few byte edits of
    its valid content, or (a JSON file) JSON that breaks the json module."""
    strategy = file_bytes(valid[name])
    if name.endswith(".json"):
        strategy = st.one_of(strategy, nasty_json.map(str.encode))
    files: dict[str, bytes | str | None] = {**valid, name: content.draw(strategy, label=name)}
    with party_folder(party) as (root, folder):
        write_files(folder, files)
        load(root, party)


@FUZZ
@given(name=st.sampled_from(["train.csv", "test.csv", "schema.json"]), content=st.data())
def test_random_bytes_in_a_site_file(name: str, content: st.DataObject) -> None:
    valid = {"train.csv": VALID_TRAIN, "test.csv": VALID_TEST, "schema.json": VALID_SCHEMA}
    load_with_one_file_fuzzed(valid, name, content, "site-1", load_site)


@FUZZ
@given(name=st.sampled_from(["train_labels.csv", "test_labels.csv", "labels.json"]), content=st.data())
def test_random_bytes_in_a_label_file(name: str, content: st.DataObject) -> None:
    valid = {
        "train_labels.csv": VALID_TRAIN_LABELS,
        "test_labels.csv": VALID_TEST_LABELS,
        "labels.json": VALID_LABELS_JSON,
    }
    load_with_one_file_fuzzed(valid, name, content, "server", load_labels)


@FUZZ
@given(
    encoding=st.sampled_from(ENCODINGS),
    newline=st.sampled_from(["\n", "\r\n"]),
    names=st.lists(
        st.text(st.sampled_from("abxyz_ " + NON_ASCII), min_size=1, max_size=5), min_size=2, max_size=4, unique=True
    ).filter(lambda names: "id" not in names),
    ids=st.lists(
        st.text(st.sampled_from("0123456789ab" + NON_ASCII), min_size=1, max_size=4),
        min_size=2,
        max_size=8,
        unique=True,
    ),
    # Three decimals: a test value cannot lie 1e38 training deviations away, so UTF-8 must load.
    numbers=st.lists(st.integers(-(10**9), 10**9).map(lambda n: n / 1000), min_size=8 * 3, max_size=8 * 3),
    categories=st.lists(st.text(st.sampled_from("rgb" + NON_ASCII), min_size=1, max_size=3), min_size=8, max_size=8),
)
def test_valid_tables_in_any_encoding(
    encoding: str, newline: str, names: list[str], ids: list[str], numbers: list[float], categories: list[str]
) -> None:
    """Well-formed tables with non-ASCII IDs, headers and categories. UTF-8 (with or without a BOM)
    must load with every ID and name intact; another encoding loads only when it writes the same
    bytes as UTF-8 (plain ASCII), and otherwise is a DataError naming the file."""
    categorical, numeric = names[0], names[1:]
    header = ["id", categorical, *numeric]
    rows = [
        [row_id, categories[i], *(repr(numbers[i * 3 + j]) for j in range(len(numeric)))]
        for i, row_id in enumerate(ids)
    ]
    split = len(ids) // 2
    texts_by_name = {
        "train.csv": csv_text(header, rows[:split], newline),
        "test.csv": csv_text(header, rows[split:], newline),
        "schema.json": json.dumps({"categorical_columns": [categorical]}, ensure_ascii=False),
    }
    files: dict[str, bytes | str | None] = {name: text.encode(encoding) for name, text in texts_by_name.items()}
    with party_folder("site-é") as (root, folder):
        write_files(folder, files)
        tables = load_site(root, "site-é")
    same_as_utf8 = all(data == texts_by_name[name].encode("utf-8") for name, data in files.items())
    if encoding in ("utf-8", "utf-8-sig") or same_as_utf8:
        assert tables is not None, f"{encoding} tables did not load"
        assert tables.train_ids == ids[:split] and tables.test_ids == ids[split:]
        assert all(feature in tables.feature_names for feature in numeric)
    else:
        assert tables is None, f"{encoding} bytes that are not UTF-8 loaded"


@FUZZ
@given(table=random_table(), transform=st.sampled_from(NUMERIC_TRANSFORMS), data=st.data())
def test_random_column_types_and_schema(
    table: tuple[bool, list[str], list[str], list[list[str]], list[list[str]]], transform: str, data: st.DataObject
) -> None:
    tidy, header, kinds, train_rows, test_rows = table
    schemas = fitting_schema(header, kinds) if tidy else st.none() | fitting_schema(header, kinds) | schema_json(header)
    schema = data.draw(schemas, label="schema.json")
    test_header = data.draw(st.permutations(header), label="test header order")
    order = [header.index(name) for name in test_header] if len(set(header)) == len(header) else range(len(header))
    files = {
        "train.csv": csv_text(header, train_rows),
        "test.csv": csv_text(test_header, [[row[i] for i in order] for row in test_rows]),
        "schema.json": schema,
    }
    with party_folder("site-1") as (root, folder):
        write_files(folder, files)
        load_site(root, "site-1", transform)
        if schema is not None and "label_column" in json.loads(schema):
            load_labels(root, "site-1")  # the site as label party, labels read from its label column


@FUZZ
@given(
    train=label_file("a"),
    test=label_file("b"),
    labels_json=st.none()
    | st.dictionaries(
        st.sampled_from(["num_classes", "id_column", "label_column"]),
        st.one_of(st.integers(-2, 5), st.sampled_from([10**30, 2**63, "id", "label", "y"]), json_values),
    ).map(json.dumps),
)
def test_random_label_values(train: str, test: str, labels_json: str | None) -> None:
    with party_folder("server") as (root, folder):
        write_files(folder, {"train_labels.csv": train, "test_labels.csv": test, "labels.json": labels_json})
        load_labels(root, "server")


@FUZZ
@given(
    header=st.permutations(["id", "x", "y"]),
    train_rows=st.integers(1, 9),  # 8+ rows: numpy sums in pairs, where 1e308 + 1e308 - (1e308 + 1e308) is NaN
    values=st.lists(st.one_of(cell_kinds["huge"], cell_kinds["finite"]), min_size=20, max_size=20),
    transform=st.sampled_from(NUMERIC_TRANSFORMS),
)
# Training column x = 1e308, 1e308, -1e308, -1e308 twice: numpy's pairwise sum adds inf and -inf (NaN mean).
@example(
    header=["id", "x", "y"],
    train_rows=8,
    values=[cell for sign in "++--++--+" for cell in (f"{sign}1e308", "0")] + ["0", "0"],
    transform="standard",
)
def test_extreme_numeric_values(header: list[str], train_rows: int, values: list[str], transform: str) -> None:
    """Huge, tiny and opposite-signed values: standardising them must not overflow unnoticed."""
    cells = iter(values)
    train = [[f"t{i}" if name == "id" else next(cells) for name in header] for i in range(train_rows)]
    test = [[f"s{i}" if name == "id" else next(cells) for name in header] for i in range(1)]
    with party_folder("site-1") as (root, folder):
        write_files(folder, {"train.csv": csv_text(header, train), "test.csv": csv_text(header, test)})
        load_site(root, "site-1", transform)
