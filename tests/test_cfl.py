"""CFL (Ginanjar et al., paper 003): the silo space (`split --silo-space`, its four settings, equal
widths), tuple representations, the Eq. 1-3 loss and Pearson reordering against hand-computed values,
the union setup, FedAvg leaving every silo with the same weights, exact counts, and clear errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from vflflare import cli
from vflflare.config import ConfigError
from vflflare.data.pearson_order import pearson_order
from vflflare.data.split.silo import encode_table, equal_slices, silo_rows
from vflflare.protocol.inprocess import InProcessTransport, run_inprocess
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.silo_setup import union_positions
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.registry import make_config
from vflflare.ssl.losses import NTXentLoss
from vflflare.ssl.losses.cfl import CFLLoss
from vflflare.ssl.tuple_views import tuple_views
from vflflare.tracking import LogTracker

SILOS = ["site-1", "site-2", "site-3"]
FAST = {"cfl_rounds": 3, "cfl_hidden": 32}


def silo_space(tmp_path, *args: str) -> str:
    out = tmp_path / "silos"
    assert (
        cli.main(["split", "--dataset", "breast_cancer", "--sites", "3", "--silo-space", "--out", str(out), *args]) == 0
    )
    return str(out)


def test_tuple_views_mask_at_z_and_one_minus_z_and_add_noise_only_to_b():
    x = torch.ones(2000, 10)
    (ia, ib), (ja, jb) = tuple_views(x, 0.2, 0.1, torch.Generator().manual_seed(0))
    assert set(ia.unique().tolist()) <= {0.0, 1.0} and set(ja.unique().tolist()) <= {0.0, 1.0}
    assert (ia == 0).float().mean().item() == pytest.approx(0.2, abs=0.01)
    assert (ja == 0).float().mean().item() == pytest.approx(0.8, abs=0.01)
    assert (ib - torch.round(ib)).abs().max() > 0.05  # Gaussian noise on the b clone
    with pytest.raises(ValueError, match="noise rate"):
        tuple_views(x, 1.5, 0.1, torch.Generator())


def test_cfl_loss_parts_by_hand():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    a = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    b = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    parts = CFLLoss(0.5).parts(a, b, x)
    assert parts["reconstruction"].item() == pytest.approx(0.5 * (0.25 + 0.25))
    assert parts["distance"].item() == pytest.approx(1.0)  # |a - b| = 1 for both rows
    assert parts["contrastive"].item() == pytest.approx(NTXentLoss(0.5)(a, b).item())
    assert CFLLoss(0.5)(a, b, x).item() == pytest.approx(sum(p.item() for p in parts.values()))


def test_pearson_order_by_correlation_with_the_first_column():
    first = np.array([1.0, 2.0, 3.0, 4.0])
    x = np.stack([first, -first, np.ones(4), first + np.array([0.0, 1.0, -1.0, 0.0])], axis=1)
    # corr with column 0: -1, 0 (constant), 0.8 -> order 0 (itself), 3, 2, 1
    assert pearson_order(x).tolist() == [0, 3, 2, 1]


def test_equal_slices_pad_the_last_silo():
    slices = equal_slices([f"c{i}" for i in range(104)], 5)
    assert [len(s) for s in slices] == [21] * 5 and slices[-1][-1] == "pad_0"


def test_encoding_leaves_out_rows_with_missing_values():
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0], "colour": ["red", "?", "blue"]})
    encoded, kept = encode_table(frame, ["colour"])
    assert kept.tolist() == [0, 2] and sorted(encoded.columns) == ["a", "colour_blue", "colour_red"]


@pytest.mark.parametrize("setting, kept_share", [("standard", [1, 1, 1, 1]), ("data_imbalance", [0.5, 1, 1, 1])])
def test_silo_settings_drop_rows_as_the_paper_says(setting, kept_share):
    labels = np.repeat([0, 1], 500)
    rows = silo_rows(labels, 4, setting, np.random.default_rng(0))
    assert [len(r) / 1000 for r in rows] == kept_share


def test_class_imbalance_halves_half_of_the_classes_at_a_quarter_of_the_silos():
    labels = np.repeat(np.arange(10), 100)
    rows = silo_rows(labels, 4, "class_imbalance", np.random.default_rng(0))
    per_class = np.bincount(labels[rows[0]], minlength=10)
    assert sorted(per_class.tolist()) == [50] * 5 + [100] * 5
    assert all(len(r) == 1000 for r in rows[1:])


def test_union_positions_mark_missing_rows():
    assert union_positions(["b", "c"], ["a", "b", "c"]).tolist() == [-1, 0, 1]


def test_split_writes_each_silo_its_slice_and_its_own_labels(tmp_path):
    root = silo_space(tmp_path, "--silo-setting", "data_imbalance")
    train = {s: pd.read_csv(f"{root}/{s}/train.csv") for s in SILOS}
    test = {s: pd.read_csv(f"{root}/{s}/test.csv") for s in SILOS}
    assert {len(t.columns) for t in train.values()} == {12}  # id, 10 columns, label
    assert len(train["site-1"]) == round(0.5 * len(train["site-2"]))
    assert all(t["id"].tolist() == test["site-1"]["id"].tolist() for t in test.values())
    assert not set(train["site-1"].columns[1:-1]) & set(train["site-2"].columns[1:-1])


def run_keeping_sites(cfg, root: str) -> tuple[dict, dict[str, SiteRuntime]]:
    runtimes = {s: SiteRuntime(s, root) for s in SILOS}
    return run_algorithm(InProcessTransport(runtimes), cfg, lambda: None, LogTracker("test")), runtimes


def test_cfl_runs_with_exact_counts_and_leaves_every_silo_the_average(tmp_path):
    root = silo_space(tmp_path, "--silo-setting", "mixed")
    result, runtimes = run_keeping_sites(make_config(algorithm="cfl", **FAST), root)
    assert "error" not in result, result.get("error")
    assert result["metrics"]["test_accuracy"] >= 0.9, result["metrics"]
    # every silo scored its own model, and the job's accuracy is their mean (LL's likewise)
    for method in ("", "ll_"):
        per_silo = [result["metrics"][f"{s}_{method}test_accuracy"] for s in SILOS]
        assert all(0.85 <= a <= 1.0 for a in per_silo), result["metrics"]
        assert result["metrics"][f"{method}test_accuracy"] == pytest.approx(np.mean(per_silo), abs=1e-12)
    counts = {
        s: {"uploads": c["uploads"], "downloads": c["downloads"]}
        for s, c in result["communication"]["per_site"].items()
    }
    assert counts == result["expected_communication"] == {s: {"uploads": 3, "downloads": 3} for s in SILOS}
    weights = [runtimes[s].party.state["autoencoder"].state_dict() for s in SILOS]
    for name, value in weights[0].items():
        assert all(torch.allclose(value, other[name]) for other in weights[1:]), name
    assert result["rows"]["union"] > result["rows"]["in_every_silo"]  # the data drop makes null representations


def test_unequal_slices_fail_saying_why_fedavg_needs_equal_widths(tmp_path):
    root = silo_space(tmp_path)
    for table in ("train", "test"):
        frame = pd.read_csv(f"{root}/site-3/{table}.csv")
        frame.drop(columns=[frame.columns[1]]).to_csv(f"{root}/site-3/{table}.csv", index=False)
    with pytest.raises(
        ValueError,
        match=r"CFL averages the silos' encoders weight by weight, so every silo needs the "
        r"same number of input columns; got \{'site-1': 10, 'site-2': 10, 'site-3': 9\}"
        r".*Pad the narrower slices .* --silo-space",
    ):
        run_inprocess(make_config(algorithm="cfl", **FAST), SILOS, root)


def test_cfl_refuses_the_embedded_default_and_aligned_splits(tmp_path):
    with pytest.raises(ValueError, match="site 'site-1': algorithm 'cfl' trains on a silo space"):
        run_inprocess(make_config(algorithm="cfl", **FAST), SILOS, None)
    aligned = tmp_path / "aligned"
    assert (
        cli.main(["split", "--dataset", "breast_cancer", "--sites", "3", "--overlap", "150", "--out", str(aligned)])
        == 0
    )
    with pytest.raises(ValueError, match="is an aligned split .* needs each site's own labels"):
        run_inprocess(make_config(algorithm="cfl", **FAST), SILOS, str(aligned))


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"label_owner": "site-1"}, "label_owner does not apply to CFL"),
        ({"cfl_noise_rate": 2.0}, r"cfl_noise_rate must be in \[0, 1\]"),
    ],
)
def test_bad_settings_fail_naming_the_key(setting, message):
    with pytest.raises(ConfigError, match=message):
        make_config(algorithm="cfl", **setting)


def test_silo_space_options_that_do_not_apply_are_refused(tmp_path, capsys):
    assert (
        cli.main(
            ["split", "--dataset", "breast_cancer", "--silo-space", "--overlap", "10", "--out", str(tmp_path / "x")]
        )
        == 2
    )
    assert "--overlap, --label-owner" in capsys.readouterr().err


def test_without_fedavg_each_silo_trains_alone_and_nothing_is_sent(tmp_path):
    root = silo_space(tmp_path)
    result, runtimes = run_keeping_sites(make_config(algorithm="cfl", cfl_fedavg=False, **FAST), root)
    assert all(c["uploads"] == c["downloads"] == 0 for c in result["communication"]["per_site"].values())
    first, second = (runtimes[s].party.state["autoencoder"].state_dict() for s in SILOS[:2])
    assert not torch.allclose(first["decoder.weight"], second["decoder.weight"])
