"""Issue 28 item 5: every example runs as its README says: prepare_data.py, `vflflare check-data`, then
job.py in the NVFlare simulator (with fewer SSL epochs, to keep CI short)."""

from __future__ import annotations

import sys

import pytest
from deployment_helpers import REPO, env_with, run_bounded

EXAMPLES = {  # example -> a line its job.py prints when it worked
    "own_tables": "predictions: ",
    "labels_at_site_he": "'plaintext': 0, 'encrypted'",
    "image_and_table": "test accuracy ",
}


@pytest.mark.simulator
@pytest.mark.parametrize("example", list(EXAMPLES))
def test_an_example_runs_as_its_readme_says(tmp_path, example):
    folder, data, env = (
        REPO / "examples" / example,
        tmp_path / "data",
        env_with(VFLFLARE_DATA_ROOT=None, VFLFLARE_RUNS_ROOT=None),
    )
    steps = [
        [sys.executable, str(folder / "prepare_data.py"), "--out", str(data)],
        [sys.executable, "-m", "vflflare.cli", "check-data", "--data-root", str(data)],
        [
            sys.executable,
            str(folder / "job.py"),
            "--data-root",
            str(data),
            "--workspace",
            str(tmp_path / "ws"),
            "--ssl-epochs",
            "2",
        ],
    ]
    for n, step in enumerate(steps):
        run = run_bounded(step, 600, tmp_path / "ws", tmp_path / f"step{n}.log", env, cwd=folder)
        assert run.returncode == 0, run.output[-4000:]
    assert "no problems found" in (tmp_path / "step1.log").read_text()
    assert EXAMPLES[example] in run.output, run.output[-3000:]
