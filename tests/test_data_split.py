"""vflflare.data.split and vflflare.data.sources: the paper's row/column split and the split CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vflflare.cli.split import configure_split_parser, run_split
from vflflare.data.errors import DataError
from vflflare.data.loading import DataRequest, load_label_tables, load_site_tables
from vflflare.data.sources import load_source
from vflflare.data.split import parse_sites, split_table, write_split


@pytest.fixture(scope="module")
def breast_cancer():
    return load_source("breast_cancer", None)


def cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure_split_parser(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("sites", [["site-1", "site-2"], ["a", "b", "c"], ["p", "q", "r", "s", "t"]])
def test_split_sizes_and_roles(breast_cancer, sites):
    frame, labels, ids, categorical, _ = breast_cancer
    result = split_table(frame, labels, ids, sites, overlap=150, seed=0, categorical=categorical)
    n_test, overlap = round(0.2 * 569), 150
    overlap_ids = set(result.overlap_ids)
    test_ids = set(result.test_labels["id"])
    assert len(overlap_ids) == overlap and len(test_ids) == n_test
    assert not overlap_ids & test_ids

    unaligned = {}
    for site in sites:
        part = result.parts[site]
        train_ids = set(part.train["id"])
        assert overlap_ids <= train_ids  # every party has the aligned rows
        assert list(part.test["id"]) == list(result.test_labels["id"])  # and the same test rows, same order
        unaligned[site] = train_ids - overlap_ids
        assert len(unaligned[site]) == part.n_unaligned
    sizes = [len(rows) for rows in unaligned.values()]
    assert sum(sizes) == 569 - n_test - overlap and max(sizes) - min(sizes) <= 1
    union = set().union(*unaligned.values())
    assert len(union) == sum(sizes)  # disjoint among sites
    assert union | overlap_ids | test_ids == set(ids)

    # labels only for the aligned rows, and the right ones
    assert set(result.train_labels["id"]) == overlap_ids
    truth = dict(zip(ids, labels))
    assert all(truth[i] == y for i, y in zip(result.train_labels["id"], result.train_labels["label"]))
    assert all(truth[i] == y for i, y in zip(result.test_labels["id"], result.test_labels["label"]))

    # features split evenly in column order, values untouched
    columns = [result.parts[site].columns for site in sites]
    assert sum(columns, []) == list(frame.columns)
    assert max(map(len, columns)) - min(map(len, columns)) <= 1
    part = result.parts[sites[-1]]
    row = ids.index(part.train["id"].iloc[3])
    assert part.train.iloc[3][part.columns].tolist() == frame.iloc[row][part.columns].tolist()


def test_split_is_deterministic_per_seed(breast_cancer):
    frame, labels, ids, _, _ = breast_cancer
    first = split_table(frame, labels, ids, ["a", "b"], overlap=100, seed=7)
    again = split_table(frame, labels, ids, ["a", "b"], overlap=100, seed=7)
    other = split_table(frame, labels, ids, ["a", "b"], overlap=100, seed=8)
    assert first.overlap_ids == again.overlap_ids
    for site in ("a", "b"):
        pd.testing.assert_frame_equal(first.parts[site].train, again.parts[site].train)
        pd.testing.assert_frame_equal(first.parts[site].test, again.parts[site].test)
    assert first.overlap_ids != other.overlap_ids


def test_custom_site_columns_and_categorical():
    frame = pd.DataFrame({"x": np.arange(40.0), "c": ["u", "v"] * 20, "y": np.ones(40), "z": np.zeros(40)})
    labels = np.arange(40) % 3
    ids = [f"r{i}" for i in range(40)]
    result = split_table(frame, labels, ids, ["s1", "s2"], overlap=10, seed=1, test_fraction=0.25,
                         site_columns=[["z", "c"], ["x", "y"]], categorical=["c"])  # fmt: skip
    assert result.parts["s1"].columns == ["z", "c"] and result.parts["s1"].categorical == ["c"]
    assert result.parts["s2"].categorical == []
    assert list(result.parts["s1"].train.columns) == ["id", "z", "c"]
    assert len(result.test_labels) == 10 and result.num_classes == 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"overlap": 456}, "overlap must be in 1..455"),
        ({"overlap": 0}, "overlap must be in 1..455"),
        ({"sites": ["only"]}, "at least 2 sites"),
        ({"sites": ["a", "a"]}, "unique"),
        ({"sites": ["server", "b"]}, "'server'"),
        ({"sites": ["a/b", "c"]}, "folder name"),
        ({"test_fraction": 0.0}, "test_fraction"),
        ({"site_columns": [["mean radius"], ["mean radius"]]}, "given to both site 'a' and site 'b'"),
        ({"site_columns": [["mean radius"], ["no such column"]]}, "'no such column' (site 'b') is not in the table"),
        ({"site_columns": [["mean radius"], ["mean texture"]]}, "given to no site"),
        ({"site_columns": [["mean radius"]]}, "1 column lists for 2 sites"),
        ({"categorical": ["nope"]}, "categorical columns ['nope']"),
    ],
)
def test_split_rejects_bad_arguments(breast_cancer, kwargs, message):
    frame, labels, ids, _, _ = breast_cancer
    arguments = {"sites": ["a", "b"], "overlap": 150, "seed": 0, **kwargs}
    with pytest.raises(ValueError) as error:
        split_table(frame, labels, ids, **arguments)
    assert message in str(error.value)


def test_write_split_layout(breast_cancer, tmp_path):
    frame, labels, ids, _, _ = breast_cancer
    result = split_table(frame, labels, ids, ["a", "b", "c"], overlap=150, seed=3)
    root = tmp_path / "out"
    manifest_path = write_split(result, root, label_owner="b", manifest_extra={"dataset": "breast_cancer"})

    trains = {site: pd.read_csv(root / site / "train.csv", dtype={"id": str}) for site in "abc"}
    true_overlap = set.intersection(*(set(table["id"]) for table in trains.values()))
    overlap_file = pd.read_csv(root / "overlap_ids.csv", dtype={"id": str})
    assert list(overlap_file.columns) == ["id"] and set(overlap_file["id"]) == true_overlap
    assert len(true_overlap) == 150
    train_labels = pd.read_csv(root / "b" / "train_labels.csv", dtype={"id": str})
    assert set(train_labels["id"]) == true_overlap
    assert json.loads((root / "b" / "labels.json").read_text()) == {
        "num_classes": 2, "id_column": "id", "label_column": "label"}  # fmt: skip
    assert not (root / "server").exists() and not (root / "a" / "train_labels.csv").exists()

    manifest = json.loads(manifest_path.read_text())
    assert manifest["dataset"] == "breast_cancer" and manifest["seed"] == 3
    assert manifest["sites"] == ["a", "b", "c"] and manifest["label_owner"] == "b"
    assert manifest["overlap"] == 150 and manifest["n_test"] == 114 and manifest["num_classes"] == 2
    for site in "abc":
        info = manifest["per_site"][site]
        assert info["n_train"] == len(trains[site]) == 150 + info["n_unaligned"]
        assert info["columns"] == list(trains[site].columns[1:])

    with pytest.raises(ValueError, match="not empty"):
        write_split(result, root)
    with pytest.raises(ValueError, match="label owner"):
        write_split(result, tmp_path / "other", label_owner="d")


@pytest.mark.needs_data("credit_default")
def test_cli_credit_default_paper_split(shared_data, tmp_path, capsys):
    out = tmp_path / "credit"
    assert run_split(cli("--dataset", "credit_default", "--data-dir", str(shared_data), "--overlap", "1000",
                         "--seed", "0", "--out", str(out))) == 0  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    first, second = manifest["per_site"]["site-1"], manifest["per_site"]["site-2"]
    assert first["columns"] == ["LIMIT_BAL", "SEX", "EDUCATION", "MARRIAGE", "AGE",
                                "PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5"]  # fmt: skip
    assert len(second["columns"]) == 13 and second["columns"][0] == "PAY_6"
    assert manifest["n_test"] == 6000 and first["n_unaligned"] == second["n_unaligned"] == 11500
    sums = dict(reversed(line.split()) for line in (shared_data / "SHA256SUMS").read_text().splitlines())
    path = "credit_default/default_of_credit_card_clients.csv"
    assert manifest["source_sha256"] == {path: sums[path]}
    assert "site-1: 10 columns, 12500 train rows" in capsys.readouterr().out

    raw = pd.read_csv(shared_data / path)
    train = pd.read_csv(out / "site-2" / "train.csv")
    original = raw.set_index("ID").loc[train["id"].iloc[:50], second["columns"]]
    assert (original.to_numpy() == train[second["columns"]].iloc[:50].to_numpy()).all()


@pytest.mark.needs_data("adult")
def test_cli_adult_with_categorical_and_site_label_owner(shared_data, tmp_path):
    out = tmp_path / "adult"
    assert run_split(cli("--dataset", "adult", "--data-dir", str(shared_data), "--overlap", "500",
                         "--sites", "3", "--label-owner", "site-2", "--out", str(out))) == 0  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    assert [manifest["per_site"][f"site-{k}"]["n_test"] for k in (1, 2, 3)] == [9768] * 3
    assert sorted(sum((manifest["per_site"][s]["categorical_columns"] for s in manifest["sites"]), [])) == sorted(
        ["workclass", "education", "marital-status", "occupation", "relationship", "race", "sex", "native-country"]
    )
    assert set(manifest["source_sha256"]) == {"adult/adult.data", "adult/adult.test"}

    last = load_site_tables("site-3", DataRequest([], str(out)))
    countries = pd.read_csv(out / "site-3" / "train.csv", keep_default_na=False)["native-country"].nunique()
    assert countries > 16 and last.feature_names[-1] == "native-country"
    assert last.train.cardinalities == [countries + 1] and last.train.categorical.shape == (13358, 1)
    labels = load_label_tables("site-2", DataRequest([], str(out)))
    assert len(labels.train_ids) == 500 and labels.num_classes == 2


def test_cli_label_in_table_round_trip(tmp_path, capsys):
    """`--label-in-table` puts the labels into the owner's tables; loading gives what label files give."""
    common = ["--dataset", "breast_cancer", "--overlap", "150", "--seed", "4", "--label-owner", "site-1"]
    files, table = tmp_path / "files", tmp_path / "table"
    assert run_split(cli(*common, "--out", str(files))) == 0
    assert run_split(cli(*common, "--label-in-table", "--out", str(table))) == 0
    assert "labels (2 classes) at the 'label' column of site-1's tables" in capsys.readouterr().out
    assert not list(table.rglob("*labels*")) and not (table / "server").exists()
    assert json.loads((table / "site-1" / "schema.json").read_text()) == {
        "id_column": "id", "categorical_columns": [], "label_column": "label", "num_classes": 2}  # fmt: skip
    assert json.loads((table / "manifest.json").read_text())["label_in_table"] is True

    train = pd.read_csv(table / "site-1" / "train.csv", dtype={"id": str, "label": "Int64"})
    overlap = set(pd.read_csv(table / "overlap_ids.csv", dtype={"id": str})["id"])
    assert train.columns[-1] == "label" and set(train.loc[train["label"].notna(), "id"]) == overlap
    assert train["label"].isna().sum() == len(train) - 150  # unaligned rows: empty label cells

    for site in ("site-1", "site-2"):
        from_files, from_table = (
            load_site_tables(site, DataRequest([], str(files))),
            load_site_tables(site, DataRequest([], str(table))),
        )
        assert from_table.feature_names == from_files.feature_names and "label" not in from_table.feature_names
        assert from_table.train_ids == from_files.train_ids
        np.testing.assert_array_equal(from_table.train.numeric, from_files.train.numeric)
    expected, got = (
        load_label_tables("site-1", DataRequest([], str(files))),
        load_label_tables("site-1", DataRequest([], str(table))),
    )
    assert got.train_ids == expected.train_ids and got.train_labels.tolist() == expected.train_labels.tolist()
    assert got.test_ids == expected.test_ids and got.test_labels.tolist() == expected.test_labels.tolist()
    assert got.num_classes == expected.num_classes == 2

    assert run_split(cli(*common[:-2], "--label-in-table", "--out", str(tmp_path / "srv"))) == 2
    assert "need a site label owner" in capsys.readouterr().err


@pytest.mark.needs_data("adult")
def test_adult_source_reads_both_files(shared_data):
    frame, labels, ids, categorical, default_columns = load_source("adult", shared_data)
    assert frame.shape == (32561 + 16281, 14) and len(ids) == len(labels) == len(frame)
    assert ids[0] == "adult-00000" and len(set(ids)) == len(ids)
    assert int(labels[:32561].sum()) == 7841 and int(labels[32561:].sum()) == 3846  # '>50K' and '>50K.'
    assert "?" in set(frame["workclass"]) and "Private" in set(frame["workclass"])  # stripped, '?' kept
    assert frame["age"].iloc[0] == 39 and default_columns is None and "native-country" in categorical


def test_credit_source_with_extra_header_line(tmp_path):
    folder = tmp_path / "credit_default"
    folder.mkdir()
    header = ["ID"] + [f"F{i}" for i in range(23)] + ["default payment next month"]
    generic = [""] + [f"X{i + 1}" for i in range(23)] + ["Y"]
    rows = [[str(i)] + [str(i * 10 + j) for j in range(23)] + [str(i % 2)] for i in range(1, 5)]
    lines = [",".join(generic), ",".join(header)] + [",".join(row) for row in rows]
    (folder / "default_of_credit_card_clients.csv").write_text("\n".join(lines) + "\n")
    frame, labels, ids, _, columns = load_source("credit_default", tmp_path)
    assert ids == ["1", "2", "3", "4"] and labels.tolist() == [1, 0, 1, 0]
    assert list(frame.columns) == header[1:-1] and frame["F2"].tolist() == [12, 22, 32, 42]
    assert columns == [header[1:11], header[11:-1]]

    rows[2][5] = "n/a"
    lines = [",".join(header)] + [",".join(row) for row in rows]
    (folder / "default_of_credit_card_clients.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as error:
        load_source("credit_default", tmp_path)
    assert "dataset 'credit_default'" in str(error.value) and "line 4 (id '3'), column 'F4'" in str(error.value)


def test_synthetic_source_and_named_sites(tmp_path):
    out = tmp_path / "syn"
    assert run_split(cli("--dataset", "synthetic", "--synthetic-rows", "300", "--synthetic-features", "6",
                         "--synthetic-classes", "3", "--sites", "north, south", "--overlap", "60",
                         "--site-columns", "x0,x1,x2,x3;x4,x5", "--out", str(out))) == 0  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sites"] == ["north", "south"] and manifest["num_classes"] == 3
    assert manifest["per_site"]["north"]["columns"] == ["x0", "x1", "x2", "x3"]
    assert manifest["source_sha256"] == {}
    frame, labels, _, _, _ = load_source("synthetic", None, rows=300, features=6, classes=3, seed=0)
    again, labels_again, _, _, _ = load_source("synthetic", None, rows=300, features=6, classes=3, seed=0)
    pd.testing.assert_frame_equal(frame, again)
    assert set(labels.tolist()) == {0, 1, 2} and (labels == labels_again).all()


def test_parse_sites():
    assert parse_sites("3") == ["site-1", "site-2", "site-3"]
    assert parse_sites("hospital, bank") == ["hospital", "bank"]


def test_cli_reports_errors(tmp_path, capsys):
    assert run_split(cli("--dataset", "credit_default", "--data-dir", str(tmp_path), "--overlap", "10",
                         "--out", str(tmp_path / "o"))) == 2  # fmt: skip
    expected = tmp_path / "credit_default" / "default_of_credit_card_clients.csv"
    assert f"{expected}: file not found" in capsys.readouterr().err
    assert run_split(cli("--dataset", "breast_cancer", "--synthetic-rows", "5", "--overlap", "10",
                         "--out", str(tmp_path / "o"))) == 2  # fmt: skip
    assert "only to --dataset synthetic" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_default_data_dir_is_shared_data():
    assert Path(cli("--dataset", "adult", "--overlap", "1", "--out", "x").data_dir) == Path("../shared/data")
