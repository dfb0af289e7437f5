"""VFLHLP (Li et al., paper 002): the Eq. 6 loss and the Eq. 8 constraint against hand-computed values,
the active party's labels on its own unaligned rows (`split --active-site-labels`), clear errors for bad
settings and missing local labels, every variant as a config of one plug-in, exact communication counts."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from vflflare import cli
from vflflare.algorithms.vflhlp import VARIANTS, active_submodel, consistency_loss
from vflflare.config import ConfigError
from vflflare.data.loading import DataRequest, load_label_tables
from vflflare.protocol.inprocess import InProcessTransport, run_inprocess
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.registry import make_config
from vflflare.ssl.losses import ScarfInfoNCELoss
from vflflare.tracking import LogTracker

SITES = ["site-1", "site-2"]
FAST = {"label_owner": "site-1", "pretrain_epochs": 2, "active_epochs": 20, "split_epochs": 20}


def test_scarf_loss_matches_eq_6_by_hand():
    z = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    z_tilde = torch.tensor([[3.0, 0.0], [1.0, 1.0]])
    # cosine similarities s_ij = cos(z_i, z~_j): s_11 = 1, s_12 = 1/sqrt2, s_21 = 0, s_22 = 1/sqrt2; tau = 0.5
    r = 1 / math.sqrt(2)
    by_hand = -0.5 * (
        math.log(math.exp(1 / 0.5) / (0.5 * (math.exp(1 / 0.5) + math.exp(r / 0.5))))
        + math.log(math.exp(r / 0.5) / (0.5 * (math.exp(0.0) + math.exp(r / 0.5))))
    )
    assert ScarfInfoNCELoss(0.5)(z, z_tilde).item() == pytest.approx(by_hand, rel=1e-6)
    with pytest.raises(ValueError, match="temperature"):
        ScarfInfoNCELoss(0.0)


def test_constraint_is_half_the_squared_distance_and_pulls_theta_towards_theta_pretrained():
    theta = torch.tensor([1.0, 2.0], requires_grad=True)
    anchor = torch.tensor([0.0, 4.0], requires_grad=True)
    loss = consistency_loss([theta], [anchor])
    assert loss.item() == pytest.approx(0.5 * (1 + 4))
    loss.backward()
    assert theta.grad.tolist() == [1.0, -2.0]  # theta - Theta
    assert anchor.grad is None  # Theta is a constant of the downstream stage


def test_active_submodel_is_the_heads_columns_on_the_active_representation():
    head = torch.nn.Linear(6, 2)  # three parties of width 2, the active one second
    weight, bias = active_submodel(head, 2, 2)
    assert torch.equal(weight, head.weight[:, 2:4]) and bias is head.bias


def split(tmp_path, *args: str) -> str:
    out = tmp_path / "split"
    assert cli.main(["split", "--dataset", "breast_cancer", "--overlap", "150", "--out", str(out), *args]) == 0
    return str(out)


@pytest.mark.parametrize("in_table", [False, True])
def test_split_gives_the_active_site_the_labels_of_its_unaligned_rows(tmp_path, in_table):
    root = split(
        tmp_path, "--label-owner", "site-2", "--active-site-labels", *(["--label-in-table"] if in_table else [])
    )
    own = pd.read_csv(f"{root}/site-2/train.csv", dtype=str)
    tables = load_label_tables("site-2", DataRequest(SITES, root))
    assert sorted(tables.train_ids) == sorted(own["id"])  # aligned and unaligned rows alike
    other = pd.read_csv(f"{root}/site-1/train.csv", dtype=str)
    assert not set(tables.train_ids) & (set(other["id"]) - set(own["id"]))  # nothing of the other site's own rows


def test_active_site_labels_need_a_site_owner(tmp_path, capsys):
    assert (
        cli.main(
            [
                "split",
                "--dataset",
                "breast_cancer",
                "--overlap",
                "150",
                "--out",
                str(tmp_path / "s"),
                "--active-site-labels",
            ]
        )
        == 2
    )
    assert "active-site labels need a site label owner" in capsys.readouterr().err


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"beta": -1.0}, "algorithm .vflhlp.: beta must be >= 0"),
        ({"label_owner": "server"}, "label_owner must be a site"),
        ({"variant": "vflhlp_x"}, "variant must be one of"),
    ],
)
def test_bad_settings_fail_naming_the_key(setting, message):
    with pytest.raises(ConfigError, match=message):
        make_config(algorithm="vflhlp", **{**FAST, **setting})


def test_without_labels_on_its_unaligned_rows_the_active_site_fails_naming_itself_and_the_column(tmp_path):
    root = split(tmp_path, "--label-owner", "site-2", "--label-in-table")  # labels of aligned rows only
    with pytest.raises(
        ValueError,
        match="site 'site-2': VFLHLP's active party needs the labels of its unaligned "
        r"rows too, but its labels \(column 'label' of .*site-2/train.csv\) cover "
        "none of its 152 unaligned training rows",
    ):
        run_inprocess(make_config(algorithm="vflhlp", **{**FAST, "label_owner": "site-2"}), SITES, root)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_runs_with_exact_communication_counts(variant):
    result = run_inprocess(make_config(algorithm="vflhlp", variant=variant, **FAST), SITES, None)
    assert "error" not in result, result.get("error")
    assert result["metrics"]["test_auc"] >= 0.9, result["metrics"]
    counts = {
        s: {"uploads": c["uploads"], "downloads": c["downloads"]}
        for s, c in result["communication"]["per_site"].items()
    }
    assert result["expected_communication"] == counts
    assert result["communication"]["per_phase"]["local_pretraining"]["uploads"] == 0  # (1), (2): nothing leaves
    federated = VARIANTS[variant][2]
    assert ("split_training" in result["communication"]["per_phase"]) == federated
    if not federated:  # Local-A: no federation at all
        assert all(c["uploads"] == c["downloads"] == 0 for c in counts.values())


def run_keeping_sites(cfg) -> tuple[dict, dict[str, SiteRuntime]]:
    runtimes = {s: SiteRuntime(s, None) for s in SITES}
    result = run_algorithm(InProcessTransport(runtimes), cfg, lambda: None, LogTracker("test"))
    return result, runtimes


def distance_to_anchor(runtime: SiteRuntime) -> float:
    party = runtime.party
    return consistency_loss(list(party.encoder.parameters()), list(party.state["anchor_encoder"].parameters())).item()


def head_distance(runtime: SiteRuntime) -> float:
    label = runtime.label
    sub = active_submodel(label.state["classifier"], 0, label.cfg.representation_width)
    return consistency_loss(sub, list(runtime.party.state["anchor_head"].parameters())).item()


def test_beta_pulls_the_active_bottom_and_head_towards_the_pretrained_local_model():
    far, loose = run_keeping_sites(make_config(algorithm="vflhlp", beta=0.0, **FAST))
    near, tight = run_keeping_sites(make_config(algorithm="vflhlp", beta=100.0, **FAST))
    assert "error" not in far and "error" not in near
    assert distance_to_anchor(tight["site-1"]) < 0.2 * distance_to_anchor(loose["site-1"])
    assert head_distance(tight["site-1"]) < 0.5 * head_distance(loose["site-1"])
    assert "anchor_encoder" not in tight["site-2"].party.state  # the passive party only pretrains


def test_under_label_dp_the_active_party_pretrains_on_randomized_labels():
    """Issue 36: with label_dp_epsilon every label the active party trains on, aligned or its own, has gone
    through randomized response, so what it sends afterwards is label-DP by post-processing."""
    result, runtimes = run_keeping_sites(make_config(algorithm="vflhlp", label_dp_epsilon=1.0, **FAST))
    assert "error" not in result, result.get("error")
    party, label = runtimes["site-1"].party, runtimes["site-1"].label
    rows, labels = party.local_labeled_rows()
    aligned = len(party.rows_of("aligned"))
    assert torch.equal(labels[:aligned], label.part_labels("aligned"))  # the label party's randomized ones
    truth = dict(zip(label.tables.train_ids, label.tables.train_labels.tolist()))
    true = torch.as_tensor([truth[party.view.train_ids[r]] for r in rows.tolist()])
    kept = float((labels == true).float().mean())
    keep = math.exp(1.0) / (math.exp(1.0) + 1)  # the coins are OS entropy: allow 4.5 binomial standard deviations
    assert kept == pytest.approx(keep, abs=4.5 * (keep * (1 - keep) / len(true)) ** 0.5)
