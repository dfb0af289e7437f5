"""HE jobs in the real NVFlare simulator on the embedded default (breast cancer over 2 sites), with keys
written by `vflflare he-keys` into the workspace's startup/ folder before the run.

What the coordinator received is in the result record: communication.tensor_kinds counts the float
tensors that crossed it, plaintext or encrypted, per direction, as its transport saw them."""

import math

import pytest
from simulator_helpers import per_site, run_job

from vflflare import cli
from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

pytestmark = pytest.mark.simulator
SITES = ["site-1", "site-2"]


def _he_keys(tmp_path):
    assert cli.main(["he-keys", "-w", str(tmp_path / "ws")]) == 0  # run_job's workspace


def _only_ciphertexts(results):
    assert "error" not in results, results.get("error")
    kinds = results["communication"]["tensor_kinds"]
    assert kinds["up"]["plaintext"] == 0 and kinds["down"]["plaintext"] == 0, kinds
    assert kinds["up"]["encrypted"] > 0 and kinds["down"]["encrypted"] > 0, kinds


def test_oneshot_site_label_owner_he_same_metric_only_ciphertexts(tmp_path):
    _he_keys(tmp_path)
    results = run_job(tmp_path, "oneshot", label_owner="site-1", he=True)
    _only_ciphertexts(results)
    # HE off, same seed (the in-process driver gives the simulator's numbers exactly: test_simulator_jobs)
    plain = run_inprocess(make_config(algorithm="oneshot", label_owner="site-1"), SITES, None)
    assert abs(results["metrics"]["test_auc"] - plain["metrics"]["test_auc"]) <= 0.005, (
        results["metrics"],
        plain["metrics"],
    )
    assert abs(results["metrics"]["val_auc"] - plain["metrics"]["val_auc"]) <= 0.005
    # the same messages, each carrying ciphertexts instead of float32 tensors
    assert per_site(results, "uploads") == per_site(plain, "uploads")
    assert per_site(results, "downloads") == per_site(plain, "downloads")
    assert results["communication"]["total"]["payload_bytes"] > 10 * plain["communication"]["total"]["payload_bytes"]


def test_split_nn_aux_steps_encrypted_in_code(tmp_path):
    """Per-batch steps travel as aux messages, which Filters never see: the executor encrypts them."""
    _he_keys(tmp_path)
    results = run_job(tmp_path, "vanilla", label_owner="site-2", he=True, split_epochs=3, split_patience=3)
    _only_ciphertexts(results)
    assert results["metrics"]["test_auc"] >= 0.9
    epochs, batches = results["training"]["split_epochs"], math.ceil(results["rows"]["aligned_train"] / 32)
    assert results["step_latency"]["steps"] == epochs * batches
    # every step's representations, relayed reps and gradients were ciphertexts
    assert results["communication"]["tensor_kinds"]["up"]["encrypted"] >= 2 * epochs * batches


def test_secure_aggregation_sum_within_1e_3(tmp_path):
    _he_keys(tmp_path)
    results = run_job(tmp_path, "secure_sum", he=True)
    _only_ciphertexts(results)
    assert results["metrics"]["secure_sum_max_abs_error"] < 1e-3
    assert results["training"]["values"] > 4096  # more than one CKKS chunk
    assert per_site(results, "uploads") == {"site-1": 1, "site-2": 1}


def test_missing_site_key_names_the_file(tmp_path):
    _he_keys(tmp_path)
    (tmp_path / "ws" / "startup" / "client_context.tenseal").unlink()  # the server has its context, sites none
    results = run_job(tmp_path, "oneshot", label_owner="site-1", he=True, timeout=300)
    assert "client_context.tenseal is missing" in results["error"], results["error"]
    assert "vflflare he-keys" in results["error"]
