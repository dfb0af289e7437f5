"""vflflare.data.loading / preprocess: reading a party's folder, the embedded default, local preprocessing."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vflflare.cli.split import configure_split_parser, run_split
from vflflare.data.errors import DataError
from vflflare.data.loading import DataRequest, load_label_tables, load_site_tables, resolve_data_root
from vflflare.data.types import SiteTables

CUSTOM = Path(__file__).parents[1] / "custom"


def digest(tables: SiteTables) -> str:
    parts = [tables.site, *tables.train_ids, *tables.test_ids, *tables.feature_names]
    arrays = [tables.train.numeric, tables.train.categorical, tables.test.numeric, tables.test.categorical]
    hasher = hashlib.sha256("\n".join(parts).encode())
    for array in arrays:
        hasher.update(np.ascontiguousarray(array).tobytes())
    return hasher.hexdigest()


def test_embedded_default_is_the_cli_split(tmp_path):
    """data_root None must give exactly what `vflflare split --dataset breast_cancer --overlap 150` files give."""
    sites = ["alpha", "beta", "gamma"]
    parser = argparse.ArgumentParser()
    configure_split_parser(parser)
    out = tmp_path / "bc"
    args = parser.parse_args(["--dataset", "breast_cancer", "--sites", ",".join(sites), "--overlap", "150",
                              "--seed", "3", "--out", str(out)])  # fmt: skip
    assert run_split(args) == 0
    for site in sites:
        embedded, files = (
            load_site_tables(site, DataRequest(sites, None, 3)),
            load_site_tables(site, DataRequest(sites, str(out), 3)),
        )
        assert digest(embedded) == digest(files)
    embedded_labels = load_label_tables("server", DataRequest(sites, None, 3))
    file_labels = load_label_tables("server", DataRequest(sites, str(out), 3))
    assert embedded_labels.train_ids == file_labels.train_ids
    assert (embedded_labels.train_labels == file_labels.train_labels).all()
    assert (embedded_labels.test_labels == file_labels.test_labels).all()


def test_embedded_default_shapes_for_any_sites():
    sites = ["h1", "bank", "telco", "x"]
    tables = {site: load_site_tables(site, DataRequest(sites, None)) for site in sites}
    overlap = set.intersection(*(set(t.train_ids) for t in tables.values()))
    assert len(overlap) == 150
    assert sum(len(t.train_ids) - 150 for t in tables.values()) == 569 - 114 - 150
    assert [t.train.numeric.shape[1] for t in tables.values()] == [8, 8, 7, 7]
    assert all(t.test_ids == tables["h1"].test_ids and len(t.test_ids) == 114 for t in tables.values())
    labels = load_label_tables("bank", DataRequest(sites, None))  # labels go to whoever is the label party
    assert set(labels.train_ids) == overlap and labels.test_ids == tables["h1"].test_ids
    assert labels.num_classes == 2 and labels.train_labels.dtype == np.int64
    last = tables["x"]
    assert last.train.numeric.dtype == np.float32 and last.train.categorical.shape == (len(last.train_ids), 0)


def test_data_request_takes_lists_as_tuples_in_their_order():
    # callers pass a job's sites and JobConfig.id_normalize as lists: one request, whichever they hold
    request = DataRequest(["site-2", "site-1"], None, 3, id_normalize=["strip"])
    assert request == DataRequest(("site-2", "site-1"), None, 3, id_normalize=("strip",))
    assert request.sites == ("site-2", "site-1") and request.id_normalize == ("strip",)
    assert hash(request) == hash(DataRequest(("site-2", "site-1"), None, 3, id_normalize=("strip",)))
    assert DataRequest(["a"]) == DataRequest(("a",), None, 0, "standard", ())  # the defaults of a bare request


def test_embedded_default_identical_across_processes():
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
        "from test_data_loading import digest; from vflflare.data.loading import DataRequest, load_site_tables;"
        "print(digest(load_site_tables('q', DataRequest(['p', 'q'], None, 5))))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    other = subprocess.run([sys.executable, "-c", script, str(CUSTOM), str(Path(__file__).parent)],
                           capture_output=True, text=True, env=env, check=True)  # fmt: skip
    assert other.stdout.strip() == digest(load_site_tables("q", DataRequest(["p", "q"], None, 5)))
    assert digest(load_site_tables("q", DataRequest(["p", "q"], None, 6))) != digest(
        load_site_tables("q", DataRequest(["p", "q"], None, 5))
    )


def test_preprocessing_uses_local_train_statistics_only(split_root):
    root = str(split_root)
    tables = load_site_tables("site-1", DataRequest([], root))
    train = pd.read_csv(split_root / "site-1" / "train.csv").set_index("id")
    test = pd.read_csv(split_root / "site-1" / "test.csv").set_index("id")
    assert tables.feature_names == list(train.columns)
    np.testing.assert_allclose(tables.train.numeric.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(tables.train.numeric.std(axis=0), 1, atol=1e-5)
    expected_test = (test - train.mean()) / train.std(ddof=0)
    np.testing.assert_allclose(tables.test.numeric, expected_test.loc[tables.test_ids].to_numpy(), rtol=1e-5, atol=1e-5)

    # Another party's data and this party's test rows do not move the fitted statistics.
    other = pd.read_csv(split_root / "site-2" / "train.csv")
    other.iloc[:, 1:] *= 1000
    other.to_csv(split_root / "site-2" / "train.csv", index=False)
    test.iloc[:, :] += 50
    test.reset_index().to_csv(split_root / "site-1" / "test.csv", index=False)
    again = load_site_tables("site-1", DataRequest([], root))
    np.testing.assert_array_equal(again.train.numeric, tables.train.numeric)
    assert not np.allclose(again.test.numeric, tables.test.numeric)


def test_categorical_encoding_and_constant_columns(tmp_path, write_csv):
    site = tmp_path / "s"
    wide = [f"w{i:02d}" for i in range(20)]
    write_csv(site / "train.csv", ["id", "narrow", "const", "wide", "x"],
              [[f"r{i}", ["a", " a", "b"][i % 3], 7, wide[i], i] for i in range(20)])  # fmt: skip
    write_csv(site / "test.csv", ["wide", "id", "x", "narrow", "const"],
              [["w03", "t0", 1, "b", 7], ["unseen", "t1", 2, "c", 7]])  # fmt: skip
    (site / "schema.json").write_text(json.dumps({"categorical_columns": ["narrow", "wide"]}))
    tables = load_site_tables("s", DataRequest([], str(tmp_path)))

    assert tables.feature_names == ["narrow= a", "narrow=a", "narrow=b", "const", "x", "wide"]
    assert tables.train.cardinalities == [21] and tables.train.categorical.dtype == np.int64
    np.testing.assert_array_equal(tables.train.numeric[:3, :3], [[0, 1, 0], [1, 0, 0], [0, 0, 1]])
    np.testing.assert_array_equal(tables.train.numeric[:, 3], 0)  # std 0: x - mean, divided by 1
    np.testing.assert_array_equal(tables.train.categorical[:, 0], np.arange(1, 21))
    np.testing.assert_array_equal(tables.test.categorical[:, 0], [4, 0])  # unseen -> 0
    np.testing.assert_array_equal(tables.test.numeric[:, :3], [[0, 0, 1], [0, 0, 0]])  # unseen -> all zero
    x = np.arange(20.0)
    np.testing.assert_allclose(tables.test.numeric[:, 4], (np.array([1.0, 2.0]) - x.mean()) / x.std(), rtol=1e-6)
    assert tables.test_ids == ["t0", "t1"]


def test_custom_id_column_and_site_label_owner(tmp_path, write_csv):
    folder = tmp_path / "site-1"
    write_csv(folder / "train.csv", ["f", "key"], [[0.5, "k1"], [1.5, "k2"], [2.5, "k3"]])
    write_csv(folder / "test.csv", ["key", "f"], [["k9", 3.0]])
    (folder / "schema.json").write_text(json.dumps({"id_column": "key"}))
    write_csv(folder / "train_labels.csv", ["key", "y"], [["k1", 2], ["k2", 0]])
    write_csv(folder / "test_labels.csv", ["key", "y"], [["k9", 1]])
    (folder / "labels.json").write_text(json.dumps({"num_classes": 4, "id_column": "key", "label_column": "y"}))
    tables = load_site_tables("site-1", DataRequest(["site-1", "site-2"], str(tmp_path)))
    assert tables.train_ids == ["k1", "k2", "k3"] and tables.feature_names == ["f"]
    # a declared C above the classes present used to switch the metric silently; now it names the counts
    with pytest.raises(
        DataError,
        match=r"labels.json: declares num_classes 4 but the train and test labels hold 3 "
        r"classes \(rows per class: \{0: 1, 1: 1, 2: 1\}\); set num_classes to 3",
    ):
        load_label_tables("site-1", DataRequest(["site-1", "site-2"], str(tmp_path)))
    (folder / "labels.json").write_text(json.dumps({"num_classes": 3, "id_column": "key", "label_column": "y"}))
    labels = load_label_tables("site-1", DataRequest(["site-1", "site-2"], str(tmp_path)))
    assert labels.num_classes == 3 and labels.train_labels.tolist() == [2, 0] and labels.test_ids == ["k9"]


def test_num_classes_inferred_without_labels_json(split_root):
    (split_root / "server" / "labels.json").unlink()
    labels = load_label_tables("server", DataRequest([], str(split_root)))
    assert labels.num_classes == 2 and len(labels.train_ids) == 150 and len(labels.test_ids) == 114


def test_resolve_data_root(monkeypatch):
    monkeypatch.delenv("VFLFLARE_DATA_ROOT", raising=False)
    assert resolve_data_root() is None
    monkeypatch.setenv("VFLFLARE_DATA_ROOT", "")
    assert resolve_data_root() is None
    monkeypatch.setenv("VFLFLARE_DATA_ROOT", "/data/vfl")
    assert resolve_data_root() == "/data/vfl"


@pytest.mark.parametrize("name", ["train.csv", "test.csv"])
def test_blank_lines_keep_line_numbers(split_root, name):
    """A blank line holds no values; later rows must still be reported with their real line numbers."""
    path = split_root / "site-1" / name
    lines = path.read_text().splitlines()
    lines.insert(3, "")
    fields = lines[9].split(",")
    fields[1] = "oops"
    lines[9] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n\n")
    with pytest.raises(ValueError, match=f"{name} line 10 \\(id '{fields[0]}'\\), column 'mean radius'"):
        load_site_tables("site-1", DataRequest([], str(split_root)))


def test_labels_from_the_owner_sites_label_column(tmp_path, write_csv):
    """A label owner may keep the label in its own tables; an empty train cell is an unlabeled row."""
    folder = tmp_path / "site-1"
    write_csv(folder / "train.csv", ["id", "f", "y", "g"],
              [["r1", 0.5, 1, 3], ["r2", 1.5, "", 4], ["r3", 2.5, 0, 5],
               ["r4", 3.5, 2, 6], ["r5", 4.5, "", 7]])  # fmt: skip
    write_csv(folder / "test.csv", ["y", "g", "f", "id"], [[1, 1, 1.0, "t1"], [0, 2, 2.0, "t2"]])
    (folder / "schema.json").write_text(json.dumps({"label_column": "y"}))
    tables = load_site_tables("site-1", DataRequest(["site-1", "site-2"], str(tmp_path)))
    assert tables.feature_names == ["f", "g"] and tables.train.numeric.shape == (5, 2)  # label never a feature
    assert tables.train_ids == ["r1", "r2", "r3", "r4", "r5"]  # unlabeled rows keep their features
    # three label values but no num_classes: the binary default refuses the third, never infers C = 3
    with pytest.raises(
        DataError,
        match=r"train.csv line 5 \(id 'r4'\), column 'y': label 2 outside 0..1 \(C = 2 by "
        r"default, as schema.json declares no num_classes; for a 3-class job declare "
        r"\"num_classes\": 3 in schema.json\); rows per class in this file: "
        r"\{0: 1, 1: 1, 2: 1\}",
    ):
        load_label_tables("site-1", DataRequest(["site-1", "site-2"], str(tmp_path)))
    (folder / "schema.json").write_text(json.dumps({"label_column": "y", "num_classes": 3}))
    labels = load_label_tables("site-1", DataRequest(["site-1", "site-2"], str(tmp_path)))
    assert labels.train_ids == ["r1", "r3", "r4"] and labels.train_labels.tolist() == [1, 0, 2]
    assert labels.test_ids == ["t1", "t2"] and labels.test_labels.tolist() == [1, 0]
    assert labels.num_classes == 3 and labels.train_labels.dtype == np.int64

    (folder / "schema.json").write_text(json.dumps({"label_column": "y", "num_classes": 5}))
    with pytest.raises(DataError, match=r"schema.json: declares num_classes 5 but the train and test labels hold 3"):
        load_label_tables("site-1", DataRequest([], str(tmp_path)))
    # A site that is not the label owner but declares a label column: still excluded from its features.
    assert load_site_tables("site-1", DataRequest([], str(tmp_path))).feature_names == ["f", "g"]
