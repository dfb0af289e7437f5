"""Alignment by NVFlare's DH-PSI in the NVFlare simulator, on `vflflare split` breast-cancer roots:
jobs/psi finds exactly the true overlap (overlap_ids.csv) plus the shared test rows; a one-shot job
with alignment "psi" runs on its output (the separate-job route) and as the first phase of the same
job (`--psi`), with the row counts of the hash alignment; an empty intersection ends the PSI job with
an error naming the sites and their set sizes; a one-element intersection works, and a single shared
training row then fails alignment with the usual too-few-rows error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_psi import SITES, _edit_labels, make_root, read_ids, setup_only, true_intersection

from vflflare.jobs import write_job
from vflflare.protocol.alignment import PSI_FILE, read_psi_file
from vflflare.registry import make_config
from vflflare.simulation import simulate

pytestmark = pytest.mark.simulator
JOBS = Path(__file__).resolve().parents[1] / "jobs"
FAST = {"ssl_epochs": 2, "classifier_epochs": 20}


def psi_outputs(root: Path) -> dict[str, list[str]]:
    return {s: read_psi_file(root / s / PSI_FILE, s) for s in SITES}


def rename_ids(path: Path, keep: set[str]) -> None:
    """Give every row of a site's table whose ID is not in `keep` an ID no other party has."""
    lines = path.read_text().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        row_id, rest = line.split(",", 1)
        out.append(line if row_id in keep else f"only-here-{row_id},{rest}")
    path.write_text("\n".join(out) + "\n")


@pytest.fixture(scope="module")
def psi_job_root(tmp_path_factory):
    """A split root on which the committed jobs/psi ran. The server's labels cover 10 overlap rows
    less than the overlap, plus 40 rows outside it (label restriction is checked downstream)."""
    tmp = tmp_path_factory.mktemp("psi_job")
    root = make_root(tmp)
    overlap = read_ids(root / "overlap_ids.csv")
    unaligned = [i for i in read_ids(root / "site-1" / "train.csv") if i not in set(overlap)][:40]
    _edit_labels(root / "server" / "train_labels.csv", set(overlap[:10]), unaligned)
    results = simulate(str(JOBS / "psi"), str(tmp / "ws"), 2, 2, str(root), timeout=300)
    return root, results


def test_psi_job_finds_the_true_overlap_and_test_rows(psi_job_root):
    root, results = psi_job_root
    assert "error" not in results, results.get("error")
    truth = set(true_intersection(root))
    assert len(truth) == 150 + 114
    for site, items in psi_outputs(root).items():
        assert set(items) == truth, site
        assert {i.split(":", 1)[1] for i in items if i.startswith("train:")} == set(read_ids(root / "overlap_ids.csv"))
    assert results["psi"]["intersection"] == len(truth)
    assert results["psi"]["protocol"] == "ecdh"  # two sites: the one-exchange ECDH-PSI (protocol/ecdh_psi.py)
    assert results["psi"]["items_per_site"] == {s: len(read_ids(root / s / "train.csv")) + 114 for s in SITES}


def test_vfl_job_aligned_by_the_psi_job_output(psi_job_root, tmp_path):
    root, _ = psi_job_root
    job = write_job(tmp_path / "jobs", "oneshot_psi", {"algorithm": "oneshot", "alignment": "psi", **FAST})
    results = simulate(str(job), str(tmp_path / "ws"), 2, 2, str(root), timeout=300)
    assert "error" not in results, results.get("error")
    hashed = setup_only(root, make_config(alignment="hash"))[2]
    # the server's labels restricted to the intersection: 150 shared rows, 10 of them unlabeled
    assert results["rows"] == hashed == {"aligned_train": 112, "val": 28, "test": 114}
    assert results["communication"]["per_phase"]["setup"]["uploads"] == 0
    assert results["metrics"]["test_auc"] > 0.9


def test_psi_as_first_phase_of_a_vfl_job(tmp_path):
    """`vflflare jobs --psi` on the embedded default, labels on site-1: no files at all; the PSI
    result goes to each site's job folder and straight into the VFL phase."""
    job = write_job(
        tmp_path / "jobs", "oneshot_with_psi", {"algorithm": "oneshot", "label_owner": "site-1", **FAST}, psi=True
    )
    results = simulate(str(job), str(tmp_path / "ws"), 2, 2, None, timeout=300)
    assert "error" not in results, results.get("error")
    hashed = setup_only(None, make_config(alignment="hash", label_owner="site-1"))[2]
    assert results["rows"] == hashed == {"aligned_train": 120, "val": 30, "test": 114}
    run_dir = Path(results["results_path"]).parent
    psi = json.loads((run_dir / "psi_results.json").read_text())
    assert psi["psi"]["intersection"] == 150 + 114 and psi["psi"]["protocol"] == "ecdh"
    for site in SITES:
        assert len(read_psi_file(tmp_path / "ws" / site / "simulate_job" / PSI_FILE, site)) == 150 + 114


def test_psi_job_with_an_empty_intersection(tmp_path):
    """A one-element intersection: test_one_shared_training_row_fails_alignment_clearly."""
    root = make_root(tmp_path)
    rename_ids(root / "site-2" / "train.csv", set())
    rename_ids(root / "site-2" / "test.csv", set())
    results = simulate(str(JOBS / "psi"), str(tmp_path / "ws"), 2, 2, str(root), timeout=300)
    assert results["error"] == (
        "the PSI intersection is empty: the sites share no IDs (train + test IDs per site: site-1: 417, site-2: 416)"
    )


def test_one_shared_training_row_fails_alignment_clearly(tmp_path):
    root = make_root(tmp_path)
    keep = set(read_ids(root / "overlap_ids.csv")[:1]) | set(read_ids(root / "site-2" / "test.csv"))
    rename_ids(root / "site-2" / "train.csv", keep)
    job = write_job(tmp_path / "jobs", "oneshot_with_psi", {"algorithm": "oneshot", **FAST}, psi=True)
    results = simulate(str(job), str(tmp_path / "ws"), 2, 2, str(root), timeout=300)
    # PSI worked: one shared training ID (and the shared test rows) on every site
    for items in psi_outputs(root).values():
        assert [i for i in items if i.startswith("train:")] == [
            f"train:{next(iter(keep & set(read_ids(root / 'overlap_ids.csv'))))}"
        ]
    assert "only 0 aligned labeled rows for training (1 shared, 1 held out for validation)" in results["error"]
    assert "the task has 2 classes" in results["error"]
