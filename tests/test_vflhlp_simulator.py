"""VFLHLP run by the NVFlare simulator: the exported job runs out of the box on the embedded default
(the label-owning site is the active party), with the in-process reference's numbers and exact counts;
three parties and the Local-A baseline too."""

import pytest
from simulator_helpers import assert_ok, run_job

from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

pytestmark = pytest.mark.simulator

SMALL = {"pretrain_epochs": 2, "active_epochs": 10, "split_epochs": 10, "split_patience": 5}


def test_vflhlp_in_the_simulator_matches_the_in_process_run(tmp_path):
    results = run_job(tmp_path, "vflhlp", label_owner="site-2", **SMALL)
    assert_ok(results, 0.9)
    reference = run_inprocess(
        make_config(algorithm="vflhlp", label_owner="site-2", **SMALL), ["site-1", "site-2"], None
    )
    assert reference["metrics"] == pytest.approx(results["metrics"], abs=1e-6)
    assert reference["communication"]["per_phase_site"] == results["communication"]["per_phase_site"]
    assert results["expected_communication"] == {
        s: {"uploads": c["uploads"], "downloads": c["downloads"]}
        for s, c in results["communication"]["per_site"].items()
    }
    assert results["communication"]["per_phase"]["local_pretraining"]["uploads"] == 0


def test_local_a_with_three_parties_in_the_simulator(tmp_path):
    results = run_job(tmp_path, "vflhlp", n_sites=3, label_owner="site-3", variant="local_a", **SMALL)
    assert_ok(results, 0.85)
    assert all(c["uploads"] == c["downloads"] == 0 for c in results["communication"]["per_site"].values())
