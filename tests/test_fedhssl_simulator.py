"""FedHSSL run by the NVFlare simulator: the same numbers and counts as the in-process reference, with
the labels at a site (the active party of cross-party SSL) and under CKKS for PMA."""

import pytest
from simulator_helpers import assert_ok, run_job

from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

pytestmark = pytest.mark.simulator

SMALL = {
    "projector": [64, 64, 64],
    "predictor_hidden": 16,
    "pretrain_batch_size": 64,
    "global_iterations": 2,
    "labeled_fraction": 0.5,
    "split_epochs": 5,
    "split_patience": 5,
}


def test_fedhssl_in_the_simulator_matches_the_in_process_run(tmp_path):
    results = run_job(tmp_path, "fedhssl", label_owner="site-2", **SMALL)
    assert_ok(results, 0.85)
    reference = run_inprocess(
        make_config(algorithm="fedhssl", label_owner="site-2", **SMALL), ["site-1", "site-2"], None
    )
    assert reference["metrics"] == pytest.approx(results["metrics"], abs=1e-6)
    assert reference["communication"]["per_phase_site"] == results["communication"]["per_phase_site"]
    assert results["expected_communication"] == {
        s: {"uploads": c["uploads"], "downloads": c["downloads"]}
        for s, c in results["communication"]["per_site"].items()
    }
    assert results["communication"]["per_phase"]["pma"]["uploads"] == 2 * 2  # every site, every global iteration


def test_fedhssl_under_ckks_only_ciphertexts_cross_the_coordinator(tmp_path):
    from vflflare import cli

    assert cli.main(["he-keys", "-w", str(tmp_path / "ws")]) == 0
    small = {**SMALL, "global_iterations": 1, "projector": [16, 16, 16], "split_epochs": 2}
    results = run_job(tmp_path, "fedhssl", label_owner="site-1", he=True, **small)
    assert "error" not in results, results.get("error")
    kinds = results["communication"]["tensor_kinds"]
    assert kinds["up"]["plaintext"] == 0 and kinds["down"]["plaintext"] == 0, kinds
    plain = run_inprocess(make_config(algorithm="fedhssl", label_owner="site-1", **small), ["site-1", "site-2"], None)
    assert abs(results["metrics"]["test_auc"] - plain["metrics"]["test_auc"]) <= 0.02, (
        results["metrics"],
        plain["metrics"],
    )
    counts = results["communication"]["per_phase_site"]
    assert {s: (c["uploads"], c["downloads"]) for s, c in counts["pma"].items()} == {"site-1": (1, 1), "site-2": (1, 1)}
