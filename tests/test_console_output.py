"""Issue 38, "output a person reads": the README's default job and a failing job, run in the NVFlare simulator
the way `scripts/run_default_job.sh` runs it, counted line by line. Each line once, the table once, one
error once with what to do, no traceback on the console (the workspace's log files keep them)."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from collections import Counter

import pytest
from deployment_helpers import REPO, env_with

pytestmark = pytest.mark.simulator
JOB = REPO / "jobs" / "oneshot_vfl"


def _simulate(workspace, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vflflare.cli", "simulate", str(JOB), "-w", str(workspace), "-t", "2", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env_with(VFLFLARE_DATA_ROOT=None, VFLFLARE_RUNS_ROOT=str(workspace / "runs")),
    )


def _repeated(lines: list[str]) -> list[str]:
    """Lines, timestamps aside, that show more than once."""
    bodies = Counter(line.split(" ", 1)[-1] if line[:2].isdigit() else line for line in lines if line.strip())
    return [line for line, n in bodies.items() if n > 1]


def test_the_default_job_prints_at_most_40_lines_each_once(tmp_path):
    run = _simulate(tmp_path / "ws", "-n", "2")
    lines = (run.stdout + run.stderr).splitlines()
    assert run.returncode == 0, "\n".join(lines[-60:])
    assert len(lines) <= 40, "\n".join(lines)
    assert not _repeated(lines), _repeated(lines)
    assert sum("expected by the algorithm" in line for line in lines) == 1  # the table once
    assert not any("deprecated" in line or "Traceback" in line for line in lines), "\n".join(lines)
    assert lines[-1].startswith("results: ")


def test_a_failing_job_says_what_where_and_what_to_do_once(tmp_path):
    data = tmp_path / "data"
    split = subprocess.run(
        [
            sys.executable,
            "-m",
            "vflflare.cli",
            "split",
            "--dataset",
            "breast_cancer",
            "--sites",
            "broker,insurer",
            "--overlap",
            "100",
            "--out",
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert split.returncode == 0, split.stderr
    train = data / "broker" / "train.csv"
    rows = list(csv.reader(train.open()))
    rows[5][3] = "abc"
    with train.open("w", newline="") as out:
        csv.writer(out).writerows(rows)
    run = _simulate(tmp_path / "ws", "--sites", "broker,insurer", "--data-root", str(data))
    lines = (run.stdout + run.stderr).splitlines()
    assert run.returncode == 1, "\n".join(lines[-60:])
    assert len(lines) <= 20, "\n".join(lines)
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    errors = [line for line in lines if "non-numeric value" in line]
    assert len(errors) == 1 and errors[0].startswith("FAILED: ") and "broker/train.csv line 6" in errors[0], lines
    assert any(line.startswith("what to do: fix the file named above") for line in lines), lines
    # the whole story stays in the party's log file
    site_log = next((tmp_path / "ws").rglob("broker/log.txt")).read_text()
    assert "Traceback" in site_log and "non-numeric value 'abc'" in site_log
    shutil.rmtree(tmp_path / "ws", ignore_errors=True)
