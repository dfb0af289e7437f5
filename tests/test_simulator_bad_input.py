"""Bad input on a site or at the label party ends the simulator run quickly with an error that names
the site, the file and the row or column -- no hang. A site's bad value, non-numeric cell, duplicate ID,
bad label and unpartnered test ID: test_error_disclosure.py, whose simulator runs also check that the
coordinator's copy of the error withholds the row."""

import time

import pytest
from simulator_helpers import run_job

from vflflare.cli import main as vflflare_main

pytestmark = pytest.mark.simulator


@pytest.fixture
def data_root(tmp_path):
    root = tmp_path / "data"
    assert (
        vflflare_main(
            [
                "split",
                "--dataset",
                "breast_cancer",
                "--sites",
                "2",
                "--overlap",
                "120",
                "--seed",
                "0",
                "--out",
                str(root),
            ]
        )
        == 0
    )
    return root


def _run_failing(tmp_path, data_root, **overrides):
    start = time.monotonic()
    results = run_job(tmp_path, "oneshot", data_root=data_root, timeout=300, **overrides)
    assert time.monotonic() - start < 240
    assert "error" in results, "the job should have failed"
    return results["error"]


def test_label_outside_classes_at_the_server(tmp_path, data_root):
    path = data_root / "server" / "train_labels.csv"
    lines = path.read_text().splitlines()
    lines[2] = lines[2].rsplit(",", 1)[0] + ",7"
    path.write_text("\n".join(lines) + "\n")
    error = _run_failing(tmp_path, data_root)
    assert "server" in error and "train_labels.csv" in error and "line 3" in error


def test_missing_site_folder(tmp_path, data_root):
    (data_root / "site-2").rename(data_root / "elsewhere")
    error = _run_failing(tmp_path, data_root)
    assert "site-2" in error and str(data_root / "site-2") in error
