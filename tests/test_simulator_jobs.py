"""Every job, run by the NVFlare simulator on the embedded default (breast cancer over 2 sites):
metric floors and exact communication counts (paper Table 1: one-shot 3, few-shot 5 per site; few-shot's
and vanilla's with the server's labels on credit default: test_simulator_credit_default.py)."""

import math
from pathlib import Path

import pytest
from simulator_helpers import FLOAT32, REP_DIM, assert_ok, per_site, run_job
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

pytestmark = pytest.mark.simulator


def test_oneshot_server_label_owner_three_communications_per_site(tmp_path):
    """At four sites (two: test_simulator_credit_default.py, and the label site's test below)."""
    sites = ["site-1", "site-2", "site-3", "site-4"]
    results = run_job(tmp_path, "oneshot", n_sites=4)
    assert_ok(results, 0.85)
    assert per_site(results, "uploads") == dict.fromkeys(sites, 2)
    assert per_site(results, "downloads") == dict.fromkeys(sites, 1)
    rows = results["rows"]
    reps = rows["aligned_train"] * REP_DIM * FLOAT32
    final = (rows["aligned_train"] + rows["val"] + rows["test"]) * REP_DIM * FLOAT32
    # up H_o, down dL/dH_o, up H_o' with validation and test representations: nothing else
    assert per_site(results, "payload_bytes") == dict.fromkeys(sites, 2 * reps + final)
    assert results["communication"]["per_phase"]["setup"]["uploads"] == 0
    assert results["results_path"].endswith("vflflare_results.json")
    # NVFlare moves the numbers, it does not change them: the in-process driver gives the same ones
    reference = run_inprocess(make_config(algorithm="oneshot"), sites, None)
    assert reference["metrics"] == results["metrics"]
    assert reference["communication"]["per_site"] == results["communication"]["per_site"]
    # progress of the sites' local SSL and the server's classifier reached TensorBoard through NVFlare
    tb_root = Path(results["results_path"]).parent / "tb_events"
    tags = {}
    for origin in sorted(p.name for p in tb_root.iterdir()):
        events = EventAccumulator(str(tb_root / origin))
        events.Reload()
        tags[origin] = set(events.Tags()["scalars"])
    assert {"ssl/oneshot_loss", "ssl/oneshot_pseudo_label_rate"} <= set.intersection(*(tags[s] for s in sites))
    assert any(t.startswith("classifier/") for origin, ts in tags.items() if not origin.startswith("site-") for t in ts)


def test_oneshot_site_label_owner_server_only_relays(tmp_path):
    results = run_job(tmp_path, "oneshot", label_owner="site-1")
    assert_ok(results, 0.90)
    assert results["label_owner"] == "site-1"
    # site-2: the paper's 2 up + 1 down. site-1 also hosts the label party, so the coordinator relays
    # all representations to it and gradients back (+1 up, +2 down: reps for gradients, reps for classifier).
    assert per_site(results, "uploads") == {"site-1": 3, "site-2": 2}
    assert per_site(results, "downloads") == {"site-1": 3, "site-2": 1}
    # the label site's comparison with going alone came back inside the classifier's reply (issue 40)
    record = results["going_alone"]
    assert record["federated"] == results["metrics"]["test_auc"]
    assert record["alone"]["columns_of"] == "site-1" and record["alone"]["model"] in ("trees", "neural")
    assert record["gain"] == pytest.approx(record["federated"] - record["alone"]["test_auc"], abs=1e-12)
    assert record["interval"][0] <= record["gain"] <= record["interval"][1]


def test_fewshot_finetune_with_site_label_owner(tmp_path):
    results = run_job(tmp_path, "fewshot", label_owner="site-2", finetune_epochs=5, split_patience=5)
    assert_ok(results, 0.90)
    assert results["metrics"]["pre_finetune_test_auc"] >= 0.90, results["metrics"]
    # fine-tuning starts from the few-shot model's validation score, so 5 epochs without improvement stop it
    # at the 5th at the earliest: it runs all 5
    assert results["training"]["split_epochs"] == 5
    # compared once more after fine-tuning: the record is the delivered (fine-tuned) model's
    assert results["going_alone"]["federated"] == results["metrics"]["test_auc"]
    # determinism with a label site and split-NN fine-tuning: the in-process run gives the same numbers
    reference = run_inprocess(
        make_config(algorithm="fewshot", label_owner="site-2", finetune_epochs=5, split_patience=5),
        ["site-1", "site-2"],
        None,
    )
    assert reference["metrics"] == pytest.approx(results["metrics"], abs=1e-6)
    assert reference["communication"]["per_site"] == results["communication"]["per_site"]


def test_fedbcd_counts_one_upload_and_download_per_batch(tmp_path):
    """Local steps change nothing on the wire (vanilla's counts: test_simulator_credit_default.py)."""
    results = run_job(tmp_path, "fedbcd", local_steps=5, split_epochs=30, split_patience=5)
    assert_ok(results, 0.90)
    epochs = results["training"]["split_epochs"]
    batches = math.ceil(results["rows"]["aligned_train"] / 32)
    phase = results["communication"]["per_phase"]["split_training"]
    # per epoch and site: one forward upload and one gradient download per batch, one validation upload
    assert phase["downloads"] == 2 * epochs * batches
    assert phase["uploads"] == 2 * (epochs * batches + epochs)
    assert per_site(results, "uploads")["site-1"] == epochs * batches + epochs + 1  # + final val/test reps
