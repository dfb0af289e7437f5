"""Per-site numeric transform: standard | signed_log | auto | quantile, or the piecewise-linear encoding ple
(data/preprocess.py), chosen by the site's schema.json or, when that does not say, by the job's VFLConfig."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vflflare.data.checks import CLIP_RANGES, clip
from vflflare.data.errors import DataError
from vflflare.data.loading import DataRequest, load_site_tables
from vflflare.data.preprocess import (
    Preprocessor,
    is_heavy_tailed,
    piecewise_linear,
    ple_edges,
    signed_log,
    tail_statistics,
)
from vflflare.data.schema import TableSchema, read_table_schema
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.registry import make_config


def test_signed_log_values():
    x = np.array([-1e6, -np.e + 1, -1.0, 0.0, 0.5, np.e - 1, 1e6])
    expected = [-np.log1p(1e6), -1.0, -np.log(2.0), 0.0, np.log(1.5), 1.0, np.log1p(1e6)]
    np.testing.assert_allclose(signed_log(x), expected)
    assert np.all(np.diff(signed_log(np.linspace(-50, 50, 101))) > 0)  # monotone: keeps every order


def test_auto_rule_skewed_vs_normal_columns():
    rng = np.random.default_rng(0)
    normal = rng.normal(50_000.0, 10_000.0, 5_000)  # large values but symmetric: no log
    lognormal = rng.lognormal(8.0, 1.5, 5_000)  # amounts: a long right tail
    heavy_symmetric = rng.standard_t(3, 5_000)  # skew ~0 but fat tails (excess kurtosis >> 7)
    binary = (rng.random(5_000) < 0.3).astype(float)
    skew, kurt = tail_statistics(normal)
    assert abs(skew) < 0.2 and abs(kurt) < 0.3
    assert not is_heavy_tailed(normal) and not is_heavy_tailed(binary)
    assert is_heavy_tailed(lognormal) and is_heavy_tailed(heavy_symmetric)
    assert tail_statistics(np.full(10, 3.0)) == (0.0, 0.0) and not is_heavy_tailed(np.full(10, 3.0))


def _write_site(tmp_path, write_csv, schema: dict | None = None):
    rng = np.random.default_rng(1)
    amount, normal = rng.lognormal(8.0, 1.5, 400), rng.normal(0.0, 1.0, 400)
    folder = tmp_path / "site-1"
    write_csv(folder / "train.csv", ["id", "amount", "normal"],
              [[f"r{i}", amount[i], normal[i]] for i in range(400)])  # fmt: skip
    write_csv(folder / "test.csv", ["id", "amount", "normal"], [["t0", 1e7, 5.0], ["t1", -3.0, 0.0]])
    if schema is not None:
        (folder / "schema.json").write_text(json.dumps(schema))
    return amount, normal


@pytest.mark.parametrize("transform, logged", [("standard", []), ("signed_log", ["amount", "normal"]),
                                               ("auto", ["amount"])])  # fmt: skip
def test_transforms_use_training_statistics_only(tmp_path, write_csv, transform, logged):
    """Test rows are transformed with the training rows' choice of columns, mean and std: a test value
    far outside the training range (1e7) or negative (-3) changes nothing that was fitted."""
    amount, normal = _write_site(tmp_path, write_csv)
    tables = load_site_tables("site-1", DataRequest([], str(tmp_path), numeric_transform=transform))
    assert tables.numeric_transform == transform and tables.log_columns == logged
    for column, (train_values, test_values) in enumerate([(amount, [1e7, -3.0]), (normal, [5.0, 0.0])]):
        name = ["amount", "normal"][column]
        f = signed_log if name in logged else (lambda v: np.asarray(v, dtype=np.float64))
        fitted = f(train_values)
        np.testing.assert_allclose(tables.train.numeric[:, column], (fitted - fitted.mean()) / fitted.std(),
                                   rtol=1e-5, atol=1e-5)  # fmt: skip
        # clipped to the training bound first (1e7 is far beyond this amount's training values)
        fed = f(clip(np.asarray(test_values), train_values.min(), train_values.max()))
        np.testing.assert_allclose(tables.test.numeric[:, column], (fed - fitted.mean()) / fitted.std(),
                                   rtol=1e-5, atol=1e-5)  # fmt: skip
    assert tables.data_checks["out_of_range"]["amount"]["clipped"] == 1


def test_schema_key_wins_over_the_job_setting(tmp_path, write_csv):
    _write_site(tmp_path, write_csv, {"numeric_transform": "auto"})
    assert load_site_tables("site-1", DataRequest([], str(tmp_path))).log_columns == ["amount"]
    assert load_site_tables("site-1", DataRequest([], str(tmp_path), numeric_transform="signed_log")).log_columns == [
        "amount"
    ]
    (tmp_path / "site-1" / "schema.json").write_text(json.dumps({"numeric_transform": "standard"}))
    assert load_site_tables("site-1", DataRequest([], str(tmp_path), numeric_transform="signed_log")).log_columns == []


def test_schema_key_round_trip_and_bad_values(tmp_path):
    path = tmp_path / "schema.json"
    assert TableSchema().to_dict() == {"id_column": "id", "categorical_columns": []}  # unset: not written
    path.write_text(json.dumps(TableSchema(numeric_transform="signed_log").to_dict()))
    assert read_table_schema("site 'a'", path).numeric_transform == "signed_log"
    for bad in ("log", "", 1, ["auto"], None):
        path.write_text(json.dumps({"numeric_transform": bad}))
        if bad is None:  # null = not said, like an absent key
            assert read_table_schema("site 'a'", path).numeric_transform is None
            continue
        with pytest.raises(DataError, match="'numeric_transform' must be one of"):
            read_table_schema("site 'a'", path)
    path.write_text(json.dumps({"numeric_transfrom": "auto"}))  # misspelt: an error, not the default
    with pytest.raises(DataError, match="unknown keys"):
        read_table_schema("site 'a'", path)


def test_config_field_validated_and_honoured_by_the_site_setup():
    with pytest.raises(ValueError, match="numeric_transform must be one of"):
        make_config(numeric_transform="log")
    with pytest.raises(ValueError, match="numeric_transform"):
        Preprocessor.fit(None, numeric_transform="log")  # type: ignore[arg-type]
    runtime = SiteRuntime("site-1", None)  # the embedded breast cancer split: no schema.json to override
    runtime.handle("setup", {"config": make_config(numeric_transform="auto").to_dict(), "sites": ["site-1", "site-2"],
                             "salt": "s"})  # fmt: skip
    tables = runtime.party.view.tables
    assert tables.numeric_transform == "auto" and 0 < len(tables.log_columns) < len(tables.feature_names)
    default = SiteRuntime("site-1", None)
    default.handle("setup", {"config": make_config().to_dict(), "sites": ["site-1", "site-2"], "salt": "s"})
    assert default.party.view.tables.numeric_transform == "standard" and default.party.view.tables.log_columns == []


def test_quantile_transform_gives_normal_scores_from_training_knots_only(tmp_path, write_csv):
    """`quantile`: training values become roughly N(0, 1) whatever their shape, in the same order; test
    values are placed among the training knots, and one beyond them is clipped, not infinite."""
    from scipy.stats import skew

    amount, normal = _write_site(tmp_path, write_csv)
    tables = load_site_tables("site-1", DataRequest([], str(tmp_path), numeric_transform="quantile"))
    scores = tables.train.numeric[:, 0]
    assert abs(skew(scores)) < 0.1 and abs(scores.mean()) < 1e-6 and abs(scores.std() - 1) < 1e-5
    assert (np.argsort(scores, kind="stable") == np.argsort(amount, kind="stable")).all()  # order kept
    high, low = tables.test.numeric[:, 0]  # 1e7 beyond the largest training amount, -3 below the smallest
    assert np.isfinite([high, low]).all() and high == pytest.approx(scores.max(), abs=0.1)
    assert low == pytest.approx(scores.min(), abs=0.1)  # the extremes of training sit at the clipped ranks too
    # a saved model's preprocessing gives the same block (model_store.py)
    from vflflare.data.preprocess import SiteInput

    site_input = tables.site_input
    assert SiteInput.from_dict(json.loads(json.dumps(site_input.to_dict()))).preprocessor == site_input.preprocessor


def test_piecewise_linear_encoding_by_hand():
    """`ple` (Gorishniy et al. 2022, Eq. 1), by rtdl_num_embeddings: edges 0, 1, 3 -> bin 1 (x - 0) / 1, bin 2
    (x - 1) / 2; inside [0, 3] every value is in [0, 1]; the first bin goes on below its edge, the last above
    its edge."""
    encoded = piecewise_linear(np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 5.0]), (0.0, 1.0, 3.0))
    expected = [[-1.0, 0.0], [0.0, 0.0], [0.5, 0.0], [1.0, 0.0], [1.0, 0.5], [1.0, 1.0], [1.0, 2.0]]
    np.testing.assert_allclose(encoded, expected, atol=1e-15)
    inside = piecewise_linear(np.linspace(0.0, 3.0, 301), (0.0, 1.0, 3.0))
    assert inside.min() >= -1e-15 and inside.max() <= 1.0 + 1e-15
    one_bin = piecewise_linear(np.array([-2.0, 0.5, 4.0]), (0.0, 2.0))  # a single bin goes on both ways
    np.testing.assert_allclose(one_bin[:, 0], [-1.0, 0.25, 2.0])


def test_ple_edges_are_the_training_quantiles():
    """33 values 0..32: the quantiles at 0, 1/16, ..., 1 are 0, 2, ..., 32; repeated quantiles merge; a
    constant column, which rtdl_num_embeddings refuses, keeps its one bin; a table of at most PLE_BINS rows
    gets fewer bins than rows (the library's rule)."""
    assert ple_edges(np.arange(33.0)[::-1]) == tuple(float(v) for v in range(0, 33, 2))
    assert ple_edges(np.array([0.0] * 99 + [1.0])) == (0.0, 1.0)  # 16 repeated quantiles merged
    assert ple_edges(np.array([2.0, 2.0, 2.0])) == (2.0, 3.0)  # one value: one bin, all 0
    assert ple_edges(np.array([4.0, 0.0, 2.0, 1.0, 3.0])) == (0.0, 1.0, 2.0, 3.0, 4.0)  # 5 rows: 4 bins
    assert ple_edges(np.array([7.0, 5.0])) == (5.0, 7.0)  # 2 rows: one bin


def test_ple_keeps_float64_far_from_zero_and_leaves_torch_float32():
    """A column like 1e9 + a fraction: float32 (the library's default dtype) spaces 1e9 by 64, which would
    wash the bins out; the encoding keeps float64, and only for itself: torch's default stays float32."""
    edges = (1e9 + 0.25, 1e9 + 1.25, 1e9 + 3.25)
    encoded = piecewise_linear(np.array([1e9 + 0.75, 1e9 + 2.25]), edges)
    np.testing.assert_allclose(encoded, [[0.5, 0.0], [1.0, 0.5]], atol=1e-6)
    assert torch.get_default_dtype() == torch.float32 and torch.zeros(1).dtype == torch.float32


def test_ple_widens_each_numeric_column_into_its_bins_and_is_saved(tmp_path, write_csv):
    from vflflare.data.preprocess import PLE_BINS, SiteInput

    amount, normal = _write_site(tmp_path, write_csv)
    tables = load_site_tables("site-1", DataRequest([], str(tmp_path), numeric_transform="ple"))
    assert tables.train.numeric.shape[1] == 2 * PLE_BINS  # two continuous columns, 16 bins each
    bins = tables.train.numeric[:, :PLE_BINS]
    assert np.all(np.diff(bins.sum(axis=1)[np.argsort(amount)]) >= -1e-6)  # monotone in the amount
    site_input = tables.site_input
    assert SiteInput.from_dict(json.loads(json.dumps(site_input.to_dict()))).preprocessor == site_input.preprocessor


def test_ple_clips_a_value_far_beyond_the_training_range(tmp_path, write_csv):
    """1e300 used to be an error (its end bin beyond float32); it is clipped to the training bound instead."""
    write_csv(tmp_path / "site-1" / "train.csv", ["id", "x"], [[i, float(i)] for i in range(20)])
    write_csv(tmp_path / "site-1" / "test.csv", ["id", "x"], [[100, 1.0], [101, 1e300]])
    tables = load_site_tables("site-1", DataRequest([], str(tmp_path), numeric_transform="ple"))
    bound = 19 + CLIP_RANGES * 19  # the training max, then 3 training ranges further
    expected = piecewise_linear(np.array([bound]), tables.site_input.preprocessor.ple["x"])[0]
    np.testing.assert_allclose(tables.test.numeric[1], expected, rtol=1e-6)
    assert tables.data_checks["out_of_range"]["x"]["clipped"] == 1


def test_ple_value_beyond_float32_is_an_error_naming_its_row(tmp_path, write_csv):
    """A training row at -1e300 widens the clip bound to about 3e300 above the top edge 19, so a test value of
    1e299 stays and its last bin, (1e299 - 17.75) / 1.25, is beyond float32: an error naming the row, not inf."""
    write_csv(tmp_path / "site-1" / "train.csv", ["id", "x"], [[0, -1e300]] + [[i + 1, float(i)] for i in range(20)])
    write_csv(tmp_path / "site-1" / "test.csv", ["id", "x"], [[100, 1.0], [101, 1e299]])
    with pytest.raises(DataError, match=r"line 3 \(id '101'\), column 'x': value 1e\+299 is too far beyond"):
        load_site_tables("site-1", DataRequest([], str(tmp_path), numeric_transform="ple"))


def test_ple_constant_column_and_missing_indicator(tmp_path, write_csv):
    """A constant training column is one bin fed as 0 (a test value of 7 too); a column with missing training
    cells gets its bins, filled with the median, then its 0/1 indicator; a saved model gives the same blocks."""
    from vflflare.data.preprocess import SiteInput
    from vflflare.protocol.scoring import read_new_rows

    rows = [[i, 5.0, "" if i % 4 == 0 else float(i)] for i in range(40)]
    write_csv(tmp_path / "site-1" / "train.csv", ["id", "flat", "gappy"], rows)
    write_csv(tmp_path / "site-1" / "test.csv", ["id", "flat", "gappy"], [[100, 7.0, ""], [101, 5.0, 3.0]])
    tables = load_site_tables("site-1", DataRequest([], str(tmp_path), numeric_transform="ple"))
    gappy = tables.site_input.preprocessor.ple["gappy"]  # the 10 filled cells repeat the median: fewer bins
    assert tables.feature_names == ["flat#bin0", *(f"gappy#bin{t}" for t in range(len(gappy) - 1)), "gappy#missing"]
    assert not tables.train.numeric[:, 0].any() and not tables.test.numeric[:, 0].any()
    np.testing.assert_array_equal(tables.test.numeric[:, -1], [1.0, 0.0])
    np.testing.assert_array_equal(tables.train.numeric[:, -1], [float(i % 4 == 0) for i in range(40)])
    median = np.median([i for i in range(40) if i % 4])
    np.testing.assert_allclose(tables.test.numeric[0, 1:-1], piecewise_linear(np.array([median]), gappy)[0])
    saved = SiteInput.from_dict(json.loads(json.dumps(tables.site_input.to_dict())))  # as model_store keeps it
    _, block, _ = read_new_rows("site-1", tmp_path / "site-1" / "test.csv", saved)  # scoring a saved model
    np.testing.assert_array_equal(block.numeric, tables.test.numeric)


def test_ple_refuses_a_training_table_beyond_torch_quantile(tmp_path, write_csv, monkeypatch):
    """torch.quantile (behind compute_bins) takes at most 2**24 rows: a clear error rather than torch's."""
    import vflflare.data.preprocess as preprocess

    monkeypatch.setattr(preprocess, "PLE_MAX_ROWS", 10)
    write_csv(tmp_path / "site-1" / "train.csv", ["id", "x"], [[i, float(i)] for i in range(20)])
    write_csv(tmp_path / "site-1" / "test.csv", ["id", "x"], [[100, 1.0]])
    with pytest.raises(DataError, match="column 'x': numeric_transform ple fits its bins with torch.quantile"):
        load_site_tables("site-1", DataRequest([], str(tmp_path), numeric_transform="ple"))
