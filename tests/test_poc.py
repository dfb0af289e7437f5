"""POC: a job runs end to end through poc/run.sh with real server, site and admin processes on
localhost, and gives the in-process run's numbers. Also site-local data configuration and job staging."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from deployment_helpers import (
    POC_RUN,
    REPO,
    env_with,
    free_port,
    results_path_from,
    run_bounded,
)
from scoring_helpers import score_the_test_rows

from vflflare.data.errors import DataError
from vflflare.flare.site_config import SITE_CONFIG_FILE, resolve_party_data_root, write_site_config
from vflflare.protocol.model_store import LABEL_DIR, models_dir, read_predictions
from vflflare.staging import stage_job

JOB = REPO / "jobs" / "oneshot_vfl"
COUNTS = ("uploads", "downloads", "payload_bytes")


def _fl_ctx(workspace: Path):
    """The part of an FLContext site_config uses: engine.get_workspace().get_site_config_dir()."""
    ws = SimpleNamespace(get_site_config_dir=lambda: str(workspace / "local"))
    engine = SimpleNamespace(get_workspace=lambda: ws)
    return SimpleNamespace(get_engine=lambda: engine, get_prop=lambda key, default=None: default)


def test_site_data_root_precedence(tmp_path, monkeypatch):
    ctx = _fl_ctx(tmp_path / "site-1")
    monkeypatch.delenv("VFLFLARE_DATA_ROOT", raising=False)
    assert resolve_party_data_root(None, ctx, "site-1") is None  # embedded default
    monkeypatch.setenv("VFLFLARE_DATA_ROOT", "/env/root")
    assert resolve_party_data_root(None, ctx, "site-1") == "/env/root"
    write_site_config(tmp_path / "site-1", tmp_path / "own")
    assert resolve_party_data_root(None, ctx, "site-1") == str((tmp_path / "own").resolve())
    assert resolve_party_data_root("/job/arg", ctx, "site-1") == "/job/arg"
    # relative to the file's folder
    (tmp_path / "site-1" / "local" / SITE_CONFIG_FILE).write_text('{"data_root": "../data"}')
    assert resolve_party_data_root(None, ctx, "site-1") == str((tmp_path / "site-1" / "data").resolve())
    # a file without data_root leaves the choice to the environment
    (tmp_path / "site-1" / "local" / SITE_CONFIG_FILE).write_text("{}")
    assert resolve_party_data_root(None, ctx, "site-1") == "/env/root"


def test_malformed_site_config_names_site_and_file(tmp_path):
    config = tmp_path / "site-2" / "local" / SITE_CONFIG_FILE
    config.parent.mkdir(parents=True)
    config.write_text('{"data_root": 3}')
    with pytest.raises(DataError, match=r"site 'site-2'.*vflflare\.json.*must be a path"):
        resolve_party_data_root(None, _fl_ctx(tmp_path / "site-2"), "site-2")
    config.write_text("{not json")
    with pytest.raises(DataError, match=r"site 'site-2'.*vflflare\.json.*not a valid JSON"):
        resolve_party_data_root(None, _fl_ctx(tmp_path / "site-2"), "site-2")


def test_stage_job_is_self_contained_and_leaves_jobs_alone(tmp_path):
    before = sorted(p.relative_to(JOB).as_posix() for p in JOB.rglob("*"))
    staged = stage_job(JOB, tmp_path)
    assert staged == tmp_path / JOB.name
    assert sorted(p.relative_to(JOB).as_posix() for p in JOB.rglob("*")) == before
    package = staged / "app" / "custom" / "vflflare"
    assert (package / "__init__.py").is_file() and (package / "flare" / "executor.py").is_file()
    assert not list(package.rglob("__pycache__"))
    for name in ["meta.json", "app/config/config_fed_server.json", "app/config/config_fed_client.json"]:
        assert (staged / name).read_text() == (JOB / name).read_text()
    assert stage_job(JOB, tmp_path) == staged  # staging again replaces the copy


@pytest.mark.parametrize("manifest", [True, False])
def test_run_sh_starts_the_data_s_sites_and_refuses_fewer(tmp_path, manifest):
    """Issue 25 item 2: under poc/run.sh each party sees only its own folder, so the coordinator cannot
    notice a site of the data without a POC site; run.sh checks before starting anything."""
    sys.path.insert(0, str(REPO / "poc"))
    from poc_run import PocRun, SetupError, parse_args

    from vflflare.cli import main as vflflare_main

    data = tmp_path / "data"
    assert (
        vflflare_main(["split", "--dataset", "breast_cancer", "--sites", "3", "--overlap", "60", "--out", str(data)])
        == 0
    )
    if not manifest:  # a user's own data
        (data / "manifest.json").unlink()
    job = str(REPO / "jobs" / "oneshot_vfl")
    assert PocRun(parse_args([job, "--data-root", str(data), "--workspace", str(tmp_path / "ws")])).sites() == [
        "site-1",
        "site-2",
        "site-3",
    ]
    with pytest.raises(SetupError, match=r"--data-root: .*site-3"):
        PocRun(parse_args([job, "--sites", "2", "--data-root", str(data), "--workspace", str(tmp_path / "ws")])).sites()


def test_run_sh_takes_the_users_site_names(tmp_path, capsys):
    """Issue 38: `--sites broker,insurer`, and by default the names of the data's folders."""
    sys.path.insert(0, str(REPO / "poc"))
    from poc_run import PocRun, parse_args

    from vflflare.cli import main as vflflare_main

    data = tmp_path / "data"
    assert (
        vflflare_main(
            ["split", "--dataset", "breast_cancer", "--sites", "broker,insurer", "--overlap", "60", "--out", str(data)]
        )
        == 0
    )
    job, ws = str(REPO / "jobs" / "oneshot_vfl"), str(tmp_path / "ws")
    assert PocRun(parse_args([job, "--data-root", str(data), "--workspace", ws])).sites() == ["broker", "insurer"]
    assert PocRun(
        parse_args([job, "--sites", "broker,insurer", "--data-root", str(data), "--workspace", ws])
    ).sites() == ["broker", "insurer"]
    for bad, says in [
        ("broker", "at least 2 sites"),
        ("broker,broker", "duplicate site names"),
        ("broker,server", "not 'server'"),
        ("a b,c", "letters, digits"),
    ]:
        with pytest.raises(SystemExit):
            parse_args([job, "--sites", bad])
        assert says in capsys.readouterr().err


def _site_counts(results: dict) -> dict:
    return {site: {key: row[key] for key in COUNTS} for site, row in results["communication"]["per_site"].items()}


SPLIT = ["--dataset", "breast_cancer", "--overlap", "100", "--sites", "broker,insurer"]  # a user's own site names


@pytest.mark.simulator
def test_poc_run_matches_inprocess(tmp_path):
    """poc/run.sh on a split (server, 2 sites, admin: real processes, each site reading its own
    folder through local/vflflare.json, which run.sh points at a link to the site's folder) gives the
    in-process run's metric and communication counts (test_simulator_jobs.py ties the simulator to the same
    reference). The reference runs after the POC: a simulator beside a starting POC on a loaded 2-core
    machine sometimes never started a site. Image sites load through the same folder in the simulator
    (test_image_jobs.py, examples/image_and_table)."""
    from vflflare.protocol.inprocess import run_inprocess
    from vflflare.registry import make_config

    data = tmp_path / "data"
    sites = ["broker", "insurer"]
    split = run_bounded(
        [sys.executable, "-m", "vflflare.cli", "split", *SPLIT, "--seed", "1", "--out", str(data)],
        120,
        tmp_path / "none",
        tmp_path / "split.log",
    )
    assert split.returncode == 0, split.output
    score_the_test_rows(data, sites)  # new rows to score after training, for the printed scoring command

    poc_ws = tmp_path / "poc_ws"
    poc_cmd = [
        "bash",
        str(POC_RUN),
        str(JOB),
        "--data-root",
        str(data),
        "--workspace",
        str(poc_ws),
        "--port",
        str(free_port()),
        "--timeout",
        "240",
        "--start-timeout",
        "180",
        "--stop-timeout",
        "60",
    ]
    poc = run_bounded(poc_cmd, 540, poc_ws / "poc", tmp_path / "poc.log", env_with(VFLFLARE_DATA_ROOT=None))
    assert poc.returncode == 0, poc.output[-6000:]
    path = results_path_from(poc.output)
    assert path is not None and path.is_file(), poc.output[-3000:]
    assert path.parent.name == "server" and str(path).startswith(str(poc_ws / "results"))
    poc_results = json.loads(path.read_text())
    assert "error" not in poc_results

    # each party read its own folder of the split, not the embedded default
    job_dir = path.parents[1]
    for site in sites:
        log = (job_dir / site / "log.txt").read_text()
        assert f"data root: {poc_ws / 'site_data' / site}" in log
        # and reached the server's job cell over a direct mutual-TLS connection (poc/run.sh's default)
        assert re.search(r"created adhoc connector \S+ to stcp://localhost:\d+ on server\.", log), log[-3000:]

    reference = run_inprocess(make_config(poc_results["config"]), sites, str(data))
    assert poc_results["rows"] == reference["rows"]
    metric = next(k for k in reference["metrics"] if k.startswith("test_"))
    assert poc_results["metrics"][metric] == pytest.approx(reference["metrics"][metric], abs=1e-6)
    assert _site_counts(poc_results) == _site_counts(reference)
    assert {s: (c["uploads"], c["downloads"]) for s, c in _site_counts(poc_results).items()} == {
        site: (2, 1) for site in sites
    }
    assert not (poc_ws / "poc").exists()  # stopped and cleaned
    # issue 38: the scoring command the POC run printed, pasted as is, scores
    printed = [line for line in poc.output.splitlines() if line.startswith("score new rows")]
    assert len(printed) == 1, poc.output[-3000:]
    command = shlex.split(printed[0].split(": ", 1)[1])
    assert "--env" in command and command[command.index("--env") + 1] == "poc", command
    env = env_with(
        VFLFLARE_DATA_ROOT=None, NVFLARE_POC_WORKSPACE=str(tmp_path / "score_poc"), HOME=str(tmp_path / "home")
    )
    scored = run_bounded(command, 540, tmp_path / "score_poc", tmp_path / "score.log", env, cwd=tmp_path)
    assert scored.returncode == 0, scored.output[-4000:]
    model = poc_results["model_id"]
    predictions = data / "vflflare_predictions" / f"predictions_{model}.csv"
    assert predictions.is_file() and len(predictions.read_text().splitlines()) == 1 + poc_results["rows"]["test"]
    # score.csv is test.csv: the saved model (beside the data, nothing set) scores as the training job did
    trained = models_dir(str(data), model) / LABEL_DIR / "test_predictions.csv"
    assert read_predictions(predictions) == read_predictions(trained)


@pytest.mark.simulator
def test_poc_over_an_emulated_wide_area_link(tmp_path):
    """poc/run.sh --link-rtt-ms/--link-mbit (vflflare/poc/wan_link.py): every site message crosses the link, so each
    split-NN step takes at least the round trip and the link carries more than the ledger's wire bytes. The job
    sends its cut layer as bfloat16: the POC's bytes are the in-process run's exactly."""
    from vflflare.protocol.inprocess import run_inprocess
    from vflflare.registry import make_config

    ws, jobs = tmp_path / "ws", tmp_path / "jobs"
    made = run_bounded(
        [
            sys.executable,
            "-m",
            "vflflare.cli",
            "jobs",
            "--out",
            str(jobs),
            "--name",
            "vanilla_bf16",
            "--algorithm",
            "vanilla",
            "--set",
            "wire_dtype=bfloat16",
        ],
        120,
        tmp_path / "none",
        tmp_path / "jobs.log",
    )
    assert made.returncode == 0, made.output
    cmd = [
        "bash",
        str(POC_RUN),
        str(jobs / "vanilla_bf16"),
        "--workspace",
        str(ws),
        "--port",
        str(free_port()),
        "--timeout",
        "300",
        "--start-timeout",
        "180",
        "--stop-timeout",
        "60",
        "--link-rtt-ms",
        "60",
        "--link-mbit",
        "100",
    ]
    poc = run_bounded(cmd, 540, ws / "poc", tmp_path / "poc.log", env_with(VFLFLARE_DATA_ROOT=None))
    assert poc.returncode == 0, poc.output[-6000:]
    path = results_path_from(poc.output)
    results = json.loads(path.read_text())
    assert results["step_latency"]["median_ms"] >= 60, results["step_latency"]
    # per epoch its batches, the last gradient and a validation step (and a commit when it improved); a restore
    assert (
        results["communication"]["rounds"]["step"]
        >= results["step_latency"]["steps"] + 2 * results["training"]["split_epochs"] + 1
    )
    link = json.loads((ws / "results" / "link.json").read_text())
    assert (link["rtt_ms"], link["mbit"]) == (60, 100)
    assert link["up_bytes"] + link["down_bytes"] > results["communication"]["total"]["wire_bytes"]
    for site in ["site-1", "site-2"]:  # no ad-hoc connection around the link
        assert "created adhoc connector" not in (path.parents[1] / site / "log.txt").read_text()
    reference = run_inprocess(make_config(results["config"]), ["site-1", "site-2"], None)
    assert results["communication"]["wire_dtype"] == reference["communication"]["wire_dtype"] == "bfloat16"
    assert _site_counts(results) == _site_counts(reference)
    assert results["metrics"] == pytest.approx(reference["metrics"], abs=1e-6)
