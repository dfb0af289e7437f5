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
    results = run_job(tmp_path, "ssvfl_i", timeout=120)
    assert_ok(results, 0.90)
    assert per_site(results, "uploads") == {"site-1": 1, "site-2": 1}
    assert per_site(results, "downloads") == {"site-1": 0, "site-2": 0}
    rows = results["rows"]
    final = (rows["aligned_train"] + rows["val"] + rows["test"]) * REP_DIM * FLOAT32
    assert per_site(results, "payload_bytes") == {"site-1": final, "site-2": final}
    _assert_no_pretraining_traffic(results)
    # NVFlare moves the numbers, it does not change them
    reference = run_inprocess(make_config(algorithm="ssvfl_i"), ["site-1", "site-2"], None)
    assert reference["metrics"] == results["metrics"]
    assert reference["communication"]["per_site"] == results["communication"]["per_site"]


def test_ssvfl_c_split_nn_counts(tmp_path):
    results = run_job(tmp_path, "ssvfl_c", timeout=120, split_epochs=8, split_patience=4)
    assert_ok(results, 0.90)
    _assert_no_pretraining_traffic(results)
    epochs = results["training"]["split_epochs"]
    assert 4 < epochs <= 8  # early stopping needs split_patience + 1 epochs at least
    batches = math.ceil(results["rows"]["aligned_train"] / 32)
    phase = results["communication"]["per_phase"]["split_training"]
    assert phase["downloads"] == 2 * epochs * batches
    assert phase["uploads"] == 2 * (epochs * batches + epochs)
    assert per_site(results, "uploads") == dict.fromkeys(["site-1", "site-2"], epochs * batches + epochs + 1)


def test_ssvfl_i_four_sites(tmp_path):
    results = run_job(tmp_path, "ssvfl_i", n_sites=4, timeout=120)
    assert_ok(results, 0.85)
    assert per_site(results, "uploads") == dict.fromkeys(["site-1", "site-2", "site-3", "site-4"], 1)
    assert set(per_site(results, "downloads").values()) == {0}


def test_ssvfl_c_four_sites_scarce_labels_with_test_curve(tmp_path):
    cfg = dict(labeled_fraction=0.5, test_curve=True, split_epochs=6, split_patience=3)
    results = run_job(tmp_path, "ssvfl_c", n_sites=4, timeout=180, **cfg)
    assert_ok(results, 0.85)
    sites = ["site-1", "site-2", "site-3", "site-4"]
    reference = run_inprocess(make_config(algorithm="ssvfl_c", **cfg), sites, None)
    assert reference["metrics"] == results["metrics"] and reference["rows"] == results["rows"]
    epochs = results["training"]["split_epochs"]
    batches = math.ceil(results["rows"]["aligned_train"] / 32)
    phases = results["communication"]["per_phase_site"]
    assert {
        s: (phases["split_training"][s]["uploads"], phases["split_training"][s]["downloads"]) for s in sites
    } == dict.fromkeys(sites, (epochs * batches + epochs, epochs * batches))
    # one test upload per epoch and site, outside the training traffic
    assert {s: phases["test_curve"][s]["uploads"] for s in sites} == dict.fromkeys(sites, epochs)
    curve = results["training"]["test_curve"]
    assert (
        len(curve) == epochs
        and curve[-1]["training_payload_bytes"]
        == results["communication"]["per_phase"]["split_training"]["payload_bytes"]
    )
