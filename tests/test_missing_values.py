"""Issue 28 item 2: missing cells are filled per site as its schema.json `missing` says, from its own training
rows (scikit-learn's SimpleImputer), with an indicator input; the fill travels with the saved model, so
test and scoring rows are filled as training rows were; every filled cell is counted."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scoring_helpers import score_the_test_rows

from vflflare import cli
from vflflare.data.errors import DataError
from vflflare.data.loading import DataRequest, load_site_tables
from vflflare.data.preprocess import Preprocessor, SiteInput
from vflflare.data.schema import MissingPolicy, TableSchema
from vflflare.data.table import MISSING_CATEGORY, FeatureTable, parse_csv, parse_features
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.model_store import LABEL_DIR, models_dir, read_predictions
from vflflare.registry import make_config

SITES = ["site-1", "site-2"]
TRAIN = "id,age,city,income\na,30,x,1\nb,,y,2\nc,50,,NA\nd,40,x,100\ne,nan,y,3\n"


def features(text: str, policy: MissingPolicy = MissingPolicy()):
    schema = TableSchema(categorical_columns=("city",), missing=policy)
    return parse_features(parse_csv("site 's'", "s/train.csv", io.StringIO(text), "id"), schema)


def test_missing_cells_get_the_training_median_and_an_indicator():
    train = features(TRAIN)
    assert train.columns["city"].tolist() == ["x", "y", MISSING_CATEGORY, "x", "y"]
    pre = Preprocessor.fit(train)
    assert pre.fills == {"age": 40.0, "income": 2.5}  # medians of the training values present
    assert pre.indicators == ("age", "income")
    assert pre.numeric_names == [
        "age",
        "age#missing",
        f"city={MISSING_CATEGORY}",
        "city=x",
        "city=y",
        "income",
        "income#missing",
    ]
    block = pre.transform(features(TRAIN)).numeric
    age = np.array([30, 40, 50, 40, 40.0])  # the filled column is standardised like any other
    assert np.allclose(block[:, 0], (age - age.mean()) / age.std())
    assert block[:, 1].tolist() == [0, 1, 0, 0, 1]
    # a test row missing a column that training always had is filled too, with the training median
    test = features("id,age,city,income\nt,,x,5\n")
    assert pre.transform(test).numeric[0, 0] == pytest.approx((40 - age.mean()) / age.std())


def test_mean_zero_and_no_indicator():
    mean = MissingPolicy("mean")
    assert Preprocessor.fit(features(TRAIN, mean), missing=mean).fills["income"] == pytest.approx(106 / 4)
    zero_policy = MissingPolicy("zero", indicator=False)
    zero = Preprocessor.fit(features(TRAIN, zero_policy), missing=zero_policy)
    assert zero.fills["age"] == 0.0 and zero.indicators == ()
    assert "age#missing" not in zero.numeric_names


def test_clean_tables_give_the_same_block_under_every_policy():
    clean = "id,age,city\na,30,x\nb,20,y\nc,50,x\n"
    strict = MissingPolicy("error", "error", False)
    filled = Preprocessor.fit(features(clean))
    refused = Preprocessor.fit(features(clean, strict), missing=strict)
    assert filled.numeric_names == refused.numeric_names == ["age", "city=x", "city=y"]
    assert np.array_equal(filled.transform(features(clean)).numeric, refused.transform(features(clean, strict)).numeric)


def test_a_column_missing_in_every_training_row_is_an_error_naming_it():
    with pytest.raises(DataError, match="column 'age': every training row is missing this column"):
        Preprocessor.fit(features("id,age,city\na,,x\nb,NA,y\n"))


@pytest.mark.parametrize(
    "missing, message",
    [
        ({"numeric": "mode"}, "'missing.numeric' must be one of ['median', 'mean', 'zero', 'error'], got 'mode'"),
        ({"categorical": "drop"}, "'missing.categorical' must be one of ['category', 'error'], got 'drop'"),
        ({"indicator": "yes"}, "'missing.indicator' must be true or false, got 'yes'"),
        (
            {"numerc": "mean"},
            "'missing' must be an object with keys numeric, categorical, indicator; got {'numerc': 'mean'}",
        ),
    ],
)
def test_a_wrong_missing_policy_is_an_error_naming_the_file(split_root, missing, message):
    path = split_root / "site-1" / "schema.json"
    path.write_text(json.dumps({"missing": missing}))
    with pytest.raises(DataError) as error:
        load_site_tables("site-1", DataRequest(SITES, str(split_root)))
    assert str(error.value) == f"site 'site-1': {path}: {message}"


def test_the_policy_is_saved_with_the_model_and_old_models_keep_refusing():
    site_input = SiteInput("id", ["city"], [], Preprocessor.fit(features(TRAIN)), MissingPolicy("mean"))
    again = SiteInput.from_dict(json.loads(json.dumps(site_input.to_dict())))
    assert again == site_input
    old = site_input.to_dict()
    del old["missing"]
    assert SiteInput.from_dict(old).missing == MissingPolicy("error", "error", False)


def blank(path: Path, every: int, column: str) -> int:
    """Empty `column` in every `every`-th data row of a CSV; how many cells were emptied."""
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    at = rows[0].index(column)
    for row in rows[1::every]:
        row[at] = ""
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    return len(rows[1::every])


def test_a_job_trains_and_scores_with_missing_cells_and_counts_them(tmp_path):
    data = tmp_path / "data"
    assert cli.main(["split", "--dataset", "breast_cancer", "--overlap", "200", "--out", str(data)]) == 0
    column = next(iter(csv.reader((data / "site-1" / "train.csv").open())))[1]
    emptied = blank(data / "site-1" / "train.csv", 5, column)
    blank(data / "site-1" / "test.csv", 4, column)
    score_the_test_rows(data, SITES)
    runs = tmp_path / "runs"
    trained = run_inprocess(make_config(algorithm="oneshot", ssl_epochs=2), SITES, str(data), runs_root=str(runs))
    assert trained["metrics"]["test_auc"] > 0.95
    checks = trained["alignment"]["data_checks"]["site-1"]
    assert checks["train_missing"] == {column: emptied}  # every filled cell counted, by column
    assert checks["missing"][column] > 0
    scored = run_inprocess(
        make_config(algorithm="vertical_inference", model_job=trained["job_id"]), SITES, str(data), runs_root=str(runs)
    )
    # the scoring rows (the test rows, gaps included) are filled with the saved training fills: exactly the
    # training job's test predictions, and no row with a missing cell is dropped
    expected = read_predictions(models_dir(runs / "server", trained["job_id"]) / LABEL_DIR / "test_predictions.csv")
    got = read_predictions(Path(scored["training"]["predictions"]))
    assert len(got) == trained["rows"]["test"] and got == expected


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(
        st.floats(allow_nan=False, allow_infinity=False, width=64) | st.sampled_from([0.0, 1.0, 1e308, -1e308]),
        min_size=1,
        max_size=40,
    )
)
def test_the_median_fill_is_simple_imputers(values):
    # fill_value computes a gap-free column's median with numpy: the very number SimpleImputer gives
    from sklearn.impute import SimpleImputer

    from vflflare.data.preprocess import fill_value

    column = np.array(values)
    table = FeatureTable(None, {"x": column}, [])  # type: ignore[arg-type]
    with np.errstate(over="ignore", invalid="ignore"):
        expected = float(SimpleImputer(strategy="median").fit(column.reshape(-1, 1)).statistics_[0])
    if not np.isfinite(expected):
        expected = float(np.nanpercentile(column, 50, method="lower"))
    assert fill_value(table, "x", "median") == expected
