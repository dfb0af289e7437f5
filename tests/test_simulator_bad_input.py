"""Bad input on a site or at the label party ends the simulator run quickly with an error that names
the site, the file and the row or column -- no hang."""

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


def test_duplicate_id_on_a_site(tmp_path, data_root):
    path = data_root / "site-2" / "train.csv"
    lines = path.read_text().splitlines()
    lines.append(lines[5])  # line 6's row again, as the last line
    path.write_text("\n".join(lines) + "\n")
    error = _run_failing(tmp_path, data_root)
    assert "site-2" in error and "train.csv" in error and "line 6" in error and f"line {len(lines)}" in error


def test_non_numeric_value_on_a_site(tmp_path, data_root):
    path = data_root / "site-1" / "test.csv"
    lines = path.read_text().splitlines()
    cells = lines[3].split(",")
    cells[2] = "abc"  # ("n/a" is a missing value now, filled by default)
    lines[3] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    column = lines[0].split(",")[2]
    error = _run_failing(tmp_path, data_root)
    assert "site-1" in error and "test.csv" in error and "line 4" in error and column in error


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
