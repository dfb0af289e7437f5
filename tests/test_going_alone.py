"""Issue 40 items 1-2: every training job with a label party compares its federated model with going alone
(the label site's own model, or the prior at the coordinator), with a bootstrap interval, inside the label
party and without a new message; with blend_own_model the delivered model mixes in the own model, chosen on
validation, and the vertical inference job scores it as training did."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scoring_helpers import score_the_test_rows
from sklearn.metrics import roc_auc_score

from vflflare import cli
from vflflare.metrics import gain_interval
from vflflare.models.own_model import blend_weight, prior
from vflflare.protocol import going_alone, label_party
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.model_store import LABEL_DIR, models_dir, read_predictions
from vflflare.registry import make_config
from vflflare.results import format_table

SITES = ["site-1", "site-2"]


def _split(root: Path, *extra: str) -> Path:
    assert cli.main(["split", "--dataset", "breast_cancer", "--overlap", "200", "--out", str(root), *extra]) == 0
    score_the_test_rows(root, SITES)
    return root


def _messages(result: dict) -> dict:
    comm = result["communication"]
    keys = ("uploads", "downloads", "payload_bytes")
    return {
        name: {k: {key: row[key] for key in keys} for k, row in comm[name].items()}
        for name in ("per_site", "per_phase")
    }


def test_the_gain_interval_is_a_paired_bootstrap_of_the_metric_difference():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    p, b = np.clip(0.4 * y + 0.6 * rng.random(500), 0, 1), rng.random(500)
    probs, base = np.stack([1 - p, p], 1), np.stack([1 - b, b], 1)
    gain, low, high = gain_interval(y, probs, base, 2, seed=1)
    assert gain == pytest.approx(roc_auc_score(y, p) - roc_auc_score(y, b), abs=1e-12)
    assert low < gain < high and 0.05 < high - low < 0.2  # about 4 standard errors of an AUC difference on 500 rows
    assert gain_interval(y, probs, base, 2, seed=1) == (gain, low, high)  # seeded: the same interval again
    # accuracy for more classes: the mean difference of correct predictions, an interval around it
    y3 = rng.integers(0, 3, 400)
    right, wrong = np.eye(3)[y3], np.eye(3)[(y3 + 1) % 3]
    assert gain_interval(y3, right, wrong, 3, seed=0) == (1.0, 1.0, 1.0)


def test_the_gain_interval_is_scipys_paired_bootstrap_to_the_last_bit():
    """ResampledAUC (a rank sum from each resample's draw counts) against scipy's paired bootstrap of rankdata AUCs,
    on tied scores and resamples of one class: the same interval, bit for bit, for AUC and for accuracy."""
    from scipy.stats import bootstrap

    from vflflare.metrics import ResampledAUC, _auc_along

    rng = np.random.default_rng(3)
    y = (rng.random(3000) < 0.2).astype(int)
    p, b = np.round(0.3 * y + rng.random(3000), 2), np.round(rng.random(3000), 1)  # many ties
    rows = rng.integers(0, 3000, (7, 3000))
    of_p = ResampledAUC(y, p)
    assert np.array_equal([of_p(np.bincount(r, minlength=3000)) for r in rows], _auc_along(y[rows], p[rows]))
    one_class = np.bincount(np.zeros(4, dtype=int), minlength=4)
    assert np.isnan(ResampledAUC(np.array([0, 0, 0, 1]), np.arange(4.0))(one_class))  # one class: no AUC

    def reference(data: tuple, statistic) -> tuple[float, float]:
        ci = bootstrap(data, statistic, n_resamples=300, batch=100, vectorized=True, paired=True,
                       method="percentile", rng=np.random.default_rng(5)).confidence_interval  # fmt: skip
        return float(ci.low), float(ci.high)

    probs, base = np.stack([1 - p, p], 1), np.stack([1 - b, b], 1)
    _, low, high = gain_interval(y, probs, base, 2, seed=5, resamples=300)
    assert (low, high) == reference((y, p, b), lambda y, p, b, axis: _auc_along(y, p, axis) - _auc_along(y, b, axis))
    y3 = rng.integers(0, 3, 3000)
    right, noisy = np.eye(3)[y3], np.eye(3)[np.where(rng.random(3000) < 0.7, y3, (y3 + 1) % 3)]
    _, low, high = gain_interval(y3, right, noisy, 3, seed=5, resamples=300)
    d = (right.argmax(1) == y3).astype(float) - (noisy.argmax(1) == y3)
    assert (low, high) == reference((d,), lambda d, axis: d.mean(axis=axis))


def test_the_blend_share_is_chosen_on_validation_and_ties_keep_the_federated_model():
    y = np.array([0, 1, 0, 1])
    good, bad = np.eye(2)[y], np.eye(2)[1 - y]
    assert blend_weight(good, bad, y, 2) == 1.0  # the own model only hurts: the federated model as it is
    assert blend_weight(bad, good, y, 2) == 0.4  # every share below 0.5 ranks perfectly: the largest of them
    assert blend_weight(good, good, y, 2) == 1.0  # a tie everywhere: the federated model
    assert prior(np.array([0, 0, 0, 1]), 2, 3).tolist() == [[0.75, 0.25]] * 3


def test_labels_at_the_coordinator_are_compared_with_the_prior():
    result = run_inprocess(make_config(algorithm="oneshot"), SITES, None)
    record = result["going_alone"]
    assert record["alone"]["model"] == "prior" and record["alone"]["test_auc"] == 0.5
    assert record["federated"] == result["metrics"]["test_auc"] > 0.9
    assert record["gain"] == pytest.approx(record["federated"] - 0.5, abs=1e-12)
    low, high = record["interval"]
    assert low <= record["gain"] <= high and record["resamples"] == 1000
    table = format_table(result)
    assert "label party alone            0.5000  (the prior: it holds no columns)" in table
    assert "gain from joining" in table and "95% interval" in table


def test_a_label_site_fits_its_own_model_on_all_its_labels_and_no_message_is_added(tmp_path, monkeypatch):
    """The own model uses every labeled row of the label site but the validation rows (here its unaligned
    rows too: --active-site-labels), both candidates are reported, and the run's messages are those of a run
    without the comparison: the same uploads, downloads and payload per site and phase, the same metrics."""
    data = _split(tmp_path / "data", "--label-owner", "site-1", "--active-site-labels")
    cfg = make_config(algorithm="vanilla", label_owner="site-1", split_epochs=3)
    result = run_inprocess(cfg, SITES, str(data))
    record = result["going_alone"]
    labeled = len((data / "site-1" / "train_labels.csv").read_text().splitlines()) - 1
    assert record["alone"]["rows"] == labeled - result["rows"]["val"]
    assert set(record["alone"]["candidates"]) == {"trees", "neural"}
    chosen = record["alone"]["candidates"][record["alone"]["model"]]
    assert record["alone"]["test_auc"] == chosen["test_auc"]
    assert chosen["val_auc"] == max(c["val_auc"] for c in record["alone"]["candidates"].values())
    assert record["gain"] == pytest.approx(record["federated"] - record["alone"]["test_auc"], abs=1e-12)

    monkeypatch.setattr(label_party, "compare", lambda label, val, test: (test, None))
    without = run_inprocess(cfg, SITES, str(data))
    assert "going_alone" not in without
    assert _messages(result) == _messages(without) and result["metrics"] == without["metrics"]


def test_a_blend_is_saved_and_scored_as_it_was_in_training(tmp_path, monkeypatch):
    """The blend's share comes from validation; 0.4 is forced here so that both parts matter. Scoring the
    test rows through the vertical inference job gives the training job's (blended) test predictions."""
    monkeypatch.setattr(going_alone, "blend_weight", lambda *args: 0.4)
    data, runs = _split(tmp_path / "data", "--label-owner", "site-1"), tmp_path / "runs"
    cfg = make_config(algorithm="vanilla", label_owner="site-1", split_epochs=3, blend_own_model=True)
    trained = run_inprocess(cfg, SITES, str(data), runs_root=str(runs))
    record = trained["going_alone"]
    assert record["blend"]["federated_share"] == 0.4
    assert trained["metrics"]["test_auc"] == record["blend"]["test_auc"]
    folder = models_dir(runs / "site-1", trained["job_id"]) / LABEL_DIR
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["blend"] == {"federated_share": 0.4, "own_model": record["alone"]["model"]}
    assert "own_model.pt" in manifest["files"]
    scored = run_inprocess(
        make_config(algorithm="vertical_inference", model_job=trained["job_id"]), SITES, str(data), runs_root=str(runs)
    )
    expected = read_predictions(folder / "test_predictions.csv")
    got = read_predictions(Path(scored["training"]["predictions"]))
    assert len(got) == trained["rows"]["test"] and got == expected
    labels = {
        row.split(",")[0]: int(row.split(",")[1])
        for row in (data / "site-1" / "test_labels.csv").read_text().splitlines()[1:]
    }
    ids = sorted(got)
    auc = roc_auc_score([labels[i] for i in ids], [got[i][-1] for i in ids])
    assert auc == pytest.approx(trained["metrics"]["test_auc"], abs=1e-9)
