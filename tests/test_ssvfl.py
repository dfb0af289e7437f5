"""SS-VFL (Castiglia et al.): local contrastive pretraining at a site, and the SS-VFL-I / SS-VFL-C flows
in-process (same phases and accounting as in NVFlare)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from test_parties import build as build_parties

from vflflare.algorithms.ssvfl import PretrainingSite
from vflflare.protocol.alignment import AlignmentError, holdout
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.views import TabularView
from vflflare.registry import make_config

torch.set_num_threads(1)
SITES = ["site-1", "site-2"]
REP_DIM, FLOAT32 = 32, 4


def build(cfg):
    return build_parties(cfg, site_class=PretrainingSite)


class Recorder:
    def __init__(self) -> None:
        self.scalars: dict[str, list[float]] = {}

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.setdefault(tag, []).append(value)

    def info(self, message: str) -> None:
        pass


def _weights(party) -> list[torch.Tensor]:
    return [p.detach().clone() for p in party.encoder.parameters()]


# ---------------------------------------------------------------------------------------- the site
def test_pretraining_uses_the_training_rows_only_and_lowers_the_contrastive_loss():
    cfg = make_config(algorithm="ssvfl_i", pretrain_epochs=8)
    parties, _ = build(cfg)
    party = parties["site-a"]
    party.tracker = recorder = Recorder()
    before = _weights(party)
    stats = party.pretrain()
    n_train, n_val = party.view.num_rows("train"), len(party.rows_of("val"))
    assert stats["rows"] == n_train - n_val  # aligned + unaligned, validation held out
    assert stats["steps"] == 8 * (stats["rows"] // cfg.pretrain_batch_size)
    losses = recorder.scalars["pretrain/contrastive_loss"]
    assert len(losses) == 8 and losses[-1] < losses[0]
    assert any(not torch.equal(a, b) for a, b in zip(before, _weights(party)))


def test_pretraining_never_sees_validation_or_test_features():
    cfg = make_config(algorithm="ssvfl_i", pretrain_epochs=2)
    plain, _ = build(cfg)
    changed, _ = build(cfg)
    party = changed["site-a"]
    val = party.rows_of("val").numpy()
    tables = party.view.tables
    numeric = tables.train.numeric.copy()
    numeric[val] = 1e3  # wildly different validation features
    party.view = TabularView(dataclasses.replace(
        tables, train=dataclasses.replace(tables.train, numeric=numeric),
        test=dataclasses.replace(tables.test, numeric=tables.test.numeric * 0 + 7)))  # fmt: skip
    plain["site-a"].pretrain()
    party.pretrain()
    for a, b in zip(_weights(plain["site-a"]), _weights(party)):
        assert torch.equal(a, b)


def test_labeled_fraction_keeps_the_first_rows_of_the_canonical_order():
    order = list(range(100))
    labels = [i % 2 for i in order]
    train, val = holdout(order, labels, 0.2, 2, "server", "", labeled_fraction=0.1)
    # validation is carved out of the 10 labeled rows, not out of all 100
    assert val == order[:2] and train == order[2:10]
    with pytest.raises(AlignmentError, match="labeled_fraction 0.01 keeps 1 of 100"):
        holdout(order, labels, 0.2, 2, "server", "", labeled_fraction=0.01)
    with pytest.raises(ValueError, match="labeled_fraction"):
        make_config(labeled_fraction=0.0)


# ---------------------------------------------------------------------------------------- the flows
def _counts(results, key):
    return {site: row[key] for site, row in results["communication"]["per_site"].items()}


def test_ssvfl_i_one_upload_no_download_per_site():
    results = run_inprocess(make_config(algorithm="ssvfl_i"), SITES, None)
    assert results["metrics"]["test_auc"] >= 0.9 and results["metrics"]["val_auc"] >= 0.9, results["metrics"]
    assert _counts(results, "uploads") == {"site-1": 1, "site-2": 1}
    assert _counts(results, "downloads") == {"site-1": 0, "site-2": 0}
    rows = results["rows"]
    final = (rows["aligned_train"] + rows["val"] + rows["test"]) * REP_DIM * FLOAT32
    assert _counts(results, "payload_bytes") == {"site-1": final, "site-2": final}
    phases = results["communication"]["per_phase"]
    assert phases["local_pretraining"]["uploads"] == phases["local_pretraining"]["downloads"] == 0
    assert phases["representations"]["uploads"] == 2
    assert [p["name"] for p in results["phases"]][:3] == ["setup", "local_pretraining", "representations"]
    # pretraining uses more rows than the labeled aligned ones (the unaligned rows too)
    assert all(n > rows["aligned_train"] for n in results["training"]["pretrain_rows"].values())


def test_ssvfl_i_four_sites_and_site_label_owner():
    sites = ["site-1", "site-2", "site-3", "site-4"]
    results = run_inprocess(make_config(algorithm="ssvfl_i"), sites, None)
    assert results["metrics"]["test_auc"] >= 0.9, results["metrics"]
    assert _counts(results, "uploads") == dict.fromkeys(sites, 1)
    assert _counts(results, "downloads") == dict.fromkeys(sites, 0)
    owned = run_inprocess(make_config(algorithm="ssvfl_i", label_owner="site-2"), SITES, None)
    assert owned["metrics"]["test_auc"] >= 0.9
    # site-1 uploads once; the coordinator relays everything to site-2, which also uploads once itself
    assert _counts(owned, "uploads")["site-1"] == 1 and _counts(owned, "downloads")["site-1"] == 0


def _assert_split_counts(results, n_sites, batch_size=32):
    epochs = results["training"]["split_epochs"]
    batches = math.ceil(results["rows"]["aligned_train"] / batch_size)
    phases = results["communication"]["per_phase"]
    assert phases["local_pretraining"]["uploads"] == phases["local_pretraining"]["downloads"] == 0
    # per epoch and site: one forward upload and one gradient download per batch, one validation upload
    assert phases["split_training"]["downloads"] == n_sites * epochs * batches
    assert phases["split_training"]["uploads"] == n_sites * (epochs * batches + epochs)
    assert set(_counts(results, "uploads").values()) == {epochs * batches + epochs + 1}  # + final val/test


def test_ssvfl_c_split_nn_counts_from_pretrained_bottoms():
    results = run_inprocess(make_config(algorithm="ssvfl_c", split_epochs=10, split_patience=5), SITES, None)
    assert results["metrics"]["test_auc"] >= 0.9, results["metrics"]
    # the first epoch always improves on nothing, so early stopping needs patience + 1 epochs at least
    assert 5 < results["training"]["split_epochs"] <= 10
    _assert_split_counts(results, 2)
    # the split-NN rounds start from the pretrained f_k: without pretraining the numbers differ
    cold = run_inprocess(
        make_config(algorithm="ssvfl_c", split_epochs=10, split_patience=5, pretrain_epochs=0), SITES, None
    )
    assert cold["metrics"] != results["metrics"]


def test_ssvfl_c_four_sites():
    sites = ["site-1", "site-2", "site-3", "site-4"]
    results = run_inprocess(make_config(algorithm="ssvfl_c", split_epochs=5, split_patience=5), sites, None)
    assert results["metrics"]["test_auc"] >= 0.85, results["metrics"]
    _assert_split_counts(results, 4)


@pytest.mark.parametrize("label_owner", ["server", "site-1"])
def test_labeled_fraction_shrinks_the_labeled_rows_not_the_pretraining_rows(label_owner):
    full = run_inprocess(make_config(algorithm="ssvfl_i", label_owner=label_owner), SITES, None)
    part = run_inprocess(make_config(algorithm="ssvfl_i", label_owner=label_owner, labeled_fraction=0.25), SITES, None)
    labeled = math.ceil(0.25 * (full["rows"]["aligned_train"] + full["rows"]["val"]))
    assert (
        part["rows"]["val"] == math.ceil(0.2 * labeled)
        and part["rows"]["aligned_train"] == labeled - part["rows"]["val"]
    )
    assert part["rows"]["test"] == full["rows"]["test"]
    # every local row but the validation rows is pretrained on, labeled or not
    fewer_val = full["rows"]["val"] - part["rows"]["val"]
    assert part["training"]["pretrain_rows"] == {s: n + fewer_val for s, n in full["training"]["pretrain_rows"].items()}
    assert part["metrics"]["test_auc"] >= 0.85, part["metrics"]


@pytest.mark.parametrize("label_owner", ["server", "site-1"])
def test_labeled_fraction_with_psi_alignment(tmp_path, label_owner):
    from test_psi import hashed_and_psi_runs

    hashed, psi = hashed_and_psi_runs(
        tmp_path, algorithm="ssvfl_i", label_owner=label_owner, labeled_fraction=0.25, pretrain_epochs=2
    )
    # the sites and the label party cut the same rows (setup fails on a count mismatch)
    assert psi["rows"] == hashed["rows"] == {"aligned_train": 30, "val": 8, "test": 114}
