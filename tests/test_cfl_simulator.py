"""CFL run by the NVFlare simulator on a silo space: the in-process reference's numbers and counts, and
FedAvg under CKKS (the coordinator adds ciphertexts only) scoring as plain FedAvg does, to 0.02."""

from pathlib import Path

import pytest
from simulator_helpers import run_job

from vflflare import cli
from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

pytestmark = pytest.mark.simulator

SMALL = {"cfl_rounds": 2, "cfl_hidden": 32}
SILOS = ["site-1", "site-2", "site-3"]


@pytest.fixture
def silos(tmp_path) -> Path:
    out = tmp_path / "silos"
    assert (
        cli.main(
            [
                "split",
                "--dataset",
                "breast_cancer",
                "--sites",
                "3",
                "--silo-space",
                "--silo-setting",
                "mixed",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def test_cfl_in_the_simulator_matches_the_in_process_run(tmp_path, silos):
    results = run_job(tmp_path, "cfl", n_sites=3, data_root=silos, **SMALL)
    assert "error" not in results, results.get("error")
    assert results["metrics"]["test_accuracy"] >= 0.9, results["metrics"]
    reference = run_inprocess(make_config(algorithm="cfl", **SMALL), SILOS, str(silos))
    assert reference["metrics"] == pytest.approx(results["metrics"], abs=1e-6)
    assert reference["communication"]["per_phase_site"] == results["communication"]["per_phase_site"]
    assert results["expected_communication"] == {
        s: {"uploads": c["uploads"], "downloads": c["downloads"]}
        for s, c in results["communication"]["per_site"].items()
    }


def test_cfl_fedavg_under_ckks_sends_only_ciphertexts(tmp_path, silos):
    assert cli.main(["he-keys", "-w", str(tmp_path / "ws")]) == 0
    results = run_job(tmp_path, "cfl", n_sites=3, data_root=silos, he=True, **SMALL)
    assert "error" not in results, results.get("error")
    kinds = results["communication"]["tensor_kinds"]
    assert kinds["up"]["plaintext"] == 0 and kinds["down"]["plaintext"] == 0, kinds
    plain = run_inprocess(make_config(algorithm="cfl", **SMALL), SILOS, str(silos))
    for site in SILOS:
        assert results["metrics"][f"{site}_test_accuracy"] == pytest.approx(
            plain["metrics"][f"{site}_test_accuracy"], abs=0.02
        )
