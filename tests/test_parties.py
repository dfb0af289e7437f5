"""Few-shot's site and label parties (which hold one-shot's and split-NN's steps too) on a small real table: breast
cancer split into two column halves."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_breast_cancer

from vflflare.algorithms.blocks.representation_estimation import pseudo_label_probabilities
from vflflare.algorithms.fewshot import FewShotLabel as LabelParty
from vflflare.algorithms.fewshot import FewShotSite as FeatureParty
from vflflare.data.types import FeatureBlock, LabelTables, SiteTables
from vflflare.protocol.views import TabularView
from vflflare.registry import make_config

torch.set_num_threads(1)
SITES = ["site-a", "site-b"]


def build(cfg, site_class: type = FeatureParty, label_class: type = LabelParty) -> tuple[dict, LabelParty]:
    """150 aligned labeled rows, 40 validation rows, 114 test rows; the other 265 rows are split between the
    sites as unaligned rows. Each site shuffles its own rows and standardises its columns locally."""
    x, y = load_breast_cancer(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(y))
    test, aligned, val, rest = perm[:114], perm[114:264], perm[264:304], perm[304:]
    column_halves = [np.arange(0, 15), np.arange(15, 30)]
    parties = {}
    for k, site in enumerate(SITES):
        own = np.random.default_rng(k).permutation(np.concatenate([aligned, val, rest[k::2]]))
        cols = column_halves[k]
        mean, std = x[np.ix_(own, cols)].mean(0), x[np.ix_(own, cols)].std(0)

        def block(rows: np.ndarray) -> FeatureBlock:
            numeric = ((x[np.ix_(rows, cols)] - mean) / std).astype(np.float32)  # noqa: B023 (used at once)
            return FeatureBlock(numeric, np.zeros((len(rows), 0), dtype=np.int64), [])

        tables = SiteTables(
            site, [f"id{r}" for r in own], block(own), [f"id{r}" for r in test], block(test), [f"f{c}" for c in cols]
        )
        party = site_class(site, TabularView(tables), cfg, position=k)
        position = {r: i for i, r in enumerate(own)}
        positions = [np.array([position[r] for r in rows]) for rows in (aligned, val)]
        party.align(*positions, np.arange(len(test)))
        parties[site] = party
    labeled = np.concatenate([val, aligned])  # the label party's own table order differs from the canonical one
    label = label_class(
        LabelTables(
            [f"id{r}" for r in labeled],
            y[labeled].astype(np.int64),
            [f"id{r}" for r in test],
            y[test].astype(np.int64),
            2,
        ),
        SITES,
        cfg,
    )
    label.align(np.arange(len(val), len(labeled)), np.arange(len(val)), np.arange(len(test)))
    return parties, label


def reps_of(parties: dict[str, FeatureParty], part: str) -> dict[str, np.ndarray]:
    return {s: p.representations([part])[part] for s, p in parties.items()}


def run_oneshot(parties: dict[str, FeatureParty], label: LabelParty) -> None:
    grads = label.partial_gradients(reps_of(parties, "aligned"))
    for site, party in parties.items():
        stats = party.client_update(grads[site], label.num_classes)
        assert set(stats) == {"labeled", "unlabeled", "ssl_loss", "pseudo_label_rate"}


def fit(parties: dict[str, FeatureParty], label: LabelParty) -> dict[str, float]:
    return label.fit_classifier({s: p.representations(["aligned", "val", "test"]) for s, p in parties.items()})


@pytest.fixture(scope="module")
def oneshot_trained() -> tuple[dict[str, FeatureParty], LabelParty, dict[str, float]]:
    parties, label = build(make_config(algorithm="fewshot", seed=0))
    run_oneshot(parties, label)
    return parties, label, fit(parties, label)


def test_partial_gradients_match_autograd_and_finite_differences():
    parties, label = build(make_config(algorithm="fewshot", seed=1))
    reps = reps_of(parties, "aligned")
    grads = label.partial_gradients(reps)
    assert all(grads[s].dtype == np.float32 and grads[s].shape == reps[s].shape for s in SITES)

    head = label.new_head(sum(r.shape[1] for r in reps.values()), "partial_gradients").double()
    labels = torch.as_tensor(label.tables.train_labels[40:])
    joint = torch.as_tensor(np.concatenate([reps[s] for s in SITES], axis=1), dtype=torch.float64)

    def loss_at(h: torch.Tensor) -> float:
        return F.cross_entropy(head(h), labels).item()

    h = joint.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(F.cross_entropy(head(h), labels), h)
    ours = np.concatenate([grads[s] for s in SITES], axis=1)
    np.testing.assert_allclose(ours, expected.numpy(), rtol=1e-4, atol=1e-8)
    eps = 1e-6
    for row, col in [(0, 0), (7, 31), (42, 32), (149, 63)]:
        bump = torch.zeros_like(joint)
        bump[row, col] = eps
        numeric = (loss_at(joint + bump) - loss_at(joint - bump)) / (2 * eps)
        site, within = SITES[col // 32], col % 32
        assert grads[site][row, within] == pytest.approx(numeric, rel=1e-3, abs=1e-7)


def test_oneshot_then_classifier_reaches_high_test_auc(oneshot_trained):
    _, label, metrics = oneshot_trained
    assert set(metrics) == {"val_auc", "test_auc", "going_alone"}  # the label party's comparison (issue 40)
    assert metrics["going_alone"]["federated"] == metrics["test_auc"]
    assert label.metric_name == "auc"
    assert metrics["test_auc"] > 0.9


def test_fewshot_probabilities_and_update(oneshot_trained):
    parties, label, _ = oneshot_trained
    aligned, unaligned, val = reps_of(parties, "aligned"), reps_of(parties, "unaligned"), reps_of(parties, "val")
    probs = label.infer_probabilities(aligned, unaligned, val=val)
    predictions = label.unaligned_predictions(aligned, unaligned, val=val)
    for site in SITES:
        p = probs[site]
        local, joint = predictions[site]
        assert p.shape == (len(unaligned[site]),) and p.dtype == np.float32
        assert np.all((p >= 0) & (p <= 1))
        np.testing.assert_array_equal(p, pseudo_label_probabilities(local, joint, label.cfg.fewshot_threshold))
        disagree = local.argmax(1) != joint.argmax(1)
        assert np.all(p[disagree] == 0)
        assert np.all(p[p > 0] > label.cfg.fewshot_threshold)
        assert (p > 0).any()
    for site, party in parties.items():
        stats = party.client_update_fewshot(probs[site])
        assert 0 < stats["pseudo_labeled"] <= int((probs[site] > 0).sum())
        assert stats["labeled"] == 150 + stats["pseudo_labeled"]
        assert stats["unlabeled"] == len(unaligned[site]) - stats["pseudo_labeled"]
    assert fit(parties, label)["test_auc"] > 0.9


def split_epoch(parties: dict[str, FeatureParty], label: LabelParty, order: np.ndarray, batch: int) -> float:
    losses = []
    for start in range(0, len(order), batch):
        rows = order[start : start + batch]
        reps = {s: p.split_forward("aligned", rows) for s, p in parties.items()}
        grads, loss = label.split_step(rows, reps)
        for s, p in parties.items():
            p.split_backward(grads[s])
        losses.append(loss)
    return float(np.mean(losses))


@pytest.mark.parametrize("local_steps", [1, 5])
def test_split_nn_training_improves_val_auc(local_steps):
    parties, label = build(make_config(algorithm="fewshot", seed=2, local_steps=local_steps))
    label.split_begin(keep_classifier=False)
    before = label.evaluate("val", reps_of(parties, "val"))["val_auc"]
    rng = np.random.default_rng(0)
    for _ in range(4):
        split_epoch(parties, label, rng.permutation(150), 32)
    after = label.evaluate("val", reps_of(parties, "val"))["val_auc"]
    assert after > before and after > 0.9


def test_early_stopping_bookkeeping_restores_committed_weights():
    parties, label = build(make_config(algorithm="fewshot", seed=2))
    label.split_begin(keep_classifier=False)
    split_epoch(parties, label, np.arange(150), 32)
    label.keep_candidate()
    label.commit_candidate()
    for party in parties.values():  # the site steps, as the split-NN loop sends them
        party.represent({"parts": ["val"], "keep_candidate": True})
        party.commit({})
    kept_reps = reps_of(parties, "val")
    kept_metric = label.evaluate("val", kept_reps)
    split_epoch(parties, label, np.arange(150), 32)
    assert not np.array_equal(reps_of(parties, "val")["site-a"], kept_reps["site-a"])
    label.restore_best()
    for party in parties.values():
        party.restore({})
    restored = reps_of(parties, "val")
    assert all(np.array_equal(restored[s], kept_reps[s]) for s in SITES)
    assert label.evaluate("val", restored) == kept_metric


def test_same_seed_gives_identical_representations():
    cfg = make_config(algorithm="fewshot", seed=3, ssl_epochs=2)
    runs = []
    for config in [cfg, cfg, dataclasses.replace(cfg, seed=4)]:
        parties, label = build(config)
        run_oneshot(parties, label)
        runs.append(reps_of(parties, "test"))
    assert all(np.array_equal(runs[0][s], runs[1][s]) for s in SITES)
    assert not np.array_equal(runs[0]["site-a"], runs[2]["site-a"])


def test_bad_rows_fail_with_the_site_name():
    parties, _ = build(make_config(algorithm="fewshot"))
    with pytest.raises(ValueError, match="site-a"):
        parties["site-a"].align(np.array([0, 1]), np.array([1]), np.array([0]))
    with pytest.raises(ValueError, match="site-a"):
        parties["site-a"].client_update(np.zeros((3, 32), dtype=np.float32), 2)


def test_state_saved_after_a_phase_resumes_identically(tmp_path):
    """Save every party's state after one-shot's local SSL, load it into freshly built parties, run the
    few-shot update on both: same pseudo-label draws (generator state), same weights (optimiser state)."""
    cfg = make_config(algorithm="fewshot", seed=3, ssl_epochs=1)
    parties, label = build(cfg)
    run_oneshot(parties, label)
    for site, party in parties.items():
        party.state.save(tmp_path / f"{site}.pt")
    label.state.save(tmp_path / "label.pt")

    resumed, resumed_label = build(cfg)  # untrained until loaded
    assert not np.array_equal(reps_of(resumed, "aligned")["site-a"], reps_of(parties, "aligned")["site-a"])
    for site, party in resumed.items():
        party.state.load(tmp_path / f"{site}.pt")
    resumed_label.state.load(tmp_path / "label.pt")

    for run_parties, run_label in ((parties, label), (resumed, resumed_label)):
        aligned, unaligned = reps_of(run_parties, "aligned"), reps_of(run_parties, "unaligned")
        probs = run_label.infer_probabilities(aligned, unaligned)
        for site, party in run_parties.items():
            party.client_update_fewshot(probs[site])
    for part in ("aligned", "unaligned", "test"):
        for site in SITES:
            np.testing.assert_array_equal(reps_of(resumed, part)[site], reps_of(parties, part)[site])
    assert sorted(resumed["site-a"].state) == sorted(parties["site-a"].state)


def test_a_site_whose_local_training_diverges_stops_naming_itself_and_where():
    parties, _ = build(make_config(algorithm="fewshot"))
    party = parties["site-b"]
    assert party.finite_loss(torch.tensor(0.25), "oneshot SSL", 0, 0) == 0.25
    with pytest.raises(FloatingPointError, match=r"site 'site-b': oneshot SSL diverged, loss nan at epoch 3, step 7"):
        party.finite_loss(torch.tensor(float("nan")), "oneshot SSL", 2, 6)


def test_the_label_party_refuses_non_finite_representations():
    parties, label = build(make_config(algorithm="fewshot"))
    reps = reps_of(parties, "aligned")
    reps["site-a"][3, 1] = np.inf
    reps["site-a"][5] = np.nan
    with pytest.raises(ValueError, match=r"site-a sent aligned representations with 33 NaN or infinite values"):
        label.partial_gradients(reps)
    label.split_begin(keep_classifier=False)  # and per batch in split NN
    rows = np.arange(4)
    batch = {s: p.split_forward("aligned", rows) for s, p in parties.items()}
    batch["site-b"][2, 0] = np.nan
    with pytest.raises(ValueError, match=r"site-b sent split-NN batch representations with 1 NaN or infinite"):
        label.split_step(rows, batch)


def test_device_setting_is_checked_and_a_missing_gpu_is_named_at_the_site(monkeypatch):
    from vflflare.config import ConfigError

    with pytest.raises(ConfigError, match="device must be cpu, auto, cuda or cuda:N, got 'gpu'"):
        make_config(algorithm="fewshot", device="gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="site 'site-a': device 'cuda:1' was asked for, but torch sees no CUDA GPU"):
        build(make_config(algorithm="fewshot", device="cuda:1"))
    parties, _ = build(make_config(algorithm="fewshot", device="auto"))  # falls back to the CPU
    assert {str(next(p.encoder.parameters()).device) for p in parties.values()} == {"cpu"}
