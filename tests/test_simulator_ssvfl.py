"""SS-VFL-I and SS-VFL-C run by the NVFlare simulator on the embedded default (breast cancer): metric
floors and exact communication counts (SS-VFL-I: one upload per site, nothing down; SS-VFL-C:
supervised VFL's per-batch counts after a pretraining phase without communication)."""

import math

import pytest
from simulator_helpers import FLOAT32, REP_DIM, assert_ok, per_site, run_job

from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

pytestmark = pytest.mark.simulator


def _assert_no_pretraining_traffic(results):
    phase = results["communication"]["per_phase"]["local_pretraining"]
    assert phase["uploads"] == phase["downloads"] == phase["payload_bytes"] == 0


def test_ssvfl_i_one_upload_per_site(tmp_path):
    """Four sites (two: test_simulator_credit_default.py)."""
    sites = ["site-1", "site-2", "site-3", "site-4"]
    results = run_job(tmp_path, "ssvfl_i", n_sites=4, timeout=120)
    assert_ok(results, 0.85)
    assert per_site(results, "uploads") == dict.fromkeys(sites, 1)
    assert per_site(results, "downloads") == dict.fromkeys(sites, 0)
    rows = results["rows"]
    final = (rows["aligned_train"] + rows["val"] + rows["test"]) * REP_DIM * FLOAT32
    assert per_site(results, "payload_bytes") == dict.fromkeys(sites, final)
    _assert_no_pretraining_traffic(results)
    # NVFlare moves the numbers, it does not change them
    reference = run_inprocess(make_config(algorithm="ssvfl_i"), sites, None)
    assert reference["metrics"] == results["metrics"]
    assert reference["communication"]["per_site"] == results["communication"]["per_site"]


def test_ssvfl_c_four_sites_scarce_labels_with_test_curve(tmp_path):
    """Supervised VFL's per-batch counts after pretraining without traffic, at four sites (two:
    test_simulator_credit_default.py)."""
    cfg = dict(labeled_fraction=0.5, test_curve=True, split_epochs=6, split_patience=3)
    results = run_job(tmp_path, "ssvfl_c", n_sites=4, timeout=180, **cfg)
    assert_ok(results, 0.85)
    _assert_no_pretraining_traffic(results)
    sites = ["site-1", "site-2", "site-3", "site-4"]
    reference = run_inprocess(make_config(algorithm="ssvfl_c", **cfg), sites, None)
    assert reference["metrics"] == results["metrics"] and reference["rows"] == results["rows"]
    epochs = results["training"]["split_epochs"]
    assert 3 < epochs <= 6  # early stopping needs split_patience + 1 epochs at least
    batches = math.ceil(results["rows"]["aligned_train"] / 32)
    phases = results["communication"]["per_phase_site"]
    assert {
        s: (phases["split_training"][s]["uploads"], phases["split_training"][s]["downloads"]) for s in sites
    } == dict.fromkeys(sites, (epochs * batches + epochs, epochs * batches))
    assert per_site(results, "uploads") == dict.fromkeys(sites, epochs * batches + 2 * epochs + 1)  # + curve, final
    # one test upload per epoch and site, outside the training traffic
    assert {s: phases["test_curve"][s]["uploads"] for s in sites} == dict.fromkeys(sites, epochs)
    curve = results["training"]["test_curve"]
    assert (
        len(curve) == epochs
        and curve[-1]["training_payload_bytes"]
        == results["communication"]["per_phase"]["split_training"]["payload_bytes"]
    )
