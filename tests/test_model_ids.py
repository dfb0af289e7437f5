"""Issue 38: every training run saves its model under a model ID of its own (job name, algorithm, time), so a
second run beside the first adds to the store; `vflflare models` lists it; predictions are named after the model
that made them, with a sidecar saying which model, which rows and when; the scoring command printed after a
training run pastes and runs as is."""

from __future__ import annotations

import csv
import json
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from scoring_helpers import score_the_test_rows

from vflflare import cli
from vflflare.jobs import write_job
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.model_ids import list_models, new_model_id
from vflflare.protocol.model_store import LABEL_DIR, ModelStoreError, models_dir, read_predictions, save_site_model
from vflflare.registry import make_config
from vflflare.results import format_table

REPO = Path(__file__).resolve().parents[1]
SITES = ["site-1", "site-2"]


def _split(root: Path, *extra: str, sites: list[str] = SITES) -> Path:
    """A breast-cancer split whose sites each get their test rows as score.csv."""
    args = ["split", "--dataset", "breast_cancer", "--overlap", "200", "--out", str(root), "--sites", ",".join(sites)]
    assert cli.main([*args, *extra]) == 0
    score_the_test_rows(root, sites)
    return root


def test_a_model_id_is_readable_and_never_taken_twice(tmp_path):
    now = time.mktime((2026, 11, 27, 13, 25, 1, 0, 0, -1))
    assert new_model_id("oneshot_vfl", "oneshot", now=now) == "oneshot_vfl-oneshot-20261127T132501"
    assert new_model_id("my job/../x", "vanilla", now=now) == "my_job_.._x-vanilla-20261127T132501"
    (tmp_path / "vflflare_models" / "oneshot_vfl-oneshot-20261127T132501").mkdir(parents=True)
    assert new_model_id("oneshot_vfl", "oneshot", [None, tmp_path], now) == "oneshot_vfl-oneshot-20261127T132501-2"


def test_a_saved_model_is_never_overwritten(tmp_path):
    import torch

    folder = tmp_path / "m" / "site-1"
    save_site_model(folder, "site-1", torch.nn.Linear(2, 2), None, {"algorithm": "oneshot", "model_id": "m"})
    before = (folder / "manifest.json").read_text()
    with pytest.raises(ModelStoreError, match="already saved.*never overwritten"):
        save_site_model(folder, "site-1", torch.nn.Linear(2, 2), None, {"algorithm": "vanilla", "model_id": "m"})
    assert (folder / "manifest.json").read_text() == before


def test_two_runs_one_after_the_other_both_stay_scoreable_and_are_listed(tmp_path, capsys):
    """One-shot, then vanilla, on the same data and runs root: two model folders; each scores with its own
    model, its predictions named after it, a sidecar saying which model, which rows, when."""
    data, runs = _split(tmp_path / "data"), tmp_path / "runs"
    settings = {"oneshot": {"ssl_epochs": 2}, "vanilla": {"split_epochs": 2}}
    trained = {
        a: run_inprocess(make_config(algorithm=a, **s), SITES, str(data), runs_root=str(runs))
        for a, s in settings.items()
    }
    ids = {a: r["model_id"] for a, r in trained.items()}
    assert ids["oneshot"] != ids["vanilla"] and all(
        re.fullmatch(rf"inprocess-{a}-\d{{8}}T\d{{6}}(-\d+)?", i) for a, i in ids.items()
    )
    for algorithm, model_id in ids.items():
        label = models_dir(runs / "server", model_id) / LABEL_DIR
        assert json.loads((label / "manifest.json").read_text())["algorithm"] == algorithm
        scored = run_inprocess(
            make_config(algorithm="vertical_inference", model_job=model_id), SITES, str(data), runs_root=str(runs)
        )
        path = Path(scored["training"]["predictions"])
        assert path.name == f"predictions_{model_id}.csv"
        assert read_predictions(path) == read_predictions(label / "test_predictions.csv")
        about = json.loads(path.with_suffix(".json").read_text())
        assert about["model_id"] == model_id and about["model"]["algorithm"] == algorithm
        assert about["rows"] == {
            "score_file": str(data / "server" / "score.csv"),  # the label party's own list of IDs
            "scored": trained[algorithm]["rows"]["test"],
            "id_column": "id",
        }
        assert about["columns"] == ["score"] and about["scored_at"] and about["scoring_job_id"]
        assert scored["label_owner"] == "server"

    listed = list_models(runs / "server")
    assert [m["model_id"] for m in listed] == [ids["oneshot"], ids["vanilla"]]
    assert listed[0]["sites"] == SITES and listed[0]["label_owner"] == "server" and "test_auc" in listed[0]["metrics"]
    capsys.readouterr()
    assert cli.main(["models", "--data-root", str(runs / "server")]) == 0
    out = capsys.readouterr().out
    assert "2 saved model(s)" in out and ids["oneshot"] in out and ids["vanilla"] in out and "test_auc" in out


def test_scoring_prints_the_label_owner_that_got_the_predictions(tmp_path):
    """Trained with the labels at site-2, scored without naming it: the results say site-2, where the
    predictions are; naming another owner is refused."""
    data, runs = _split(tmp_path / "data", "--label-owner", "site-2"), tmp_path / "runs"
    trained = run_inprocess(
        make_config(algorithm="oneshot", label_owner="site-2"), SITES, str(data), runs_root=str(runs)
    )
    scored = run_inprocess(
        make_config(algorithm="vertical_inference", model_job=trained["model_id"]),
        SITES,
        str(data),
        runs_root=str(runs),
    )
    assert scored["label_owner"] == "site-2" and str(runs / "site-2") in scored["training"]["predictions"]
    assert format_table(scored).startswith(
        "vflflare vertical_inference  seed 0  sites site-1, site-2  label owner site-2"
    )
    # test_predictions.csv and the predictions use the user's ID column
    with open(models_dir(runs / "site-2", trained["model_id"]) / LABEL_DIR / "test_predictions.csv", newline="") as f:
        assert next(csv.reader(f)) == ["id", "score"]
    with pytest.raises(ModelStoreError, match="label_owner 'site-1'.*is at 'site-2'"):
        run_inprocess(
            make_config(algorithm="vertical_inference", model_job=trained["model_id"], label_owner="site-1"),
            SITES,
            str(data),
            runs_root=str(runs),
        )


def test_the_scoring_command_names_everything_it_needs():
    results = {
        "algorithm": "oneshot",
        "sites": ["broker", "insurer"],
        "label_owner": "insurer",
        "metrics": {},
        "job_id": "simulate_job",
        "model_id": "m-oneshot-20261127T132501",
        "environment": {"kind": "simulator", "data_root": "/data/my root"},
    }
    hint = next(line for line in format_table(results).splitlines() if line.startswith("score new rows"))
    command = shlex.split(hint.split(": ", 1)[1])
    assert command[1].endswith("job.py") and command[2:] == [
        "--algorithm",
        "vertical_inference",
        "--sites",
        "broker,insurer",
        "--label-owner",
        "insurer",
        "--set",
        "model_job=m-oneshot-20261127T132501",
        "--env",
        "sim",
        "--data-root",
        "/data/my root",
    ]
    listing = next(line for line in format_table(results).splitlines() if line.startswith("list the models"))
    assert shlex.split(listing.split(": ", 1)[1])[1:] == ["models", "--data-root", "/data/my root"]
    prod = {**results, "environment": {"kind": "prod", "startup_kit": "/kits/admin@x.com"}}
    assert format_table(prod).splitlines()[-1].endswith("--env prod --startup-kit /kits/admin@x.com")


@pytest.mark.simulator
def test_the_printed_scoring_command_runs_verbatim_after_a_simulator_run(tmp_path):
    """Train in the NVFlare simulator with the user's site names and the labels at a site, take the scoring
    command the coordinator printed, run it exactly as printed: it scores with that model."""
    sites = ["broker", "insurer"]
    data = _split(tmp_path / "data", "--label-owner", "insurer", sites=sites)
    job = write_job(
        tmp_path / "jobs", "insurance", {"algorithm": "oneshot", "label_owner": "insurer", "ssl_epochs": 2}, sites=sites
    )
    console = tmp_path / "train.log"
    with console.open("w") as out:
        trained = cli.simulate(str(job), str(tmp_path / "ws"), 2, 2, str(data), sites=sites, verbose=False, console=out)
    assert "error" not in trained, trained.get("error")
    printed = [line for line in console.read_text().splitlines() if line.startswith("score new rows")]
    assert len(printed) >= 1, console.read_text()[-3000:]
    command = shlex.split(printed[-1].split(": ", 1)[1])
    assert f"model_job={trained['model_id']}" in command and "--sites" in command
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "label owner insurer" in run.stdout
    predictions = data / "vflflare_predictions" / f"predictions_{trained['model_id']}.csv"
    expected = models_dir(data, trained["model_id"]) / LABEL_DIR / "test_predictions.csv"
    assert read_predictions(predictions) == read_predictions(expected)
    assert json.loads(predictions.with_suffix(".json").read_text())["model"]["label_owner"] == "insurer"


def test_test_predictions_use_the_users_id_column(tmp_path):
    data, runs = _split(tmp_path / "data"), tmp_path / "runs"
    for name in ("train_labels.csv", "test_labels.csv"):
        path = data / "server" / name
        path.write_text(path.read_text().replace("id,label", "customer_id,label", 1))
    (data / "server" / "labels.json").write_text(json.dumps({"num_classes": 2, "id_column": "customer_id"}))
    trained = run_inprocess(make_config(algorithm="oneshot", ssl_epochs=1), SITES, str(data), runs_root=str(runs))
    path = models_dir(runs / "server", trained["model_id"]) / LABEL_DIR / "test_predictions.csv"
    assert path.read_text().splitlines()[0] == "customer_id,score"
