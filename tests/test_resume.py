"""Resume from the last completed phase (issue 10, item 3): a run with `checkpoint: true` stopped by a
site failure goes on with `resume: <run id>` and ends with the numbers of a run never stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from vflflare.protocol.checkpoint import RUNS_DIR, ResumeError
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.registry import make_config

SITES = ["site-1", "site-2"]


class Killed(RuntimeError):
    pass


@pytest.fixture
def kill_site_2(monkeypatch):
    """Make site-2 fail the first time it gets `task` (`count`: after that many calls of it)."""

    def arm(task: str, count: int = 0) -> None:
        original = SiteRuntime._handle
        seen = {"n": 0}

        def handle(self, name, payload):
            if self.site == "site-2" and name == task:
                seen["n"] += 1
                if seen["n"] == count + 1:
                    monkeypatch.setattr(SiteRuntime, "_handle", original)  # the restarted site works
                    raise Killed(f"site-2 died during '{task}'")
            return original(self, name, payload)

        monkeypatch.setattr(SiteRuntime, "_handle", handle)

    return arm


def run_id_of(runs: Path) -> str:
    (run,) = [p.name for p in (runs / "server" / RUNS_DIR).iterdir()]
    return run


@pytest.mark.parametrize(
    "settings, task, count, replayed",
    [
        # one-shot, killed in local_ssl: representations replayed, the rest runs again
        ({"algorithm": "oneshot", "ssl_epochs": 2}, "oneshot_update", 0, 1),
        # few-shot, labels at site-2 (so label calls are exchanges too), killed in a split-NN fine-tuning step
        ({"algorithm": "fewshot", "ssl_epochs": 2, "finetune_epochs": 3, "label_owner": "site-2"}, "split", 5, 6),
        # VFLHLP, killed in split NN after both local pretrainings: they are replayed from the sites' states
        (
            {
                "algorithm": "vflhlp",
                "label_owner": "site-1",
                "pretrain_epochs": 2,
                "active_epochs": 10,
                "split_epochs": 5,
            },
            "split",
            5,
            1,
        ),
    ],
)
def test_resumed_run_ends_like_an_uninterrupted_one(tmp_path, kill_site_2, settings, task, count, replayed):
    reference = run_inprocess(make_config(settings), SITES, None)
    runs = tmp_path / "runs"
    kill_site_2(task, count)
    with pytest.raises(Killed):
        run_inprocess(make_config({**settings, "checkpoint": True}), SITES, None, runs_root=str(runs))
    run_id = run_id_of(runs)
    resumed = run_inprocess(make_config({**settings, "resume": run_id}), SITES, None, runs_root=str(runs))
    assert resumed["run_id"] == run_id and resumed["replayed_exchanges"] == replayed
    assert resumed["metrics"] == pytest.approx(reference["metrics"], abs=1e-6)


def test_cfl_resumes_after_its_last_completed_round(tmp_path, kill_site_2):
    from vflflare import cli

    root = str(tmp_path / "silos")
    assert cli.main(["split", "--dataset", "breast_cancer", "--silo-space", "--out", root]) == 0
    settings = {"algorithm": "cfl", "cfl_rounds": 3, "cfl_hidden": 16}
    reference = run_inprocess(make_config(settings), SITES, root)
    runs = tmp_path / "runs"
    kill_site_2("cfl_local_training", 1)  # in the second round
    with pytest.raises(Killed):
        run_inprocess(make_config({**settings, "checkpoint": True}), SITES, root, runs_root=str(runs))
    resumed = run_inprocess(make_config({**settings, "resume": run_id_of(runs)}), SITES, root, runs_root=str(runs))
    assert resumed["replayed_exchanges"] == 4  # silo width, round 1's training and its FedAvg up and down
    assert resumed["metrics"] == pytest.approx(reference["metrics"], abs=1e-6)


@pytest.mark.parametrize("label_owner", ["server", "site-2"])
def test_split_nn_resumes_from_its_last_save_point(tmp_path, kill_site_2, monkeypatch, label_owner):
    """120 aligned rows, batch 32: 5 'split' steps an epoch. Killed in epoch 7 (its 32nd step), the run
    saved its progress after epochs 3 and 6; resumed, it trains epochs 7 and 8 only. The test AUC of
    every epoch (test_curve) is that of the run never stopped: the weights, optimisers and batch order
    all went on from the save point."""
    settings = {
        "algorithm": "vanilla",
        "split_epochs": 8,
        "split_patience": 8,
        "split_checkpoint_every": 3,
        "label_owner": label_owner,
        "test_curve": True,
    }
    reference = run_inprocess(make_config(settings), SITES, None)
    runs = tmp_path / "runs"
    kill_site_2("split", 31)
    with pytest.raises(Killed):
        run_inprocess(make_config({**settings, "checkpoint": True}), SITES, None, runs_root=str(runs))
    run_id = run_id_of(runs)
    steps = []
    original = SiteRuntime._handle
    monkeypatch.setattr(
        SiteRuntime,
        "_handle",
        lambda self, name, payload: (
            (steps.append(name) if self.site == "site-1" and name == "split" else None) or original(self, name, payload)
        ),
    )
    resumed = run_inprocess(make_config({**settings, "resume": run_id}), SITES, None, runs_root=str(runs))
    assert resumed["replayed_exchanges"] == 2  # the save points of epochs 3 and 6
    assert len(steps) == 2 * 5
    assert resumed["training"]["split_epochs"] == 8
    curve = [point["test_auc"] for point in resumed["training"]["test_curve"]]
    assert curve == pytest.approx([point["test_auc"] for point in reference["training"]["test_curve"]], abs=1e-9)
    assert resumed["metrics"] == pytest.approx(reference["metrics"], abs=1e-6)


def test_resume_refuses_an_altered_checkpoint_or_other_settings(tmp_path, kill_site_2):
    settings = {"algorithm": "oneshot", "ssl_epochs": 2}
    runs = tmp_path / "runs"
    kill_site_2("oneshot_update")
    with pytest.raises(Killed):
        run_inprocess(make_config({**settings, "checkpoint": True}), SITES, None, runs_root=str(runs))
    run_id = run_id_of(runs)
    with pytest.raises(ResumeError, match=r"resume '\w+': the job's settings \['ssl_epochs'\] differ from the run's"):
        run_inprocess(make_config({**settings, "ssl_epochs": 3, "resume": run_id}), SITES, None, runs_root=str(runs))
    checkpoint = next((runs / "site-1" / RUNS_DIR / run_id / "site-1").glob("*.party.pt"))
    checkpoint.write_bytes(checkpoint.read_bytes() + b"x")
    with pytest.raises(
        ResumeError,
        match=rf"site 'site-1': checkpoint {checkpoint} does not match the coordinator's "
        rf"journal of run '{run_id}'",
    ):
        run_inprocess(make_config({**settings, "resume": run_id}), SITES, None, runs_root=str(runs))
    with pytest.raises(ResumeError, match="resume 'nope': no journal at"):
        run_inprocess(make_config({**settings, "resume": "nope"}), SITES, None, runs_root=str(runs))
