"""Issue 27: the defenses work unchanged in the NVFlare simulator, channel by channel: the simulator's job gives
exactly the in-process numbers with the defense on, and other numbers than without it (so the defense ran
at the sites and the label party behind NVFlare's messages, not only in process). Defense noise is private
(issue 36): each party reads VFLFLARE_PRIVATE_SEED from its own environment, which the simulator's
processes inherit, so both runs draw the same private noise."""

from __future__ import annotations

import pytest
from simulator_helpers import run_job

from vflflare.attacks.run import attack_run, attack_simulated
from vflflare.privacy.private_randomness import LOCAL_SEED, PRIVATE_SEED_ENV
from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

pytestmark = pytest.mark.simulator

SITES = ["site-1", "site-2"]
CASES = [  # channels: algorithm, short settings, each channel's defense (one-shot's two channels in one job)
    (
        "labels+representations",
        "oneshot",
        {"ssl_epochs": 2},
        [{"label_dp_epsilon": 1.0}, {"representation_noise": 1.0}],
    ),
    (
        "gradients",
        "vanilla",
        {"split_epochs": 2, "split_patience": 2},
        [{"gradient_clip": 0.01, "gradient_noise": 0.5, "gradient_marvell": 1.0, "gradient_keep": 0.5}],
    ),
    # few-shot's pseudo-label probabilities come from the noised labels
    ("probabilities", "fewshot", {"ssl_epochs": 2}, [{"label_dp_epsilon": 0.5}]),
]


@pytest.mark.parametrize("channels, algorithm, short, defenses", CASES, ids=[c[0] for c in CASES])
def test_a_defense_runs_the_same_in_the_simulator(tmp_path, monkeypatch, channels, algorithm, short, defenses):
    monkeypatch.setenv(PRIVATE_SEED_ENV, "simulator-parity")
    defense = {k: v for channel in defenses for k, v in channel.items()}
    simulated = run_job(tmp_path, algorithm, **short, **defense)
    assert "error" not in simulated, simulated.get("error")
    in_process = run_inprocess(make_config({"algorithm": algorithm, **short, **defense}), SITES, None)
    assert simulated["defenses"] == defense
    assert set(simulated["privacy"]["private_randomness"].values()) == {LOCAL_SEED}
    assert simulated["privacy"]["dp"] == in_process["privacy"]["dp"]  # the label party's accounting, as in process
    assert simulated["metrics"] == in_process["metrics"]
    for channel in defenses:  # each channel's defense changed the numbers
        others = {k: v for k, v in defense.items() if k not in channel}
        without = run_inprocess(make_config({"algorithm": algorithm, **short, **others}), SITES, None)
        assert simulated["metrics"] != without["metrics"], channel


def test_the_adaptive_attacks_on_what_a_simulator_runs_parties_received(tmp_path, monkeypatch):
    """Issue 36: `vflflare attack --env sim` attacks the messages the simulator's coordinator relayed and the
    bottom models its sites saved; with the same private seed they are the in-process run's, so every leak
    is the same."""
    monkeypatch.setenv(PRIVATE_SEED_ENV, "attack-parity")
    cfg = make_config(
        {
            "algorithm": "vanilla",
            "split_epochs": 3,
            "split_patience": 3,
            "gradient_clip": 1.0,
            "gradient_normalize": True,
            "gradient_noise": 1.0,
        }
    )
    simulated = attack_simulated(cfg, SITES, None, str(tmp_path))
    in_process = attack_run(cfg, SITES, None)
    assert {"multi_pass_clusters", "known_init_projection", "seed_replay_gradients", "model_completion_200"} <= set(
        simulated["leak"]
    )
    assert simulated["leak"] == pytest.approx(in_process["leak"])
    assert simulated["optimal_leak_bound"] == in_process["optimal_leak_bound"]
