"""Training statistics that hold at test and scoring time (issue 25): constant columns, values outside the
training range, clipping, unseen categories, and labels that imply more classes than declared."""

from __future__ import annotations

import io
import json
import logging

import numpy as np
import pandas as pd
import pytest

from vflflare.cli import main as vflflare_main
from vflflare.data.checks import (
    CLIP_RANGES,
    OUTSIDE_SHARE,
    check_rows,
    clip,
    clip_bounds,
    describe_checks,
    out_of_range,
    public_checks,
)
from vflflare.data.errors import DataError
from vflflare.data.loading import DataRequest, load_label_tables, load_site_tables
from vflflare.data.preprocess import Preprocessor, SiteInput
from vflflare.data.schema import NUMERIC_TRANSFORMS, TableSchema
from vflflare.data.table import FeatureTable, parse_csv, parse_features
from vflflare.protocol.alignment_report import format_report
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.scoring import read_new_rows
from vflflare.registry import make_config

SITES = ["site-1", "site-2"]


def table(
    rows: list[list[object]], header: tuple[str, ...] = ("id", "c", "x"), categorical: tuple[str, ...] = ()
) -> FeatureTable:
    text = "\n".join(",".join(str(v) for v in row) for row in [list(header), *rows]) + "\n"
    return parse_features(
        parse_csv("site 'site-1'", "/d/site-1/test.csv", io.StringIO(text), "id"),
        TableSchema(categorical_columns=categorical),
    )


def test_clip_bound_is_the_training_range_widened_by_three_ranges():
    assert CLIP_RANGES == 3.0 and clip_bounds(0.0, 10.0) == (-30.0, 40.0)
    assert clip_bounds(5.0, 5.0) == (5.0, 5.0)  # a constant column: every value becomes the training one
    inside = np.array([-29.999999999, 0.1, 39.99])
    assert clip(inside, 0.0, 10.0).tobytes() == inside.tobytes()  # untouched bit for bit
    assert clip(np.array([-1e300, 1e300]), 0.0, 10.0).tolist() == [-30.0, 40.0]


@pytest.mark.parametrize("transform", NUMERIC_TRANSFORMS)
def test_constant_training_column_is_a_fixed_zero_at_train_test_and_scoring(transform):
    """0.1 in every training row: its rounded mean is not 0.1, so the old (x - mean) / 1 was not even 0 in
    training; a test value of 1500 went in as ~1500. Now 0 everywhere, at the same input width."""
    rng = np.random.default_rng(0)
    train = table([[i, 0.1, float(v)] for i, v in enumerate(rng.normal(size=300))])
    pre = Preprocessor.fit(train, numeric_transform=transform)
    assert pre.constant_columns == ["c"]
    width = pre.numeric_names.index(next(n for n in pre.numeric_names if n.startswith("x")))  # c's inputs come first
    assert width == 1  # one input, as before: saved models keep their shapes
    test = table([[1000, 1500.0, 0.0], [1001, -3.0, 1.0], [1002, 0.1, 2.0]])
    assert (pre.transform(train).numeric[:, 0] == 0).all()
    assert (pre.transform(test).numeric[:, 0] == 0).all()
    saved = SiteInput.from_dict(json.loads(json.dumps(SiteInput("id", [], [], pre).to_dict()))).preprocessor
    assert saved == pre and (saved.transform(test).numeric[:, 0] == 0).all()  # scoring: the saved preprocessing


def test_preprocessing_saved_before_ranges_clips_nothing():
    pre = Preprocessor(("c",), {"c": (0.0, 1.0)}, {}, {})  # as SiteInput.from_dict reads an older file
    assert pre.transform(table([[1, 5.0]], ("id", "c"))).numeric.tolist() == [[5.0]]


def test_out_of_range_counts_share_threshold_and_clipping():
    ranges = {"c": (0.0, 10.0), "x": (0.0, 10.0)}
    n = 200
    # c: 10 of 200 rows (5 %, not above OUTSIDE_SHARE) just outside; x: 11 of 200 (5.5 %) outside, one far
    rows = [[i, 5.0, 5.0] for i in range(n)]
    for i in range(10):
        rows[i][1] = 11.0 if i % 2 else -1.0
    for i in range(11):
        rows[20 + i][2] = 12.0 if i % 2 else -0.5
    rows[23][2] = 1e9
    found = out_of_range(table(rows), ranges)
    assert OUTSIDE_SHARE == 0.05 and list(found) == ["x"]
    assert found["x"] == {
        "rows": 11,
        "share": 11 / n,
        "clipped": 1,
        "range": [0.0, 10.0],
        "first_line": 25,
        "first_value": 1e9,
    }  # the first clipped value, for the site's log
    rows[0][1] = 1e6  # one clipped value is always reported, whatever the share
    assert out_of_range(table(rows), ranges)["c"]["clipped"] == 1


def test_reports_keep_values_at_the_site():
    fitted = Preprocessor.fit(table([[0, 7.0, "a"], [1, 7.0, "b"]], categorical=("x",)))
    rows = [[2, 9.0, "a"], [3, 7.0, "zz"]]
    block, checks = fitted.checked_transform(table(rows, categorical=("x",)))
    assert checks == check_rows(table(rows, categorical=("x",)), fitted.ranges, {**fitted.one_hot, **fitted.embedded})
    np.testing.assert_array_equal(block.numeric, fitted.transform(table(rows, categorical=("x",))).numeric)
    assert checks["constant_columns"] == ["c"] and checks["out_of_range"]["c"]["clipped"] == 1
    assert checks["unseen_categories"] == {"x": {"rows": 1, "first_line": 3, "first_value": "zz"}}
    public = public_checks(checks)
    assert public["out_of_range"] == {"c": {"rows": 1, "share": 0.5, "clipped": 1, "first_line": 2}}
    assert public["unseen_categories"] == {"x": {"rows": 1, "first_line": 3}}
    assert describe_checks("site 'site-1'", public) == [
        "site 'site-1': column 'c' holds one value in every training row: it carries no information and is fed as a "
        "fixed 0 in training, test and scoring",
        "site 'site-1': test.csv: column 'c': 1 of 2 rows (50.0%) outside the training range; 1 far outside, clipped "
        "to 3 training ranges beyond it (first: line 2)",
        "site 'site-1': test.csv: column 'x': 1 of 2 rows with a category training never saw, fed as unknown "
        "(first: line 3)",
    ]
    local = describe_checks("site 'site-1'", checks)  # the site's own log shows the values
    assert local[1].endswith(
        "outside the training range [7, 7]; 1 far outside, clipped to 3 training ranges beyond it (first: line 2, 9.0)"
    ) and local[2].endswith("(first: line 3, 'zz')")


def test_scoring_counts_and_clips_with_the_saved_ranges(tmp_path):
    pre = Preprocessor(("size",), {"size": (2.0, 1.0)}, {}, {}, ranges={"size": (1.0, 3.0)})
    path = tmp_path / "score.csv"
    path.write_text("id,size\na,1.0\nb,4.0\nc,1e12\n")
    _, block, checks = read_new_rows("site-1", path, SiteInput("id", [], [], pre))
    assert block.numeric[:, 0].tolist() == [-1.0, 2.0, 7.0]  # 1e12 clipped to 3 + 3 * 2 = 9
    assert checks["out_of_range"]["size"] == {
        "rows": 2,
        "share": 2 / 3,
        "clipped": 1,
        "range": [1.0, 3.0],
        "first_line": 4,
        "first_value": 1e12,
    }


@pytest.fixture(scope="module")
def credit_default(tmp_path_factory, request):
    from conftest import SHARED_DATA

    root = tmp_path_factory.mktemp("credit")
    clean, probe = root / "clean", root / "probe"
    assert (
        vflflare_main(
            [
                "split",
                "--dataset",
                "credit_default",
                "--data-dir",
                str(SHARED_DATA),
                "--overlap",
                "1000",
                "--seed",
                "0",
                "--out",
                str(clean),
            ]
        )
        == 0
    )
    vflflare_main(
        [
            "split",
            "--dataset",
            "credit_default",
            "--data-dir",
            str(SHARED_DATA),
            "--overlap",
            "1000",
            "--seed",
            "0",
            "--out",
            str(probe),
        ]
    )
    train = pd.read_csv(probe / "site-2" / "train.csv")
    train["PAY_AMT1"] = 0  # constant in training; it still varies in test.csv
    train.to_csv(probe / "site-2" / "train.csv", index=False)
    return clean, probe


@pytest.mark.needs_data("credit_default")
def test_column_constant_in_training_no_longer_wrecks_the_test_scores(credit_default, caplog):
    """The issue's probe: one-shot test AUC fell from 0.728 to 0.623 here (0.739 to 0.578 at the default
    ssl_epochs), with no warning. Now the column is a fixed 0 input and the report names it."""
    clean, probe = credit_default
    cfg = make_config(algorithm="oneshot", seed=0, ssl_epochs=1)
    base = run_inprocess(cfg, SITES, str(clean))
    with caplog.at_level(logging.INFO):
        broken = run_inprocess(cfg, SITES, str(probe))
    assert abs(broken["metrics"]["test_auc"] - base["metrics"]["test_auc"]) < 0.01, (base["metrics"], broken["metrics"])
    checks = broken["alignment"]["data_checks"]["site-2"]
    assert checks["constant_columns"] == ["PAY_AMT1"]
    assert checks["out_of_range"]["PAY_AMT1"]["clipped"] > 0.5 * checks["rows"]  # most test rows pay something
    assert "site 'site-2': column 'PAY_AMT1' holds one value in every training row" in format_report(
        broken["alignment"]
    )
    assert "site 'site-2': column 'PAY_AMT1' holds one value in every training row" in caplog.text  # the site's log
    assert "data_checks" not in base["alignment"]  # clean data: nothing to report, nothing clipped


def test_training_job_counts_unseen_test_categories(tmp_path, write_csv):
    folder = tmp_path / "site-1"
    write_csv(folder / "train.csv", ["id", "colour", "x"], [[f"r{i}", ["red", "blue"][i % 2], i] for i in range(10)])
    write_csv(folder / "test.csv", ["id", "colour", "x"], [["t1", "red", 1], ["t2", "mauve", 2], ["t3", "teal", 3]])
    (folder / "schema.json").write_text(json.dumps({"categorical_columns": ["colour"]}))
    tables = load_site_tables("site-1", DataRequest([], str(tmp_path)))
    assert tables.data_checks["unseen_categories"] == {"colour": {"rows": 2, "first_line": 3, "first_value": "mauve"}}


def test_a_third_label_value_is_an_error_not_a_three_class_job(split_root):
    """Without num_classes a job is binary: a stray label 2 used to make it 3-class (accuracy, not AUC)."""
    folder = split_root / "server"
    (folder / "labels.json").unlink()
    path = folder / "train_labels.csv"
    lines = path.read_text().splitlines()
    row_id = lines[6].split(",")[0]
    lines[6] = f"{row_id},2"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as error:
        load_label_tables("server", DataRequest(SITES, str(split_root)))
    message = str(error.value)
    assert message.startswith(
        f"label party 'server': {path} line 7 (id '{row_id}'), column 'label': label 2 outside "
        "0..1 (C = 2 by default, as labels.json declares no num_classes; for a 3-class job "
        'declare "num_classes": 3 in labels.json); rows per class in this file: {0: '
    )
    assert ", 2: 1}" in message
    (folder / "labels.json").write_text(json.dumps({"num_classes": 3}))
    assert load_label_tables("server", DataRequest(SITES, str(split_root))).num_classes == 3


def test_a_label_beyond_the_declared_classes_shows_the_classes_seen(split_root):
    path = split_root / "server" / "test_labels.csv"
    lines = path.read_text().splitlines()
    lines[2] = lines[2].split(",")[0] + ",5"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        DataError,
        match=r"test_labels.csv line 3 .*: label 5 outside 0..1 \(C = 2 from labels.json\); "
        r"rows per class in this file: \{0: \d+, 1: \d+, 5: 1\}",
    ):
        load_label_tables("server", DataRequest(SITES, str(split_root)))


@pytest.mark.parametrize(
    "args, classes",
    [
        (["--dataset", "synthetic", "--overlap", "100", "--synthetic-rows", "600", "--synthetic-classes", "3"], 3),
        (
            [
                "--dataset",
                "synthetic",
                "--overlap",
                "100",
                "--synthetic-rows",
                "600",
                "--synthetic-classes",
                "3",
                "--label-owner",
                "site-2",
                "--label-in-table",
            ],
            3,
        ),
        (["--dataset", "breast_cancer", "--silo-space"], 2),
    ],
)
def test_multi_class_and_silo_splits_declare_their_classes(tmp_path, args, classes):
    out = tmp_path / "data"
    assert vflflare_main(["split", *args, "--out", str(out)]) == 0
    owner = "site-2" if "--label-in-table" in args else "site-1" if "--silo-space" in args else "server"
    assert load_label_tables(owner, DataRequest([], str(out))).num_classes == classes
