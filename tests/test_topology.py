"""The sites of the data, the job and the simulator must agree (issue 10, item 6): a split written for
three sites and run with two used to drop the third silently; now it is an error naming the missing or
extra sites. `vflflare simulate --sites` runs sites with their own names."""

from __future__ import annotations

import json
import re
import time

import pytest
from simulator_helpers import run_job

from vflflare.cli import main as vflflare_main
from vflflare.config import ConfigError
from vflflare.data.errors import DataError
from vflflare.jobs import write_job
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.topology import TopologyError, check_joined
from vflflare.recipes import VFLRecipe
from vflflare.registry import make_config
from vflflare.simulation import simulate

BANKS = ["bank-a", "bank-b", "bank-c"]


def split(root, sites: str) -> None:
    assert (
        vflflare_main(
            [
                "split",
                "--dataset",
                "breast_cancer",
                "--sites",
                sites,
                "--overlap",
                "150",
                "--seed",
                "0",
                "--out",
                str(root),
            ]
        )
        == 0
    )


def test_fewer_sites_than_the_split_is_an_error(tmp_path):
    split(tmp_path / "data", "3")
    with pytest.raises(
        DataError,
        match=r"split for sites \['site-1', 'site-2', 'site-3'\] but the job runs with "
        r"\['site-1', 'site-2'\]; sites of the split missing from the job: \['site-3'\]",
    ):
        run_inprocess(make_config(algorithm="oneshot"), ["site-1", "site-2"], str(tmp_path / "data"))


def test_a_site_the_split_does_not_know_is_an_error(tmp_path):
    split(tmp_path / "data", ",".join(BANKS))
    with pytest.raises(
        DataError,
        match=r"sites of the split missing from the job: \['bank-c'\]; "
        r"sites of the job not in the split: \['bank-d'\]",
    ):
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


# ---------------------------------------------------------------- issue 25: every expected site takes part
def test_a_site_folder_the_job_leaves_out_is_an_error_without_a_manifest(tmp_path, capsys):
    split(tmp_path / "data", "3")
    (tmp_path / "data" / "manifest.json").unlink()  # a user's own data has none
    with pytest.raises(
        DataError,
        match=r"site folders \['site-3'\] are not used by the job, which runs with "
        r"\['site-1', 'site-2'\]: their columns would be left out",
    ):
        run_inprocess(make_config(algorithm="oneshot"), ["site-1", "site-2"], str(tmp_path / "data"))
    out = tmp_path / "results.json"
    assert vflflare_main(["inprocess", "--sites", "2", "--data-root", str(tmp_path / "data"), "--json", str(out)]) == 1
    assert "site folders ['site-3'] are not used" in capsys.readouterr().err
    failed = json.loads(out.read_text())  # --json records the failure too
    assert (
        failed["algorithm"] == "oneshot" and failed["error"].startswith("DataError: ") and "'site-3'" in failed["error"]
    )


def test_the_job_s_named_sites_must_be_the_ones_that_run():
    with pytest.raises(TopologyError, match=r"sites of the job that did not join: \['bank-c'\]"):
        run_inprocess(make_config(algorithm="oneshot", sites=BANKS), BANKS[:2], None)
    with pytest.raises(TopologyError, match=r"sites that joined but are not in the job: \['bank-d'\]") as caught:
        check_joined([*BANKS, "bank-d"], BANKS, 3)
    assert caught.value.site == "bank-d"
    with pytest.raises(TopologyError, match=r"needs at least 3 sites \(min_clients\) but only 2 joined"):
        check_joined(BANKS[:2], [], 3)


def test_duplicate_site_names_are_called_duplicates(tmp_path, capsys):
    import job as job_py

    duplicate = r"duplicate site names in .*\['site-1'\] given more than once"
    for command in (
        ["simulate", "jobs/oneshot_vfl", "-w", str(tmp_path / "ws"), "--sites", "site-1,site-1"],
        ["inprocess", "--sites-names", "site-1,site-1"],
        ["jobs", "--out", str(tmp_path), "--name", "dup", "--sites", "site-1,site-1"],
    ):
        assert vflflare_main(command) == 1
        err = capsys.readouterr().err
        assert re.search(duplicate, err) and "--debug" not in err, (command, err)  # bad input, not a bug
    with pytest.raises(ValueError, match=duplicate):
        VFLRecipe(algorithm="oneshot", sites=["site-1", "site-1"])
    with pytest.raises(ValueError, match=duplicate):
        job_py.site_args("site-1,site-1")
    with pytest.raises(ValueError, match=duplicate):
        run_inprocess(make_config(algorithm="oneshot"), ["site-1", "site-1"], None)
    with pytest.raises(ConfigError, match=r"sites must name each site once: duplicate names \['site-1'\]"):
        make_config(algorithm="oneshot", sites=["site-1", "site-1", "site-2"])


def test_named_sites_go_into_the_job_config_and_meta_asks_nvflare_for_two(tmp_path):
    job = write_job(tmp_path, "banks", {"algorithm": "oneshot"}, sites=BANKS)
    server = json.loads((job / "app" / "config" / "config_fed_server.json").read_text())
    controller = next(w for w in server["workflows"] if w["id"] == "vfl_controller")["args"]
    assert controller["config"]["sites"] == BANKS and controller["min_sites"] == 3
    assert json.loads((job / "meta.json").read_text())["min_clients"] == 2


@pytest.mark.simulator
def test_simulator_job_naming_a_site_that_does_not_run_fails_at_once_naming_it(tmp_path):
    job = write_job(
        tmp_path / "jobs", "three", {"algorithm": "oneshot", "ssl_epochs": 1}, sites=["site-1", "site-2", "site-3"]
    )
    t0 = time.monotonic()
    results = simulate(str(job), str(tmp_path / "ws"), 2, 2, timeout=300)
    print(f"simulator with 2 of the job's 3 sites ended after {time.monotonic() - t0:.1f} s")
    assert results["status"] == "failed" and results["site"] == "site-3", results
    assert "sites of the job that did not join: ['site-3']" in results["error"]
    assert results["progress"]["phases_completed"] == []
