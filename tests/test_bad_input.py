"""Bad input fails early with a DataError naming the site, the file and the line/ID/column."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vflflare.data.errors import DataError
from vflflare.data.loading import DataRequest, load_label_tables, load_site_tables
from vflflare.data.sources import load_source


def edit_cell(path: Path, line: int, column: str, value: str) -> str:
    """Set one cell (line numbers as in messages, header = 1); returns that row's ID."""
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    fields = lines[line - 1].split(",")
    fields[header.index(column)] = value
    lines[line - 1] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    return fields[0]


def site_error(root: Path, site: str = "site-1") -> str:
    with pytest.raises(DataError) as error:
        load_site_tables(site, DataRequest(["site-1", "site-2"], str(root)))
    return str(error.value)


def label_error(root: Path) -> str:
    with pytest.raises(DataError) as error:
        load_label_tables("server", DataRequest(["site-1", "site-2"], str(root)))
    return str(error.value)


def test_missing_site_folder_and_root(split_root):
    message = site_error(split_root, "site-3")
    assert message.startswith(f"site 'site-3': {split_root / 'site-3'}: data folder does not exist")
    assert "'site-1', 'site-2'" in message
    message = site_error(split_root / "nowhere")
    assert message.startswith(f"site 'site-1': {split_root / 'nowhere'}: data root does not exist")


@pytest.mark.parametrize("name", ["train.csv", "test.csv"])
def test_missing_file(split_root, name):
    (split_root / "site-2" / name).unlink()
    assert site_error(split_root, "site-2") == f"site 'site-2': {split_root / 'site-2' / name}: file not found"


def test_missing_id_column(split_root):
    path = split_root / "site-1" / "train.csv"
    path.write_text(path.read_text().replace("id,", "ident,", 1))
    message = site_error(split_root)
    assert f"site 'site-1': {path}: missing ID column 'id'" in message and "'ident'" in message


def test_duplicate_ids_name_both_lines(split_root):
    path = split_root / "site-1" / "train.csv"
    lines = path.read_text().splitlines()
    first_id = lines[4].split(",")[0]
    lines[11] = ",".join([first_id] + lines[11].split(",")[1:])
    path.write_text("\n".join(lines) + "\n")
    message = site_error(split_root)
    assert message == (
        f"site 'site-1': {path} line 12 (id '{first_id}'), column 'id': duplicate ID '{first_id}', first seen on line 5"
    )


def test_non_numeric_value_names_line_id_column(split_root):
    path = split_root / "site-2" / "train.csv"
    row_id = edit_cell(path, 18, "worst area", "abc")
    message = site_error(split_root, "site-2")
    assert message.startswith(
        f"site 'site-2': {path} line 18 (id '{row_id}'), column 'worst area': non-numeric value 'abc'"
    )
    assert "categorical_columns" in message  # says how to declare a categorical column


@pytest.mark.parametrize("value, problem", [("", "empty value"), ("nan", "missing value 'nan'"),
                                            ("NaN", "missing value 'NaN'"), ("inf", "infinite value")])  # fmt: skip
def test_missing_numeric_values_refused_under_missing_error(split_root, value, problem):
    (split_root / "site-1" / "schema.json").write_text(json.dumps({"missing": {"numeric": "error"}}))
    path = split_root / "site-1" / "test.csv"
    row_id = edit_cell(path, 7, "mean texture", value)
    message = site_error(split_root)
    assert f"site 'site-1': {path} line 7 (id '{row_id}'), column 'mean texture': {problem}" in message
    if value != "inf":
        assert "schema.json 'missing' can fill missing cells instead" in message


def test_wrong_field_count(split_root):
    path = split_root / "site-1" / "train.csv"
    lines = path.read_text().splitlines()
    lines[20] += ",1.0"
    path.write_text("\n".join(lines) + "\n")
    row_id = lines[20].split(",")[0]
    assert site_error(split_root) == f"site 'site-1': {path} line 21 (id '{row_id}'): 17 fields but the header has 16"


def test_test_columns_differ_from_train(split_root):
    path = split_root / "site-1" / "test.csv"
    path.write_text(path.read_text().replace("mean radius", "mean radiu", 1))
    message = site_error(split_root)
    assert message.startswith(f"site 'site-1': {path}: columns differ from {split_root / 'site-1' / 'train.csv'}")
    assert "missing ['mean radius'], extra ['mean radiu']" in message


def test_zero_feature_columns_and_zero_rows(tmp_path, write_csv):
    write_csv(tmp_path / "a" / "train.csv", ["id"], [["r1"], ["r2"]])
    write_csv(tmp_path / "a" / "test.csv", ["id"], [["t1"]])
    assert site_error(tmp_path, "a") == (
        f"site 'a': {tmp_path / 'a' / 'train.csv'}: no feature columns; the header has only the ID column 'id'"
    )
    write_csv(tmp_path / "a" / "train.csv", ["id", "f"], [])
    assert site_error(tmp_path, "a") == f"site 'a': {tmp_path / 'a' / 'train.csv'}: no data rows"
    (tmp_path / "a" / "train.csv").write_text("")
    assert "empty file" in site_error(tmp_path, "a")


def test_train_and_test_share_an_id(split_root):
    train = split_root / "site-1" / "train.csv"
    test = split_root / "site-1" / "test.csv"
    train_id = train.read_text().splitlines()[2].split(",")[0]
    edit_cell(test, 4, "id", train_id)
    assert site_error(split_root) == (
        f"site 'site-1': {test} line 4 (id '{train_id}'): ID also in the training table {train} line 3"
    )


def test_categorical_problems(tmp_path, write_csv):
    folder = tmp_path / "c"
    write_csv(folder / "train.csv", ["id", "color", "f"], [["r1", "red", 1], ["r2", "", 2], ["r3", "blue", 3]])
    write_csv(folder / "test.csv", ["id", "color", "f"], [["t1", "red", 1]])
    (folder / "schema.json").write_text(
        json.dumps({"categorical_columns": ["color"], "missing": {"categorical": "error"}})
    )
    assert site_error(tmp_path, "c").startswith(
        f"site 'c': {folder / 'train.csv'} line 3 (id 'r2'), column 'color': empty value in a categorical column; "
        f"schema.json 'missing' can fill"
    )
    (folder / "schema.json").write_text(json.dumps({"categorical_columns": ["colour"]}))
    message = site_error(tmp_path, "c")
    assert message.startswith(f"site 'c': {folder / 'train.csv'}, column 'colour': declared categorical")
    (folder / "schema.json").write_text(json.dumps({"categorical_column": ["color"]}))
    message = site_error(tmp_path, "c")
    assert message.startswith(f"site 'c': {folder / 'schema.json'}: unknown keys ['categorical_column']")
    (folder / "schema.json").write_text("{categorical_columns: [color]}")
    assert site_error(tmp_path, "c").startswith(f"site 'c': {folder / 'schema.json'}: not valid JSON")


def test_duplicate_header_names(tmp_path, write_csv):
    write_csv(tmp_path / "d" / "train.csv", ["id", "f", "f"], [["r1", 1, 2]])
    write_csv(tmp_path / "d" / "test.csv", ["id", "f", "f"], [["t1", 1, 2]])
    assert site_error(tmp_path, "d") == (
        f"site 'd': {tmp_path / 'd' / 'train.csv'} line 1: duplicate column names ['f'] in the header"
    )


@pytest.mark.parametrize("value, problem", [("1.5", "non-integer label '1.5'"), ("yes", "non-integer label 'yes'"),
                                            ("2", "label 2 outside 0..1 (C = 2 from labels.json)"),
                                            ("-1", "label -1 outside 0..1")])  # fmt: skip
def test_bad_label_values(split_root, value, problem):
    path = split_root / "server" / "train_labels.csv"
    row_id = edit_cell(path, 9, "label", value)
    message = label_error(split_root)
    assert message.startswith(f"label party 'server': {path} line 9 (id '{row_id}'), column 'label': {problem}")


def test_labels_must_be_0_to_c_minus_1_without_labels_json(split_root):
    (split_root / "server" / "labels.json").unlink()
    for name in ("train_labels.csv", "test_labels.csv"):  # classes {0, 2}: C would be 2
        path = split_root / "server" / name
        path.write_text(path.read_text().replace(",1\n", ",2\n"))
    path = split_root / "server" / "train_labels.csv"
    first = next(n for n, line in enumerate(path.read_text().splitlines(), 1) if line.endswith(",2"))
    message = label_error(split_root)
    assert message.startswith(f"label party 'server': {path} line {first} (id ")
    assert (
        "label 2 outside 0..1 (C = 2 by default, as labels.json declares no num_classes; number the classes 0..C-1 "
        "with every class present); rows per class in this file: {0: "
    ) in message


def test_label_files_missing_or_misdeclared(split_root):
    folder = split_root / "server"
    (folder / "labels.json").write_text(json.dumps({"num_classes": 1}))
    message = label_error(split_root)
    assert message.startswith(f"label party 'server': {folder / 'labels.json'}: 'num_classes' must be an integer >= 2")
    (folder / "labels.json").unlink()
    path = folder / "train_labels.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0] + ",extra"] + [line + ",x" for line in lines[1:]]) + "\n")
    assert label_error(split_root).startswith(f"label party 'server': {path}: unexpected columns ['extra']")
    (folder / "test_labels.csv").unlink()
    assert label_error(split_root) == f"label party 'server': {folder / 'test_labels.csv'}: file not found"


def test_missing_label_folder(split_root):
    with pytest.raises(DataError) as error:
        load_label_tables("site-1", DataRequest(["site-1", "site-2"], str(split_root)))
    assert f"label party 'site-1': {split_root / 'site-1' / 'train_labels.csv'}: file not found" == str(error.value)


def label_column_site(root: Path, write_csv, schema: dict[str, object]) -> Path:
    """site-1 keeping its labels in column 'y' of train.csv / test.csv; returns its folder."""
    folder = root / "site-1"
    write_csv(folder / "train.csv", ["id", "f", "y"], [["r1", 1.0, 0], ["r2", 2.0, ""], ["r3", 3.0, 1], ["r4", 4.0, 1]])
    write_csv(folder / "test.csv", ["id", "f", "y"], [["t1", 1.0, 1], ["t2", 2.0, 0]])
    (folder / "schema.json").write_text(json.dumps(schema))
    return folder


def column_label_error(root: Path) -> str:
    with pytest.raises(DataError) as error:
        load_label_tables("site-1", DataRequest(["site-1", "site-2"], str(root)))
    return str(error.value)


def test_label_column_and_label_files_conflict(tmp_path, write_csv):
    folder = label_column_site(tmp_path, write_csv, {"label_column": "y"})
    write_csv(folder / "train_labels.csv", ["id", "label"], [["r1", 0]])
    assert column_label_error(tmp_path) == (
        f"label party 'site-1': {folder / 'schema.json'}: declares 'label_column' 'y' in train.csv/test.csv, but the "
        "folder also has label files ['train_labels.csv']; keep the labels in one place (remove the label files or "
        "'label_column')"
    )


@pytest.mark.parametrize(
    "name, line, value, problem",
    [
        ("train.csv", 4, "1.5", "non-integer label '1.5'"),
        ("train.csv", 5, "2", "label 2 outside 0..1 (C = 2 from schema.json)"),
        ("test.csv", 3, "-1", "label -1 outside 0..1 (C = 2 from schema.json)"),
        ("test.csv", 2, "", "empty label; every test row needs a label"),
    ],
)
def test_bad_label_in_label_column(tmp_path, write_csv, name, line, value, problem):
    folder = label_column_site(tmp_path, write_csv, {"label_column": "y", "num_classes": 2})
    row_id = edit_cell(folder / name, line, "y", value)
    message = column_label_error(tmp_path)
    assert message.startswith(
        f"label party 'site-1': {folder / name} line {line} (id {row_id!r}), column 'y': {problem}"
    )


def test_label_column_misdeclared(tmp_path, write_csv):
    folder = label_column_site(tmp_path, write_csv, {"label_column": "label"})
    assert site_error(tmp_path).startswith(
        f"site 'site-1': {folder / 'train.csv'}, column 'label': declared the label column in schema.json but not"
    )
    (folder / "schema.json").write_text(json.dumps({"num_classes": 2}))
    assert site_error(tmp_path).startswith(f"site 'site-1': {folder / 'schema.json'}: 'num_classes' needs")
    (folder / "schema.json").write_text(json.dumps({"label_column": "y"}))
    for line in (2, 4, 5):
        edit_cell(folder / "train.csv", line, "y", "")
    message = column_label_error(tmp_path)
    assert message.startswith(f"label party 'site-1': {folder / 'train.csv'}, column 'y': no labeled rows")


def test_missing_dataset_file_names_expected_path(tmp_path):
    with pytest.raises(DataError) as error:
        load_source("adult", tmp_path)
    assert str(tmp_path / "adult" / "adult.data") in str(error.value) and "file not found" in str(error.value)


def test_embedded_default_rejects_unknown_site():
    with pytest.raises(DataError, match="site 'site-9': not one of the sites"):
        load_site_tables("site-9", DataRequest(["site-1", "site-2"], None))


def test_training_value_that_overflows_standardisation(split_root):
    """1e200 used to make the column's std inf and so zero the whole column silently."""
    path = split_root / "site-1" / "train.csv"
    column = path.read_text().splitlines()[0].split(",")[1]
    row_id = edit_cell(path, 7, column, "1e200")
    message = site_error(split_root)
    assert message.startswith(
        f"site 'site-1': {path} line 7 (id '{row_id}'), column '{column}': value 1e+200 is too large to standardise"
    )
    assert "signed_log" in message


def test_test_value_beyond_float32_is_clipped_and_reported(split_root):
    """1e300 in a test row used to surface as 'Input contains NaN' when scoring, after training, then as an
    error at load time; now it is clipped to the column's training bound (data/checks.py) and reported."""
    path = split_root / "site-2" / "test.csv"
    column = path.read_text().splitlines()[0].split(",")[2]
    edit_cell(path, 4, column, "1e300")
    tables = load_site_tables("site-2", DataRequest(["site-1", "site-2"], str(split_root)))
    assert np.isfinite(tables.test.numeric).all() and np.abs(tables.test.numeric).max() < 100
    found = tables.data_checks["out_of_range"][column]
    assert found["clipped"] == 1 and (found["first_line"], found["first_value"]) == (4, 1e300)  # the clipped one


def test_large_values_under_signed_log_are_fine(split_root):
    path = split_root / "site-1" / "train.csv"
    edit_cell(path, 7, path.read_text().splitlines()[0].split(",")[1], "1e200")
    tables = load_site_tables(
        "site-1", DataRequest(["site-1", "site-2"], str(split_root), numeric_transform="signed_log")
    )
    assert np.isfinite(tables.train.numeric).all() and np.isfinite(tables.test.numeric).all()
