"""job.py, as a user runs it: `--export --export-dir` writes the committed job folder; `--env sim` and
`--env poc` give the same numbers as the in-process run (and therefore as `nvflare simulator
jobs/oneshot_vfl`, which test_simulator_jobs checks against the in-process run)."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

REPO = Path(__file__).resolve().parents[1]


def job_py(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "job.py"), *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )


def results_of(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(Path(proc.stdout.strip().splitlines()[-1].removeprefix("results: ")).read_text())


def test_export_is_the_committed_job(tmp_path):
    proc = job_py("--algorithm", "fewshot", "--export", "--export-dir", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    exported, committed = tmp_path / "fewshot_vfl", REPO / "jobs" / "fewshot_vfl"
    files = sorted(str(p.relative_to(committed)) for p in committed.rglob("*") if p.is_file())
    assert sorted(str(p.relative_to(exported)) for p in exported.rglob("*") if p.is_file()) == files
    assert all(filecmp.cmp(exported / f, committed / f, shallow=False) for f in files)


def test_help_answers_at_once_and_lists_every_plugin(tmp_path):
    """Issue 38: `job.py --help` took 17 s (it loaded torch and every plug-in to list their names)."""
    sys.path.insert(0, str(REPO))
    from job import ALGORITHM_NAMES

    # the built-in registry, in a fresh interpreter (tests in this one register plug-ins of their own)
    builtin = subprocess.run(
        [
            sys.executable,
            "-c",
            "from vflflare.registry import algorithms; print(','.join(sorted(algorithms())))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sorted(ALGORITHM_NAMES) == builtin.stdout.strip().split(","), builtin.stderr[-2000:]
    proc = job_py("--help", cwd=tmp_path)
    assert proc.returncode == 0 and "fedhssl" in proc.stdout
    # what made it slow stays unloaded (a structural check: timing belongs to benchmarks/)
    probe = (
        "import runpy, sys\nsys.argv = ['job.py', '--help']\ntry:\n    runpy.run_path(sys.argv[0], run_name='__main__')"
        "\nexcept SystemExit:\n    pass\nprint('LOADED', sorted(m for m in ('torch', 'nvflare.recipe') if m in "
        "sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "LOADED []" in loaded.stdout, loaded.stdout[-500:] + loaded.stderr[-2000:]
    unknown = job_py("--algorithm", "oneshoot", "--export", "--export-dir", str(tmp_path), cwd=tmp_path)
    assert unknown.returncode != 0 and "unknown --algorithm 'oneshoot'; known: cfl, fedbcd" in unknown.stderr


def test_unknown_setting_names_the_algorithm(tmp_path):
    proc = job_py(
        "--algorithm", "oneshot", "--set", "ssl_epoch=3", "--export", "--export-dir", str(tmp_path), cwd=tmp_path
    )
    assert proc.returncode != 0
    assert "algorithm 'oneshot' has no setting ['ssl_epoch']" in proc.stderr


@pytest.mark.simulator
def test_sim_equals_in_process(tmp_path):
    proc = job_py(
        "--algorithm",
        "oneshot",
        "--sites",
        "2",
        "--env",
        "sim",
        "--set",
        "ssl_epochs=2",
        "--workspace",
        str(tmp_path),
        cwd=tmp_path,
    )
    results = results_of(proc)
    reference = run_inprocess(make_config(algorithm="oneshot", ssl_epochs=2), ["site-1", "site-2"], None)
    assert results["metrics"] == reference["metrics"]
    assert results["communication"]["per_site"].keys() == reference["communication"]["per_site"].keys()
    for site, row in reference["communication"]["per_site"].items():
        assert {
            k: results["communication"]["per_site"][site][k] for k in ("uploads", "downloads", "payload_bytes")
        } == {k: row[k] for k in ("uploads", "downloads", "payload_bytes")}
    assert "expected by the algorithm" in proc.stdout and "MISMATCH" not in proc.stdout
    assert proc.stdout.count("expected by the algorithm") == 1  # issue 38: the table once


@pytest.mark.simulator
def test_poc_runs_the_job(tmp_path):
    """NVFlare's PocEnv prepares, starts and stops a POC of its own (private workspace and home)."""
    env = {**os.environ, "NVFLARE_POC_WORKSPACE": str(tmp_path / "poc"), "HOME": str(tmp_path / "home")}
    env.pop("VFLFLARE_DATA_ROOT", None)
    results = results_of(
        job_py(
            "--algorithm", "oneshot", "--env", "poc", "--set", "ssl_epochs=2", "--timeout", "300", cwd=tmp_path, env=env
        )
    )
    reference = run_inprocess(make_config(algorithm="oneshot", ssl_epochs=2), ["site-1", "site-2"], None)
    assert results["metrics"] == reference["metrics"]
    assert {s: (v["uploads"], v["downloads"]) for s, v in results["communication"]["per_site"].items()} == {
        "site-1": (2, 1),
        "site-2": (2, 1),
    }
