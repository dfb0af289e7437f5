"""The sites of the data, the job and the simulator must agree (issue 10, item 6): a split written for
three sites and run with two used to drop the third silently; now it is an error naming the missing or
extra sites. `vflflare simulate --sites` runs sites with their own names."""
from __future__ import annotations

import pytest

from simulator_helpers import run_job
from vflflare.algorithms.registry import make_config
from vflflare.cli import main as vflflare_main
from vflflare.cli import simulate
from vflflare.data.errors import DataError
from vflflare.jobs import write_job
from vflflare.protocol.inprocess import run_inprocess

BANKS = ["bank-a", "bank-b", "bank-c"]


def split(root, sites: str) -> None:
    assert vflflare_main(["split", "--dataset", "breast_cancer", "--sites", sites, "--overlap", "150",
                          "--seed", "0", "--out", str(root)]) == 0


def test_fewer_sites_than_the_split_is_an_error(tmp_path):
    split(tmp_path / "data", "3")
    with pytest.raises(DataError, match=r"split for sites \['site-1', 'site-2', 'site-3'\] but the job runs with "
                                        r"\['site-1', 'site-2'\]; sites of the split missing from the job: \['site-3'\]"):
        run_inprocess(make_config(algorithm="oneshot"), ["site-1", "site-2"], str(tmp_path / "data"))


def test_a_site_the_split_does_not_know_is_an_error(tmp_path):
    split(tmp_path / "data", ",".join(BANKS))
    with pytest.raises(DataError, match=r"sites of the split missing from the job: \['bank-c'\]; "
                                        r"sites of the job not in the split: \['bank-d'\]"):
        run_inprocess(make_config(algorithm="oneshot"), ["bank-a", "bank-b", "bank-d"], str(tmp_path / "data"))


@pytest.mark.simulator
def test_simulator_with_too_few_sites_fails_naming_the_missing_one(tmp_path):
    split(tmp_path / "data", "3")
    results = run_job(tmp_path, "oneshot", n_sites=2, data_root=tmp_path / "data", timeout=300, ssl_epochs=1)
    assert "sites of the split missing from the job: ['site-3']" in results.get("error", "")


@pytest.mark.simulator
def test_simulate_with_named_sites(tmp_path):
    split(tmp_path / "data", ",".join(BANKS))
    job = write_job(tmp_path / "jobs", "oneshot_banks", {"algorithm": "oneshot", "ssl_epochs": 1}, min_sites=3)
    results = simulate(str(job), str(tmp_path / "ws"), 0, 3, str(tmp_path / "data"), timeout=300, sites=BANKS)
    assert "error" not in results, results.get("error")
    assert results["sites"] == BANKS
    reference = run_inprocess(make_config(algorithm="oneshot", ssl_epochs=1), BANKS, str(tmp_path / "data"))
    assert results["metrics"] == reference["metrics"]
