"""Issue 28 item 4: provisioning/README.md's "Rehearse on one machine" works as written: provisioning/rehearse.py
provisions the project on localhost, points every kit at the data, starts each kit with its own start.sh,
submits a job as the lead, downloads its result and shuts the system down."""

from __future__ import annotations

import json
import sys

import pytest
from deployment_helpers import REPO, env_with, run_bounded


@pytest.mark.simulator
def test_the_rehearsal_runs_a_job_on_one_machine_and_shuts_down(tmp_path):
    out = tmp_path / "rehearsal"
    run = run_bounded(
        [
            sys.executable,
            str(REPO / "provisioning" / "rehearse.py"),
            "--out",
            str(out),
            "--timeout",
            "300",
            "--sites",
            "broker,insurer",
        ],
        540,
        out / "prov",
        tmp_path / "rehearse.log",
        env_with(VFLFLARE_DATA_ROOT=None),
    )
    assert run.returncode == 0, run.output[-4000:]
    for step in (
        "1. provisioned",
        "2. data root",
        "3. started",
        "5. shut down insurer as it@insurer.example.com",
        "5. shut down the server as admin@bank.example.com",
    ):
        assert step in run.output, run.output[-4000:]
    assert "4. job " in run.output and ": FINISHED:COMPLETED" in run.output
    results = json.loads(next((out / "results").rglob("vflflare_results.json")).read_text())
    assert "error" not in results and results["metrics"]["test_auc"] > 0.9
    assert results["sites"] == ["broker", "insurer"]  # issue 38: the user's names, no hand-edited project.yml
    # issue 38: NVFlare's connection chatter (a shut-down server is unreachable on purpose) stays out
    assert "target_unreachable" not in run.output and "Connecting to FLARE" not in run.output
    assert len(run.output.splitlines()) <= 45, run.output
